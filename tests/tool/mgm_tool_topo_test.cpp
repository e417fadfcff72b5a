// `mgm topo`: real matrices reproduced, NIC cells and names, bandwidth sources, and bad files
// refused with the cell named.
#include <mgm/topology/topology.hpp>

#include "shared_data.hpp"
#include "tool/run_mgm.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

using namespace mgm_tool_test;

TEST_CASE("mgm topo --file reproduces every real matrix", "[tool][realdata]") {
  const auto topologies = mgm_test::shared_data("topologies");
  if (topologies.empty()) return;
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator{topologies}) {
    if (!e.is_regular_file()) continue;
    INFO(e.path().string());
    const auto original = mgm::parse_smi_topology(slurp(e.path()));
    const auto r = run_mgm("topo --file '" + e.path().string() + "'");
    REQUIRE(r.rc == 0);
    const auto printed = mgm::parse_smi_topology(r.out);
    REQUIRE(printed.gpu_count() == original.gpu_count());
    for (int a = 0; a < static_cast<int>(original.gpu_count()); ++a) {
      CHECK(printed.gpus()[static_cast<std::size_t>(a)].cpu_affinity == original.gpus()[static_cast<std::size_t>(a)].cpu_affinity);
      for (int b = 0; b < static_cast<int>(original.gpu_count()); ++b) {
        CHECK(printed.path(mgm::device_id{a}, mgm::device_id{b}).label() ==
              original.path(mgm::device_id{a}, mgm::device_id{b}).label());
      }
    }
    ++files;
  }
  CHECK(files == 11);
  // NCCL XML too, and bandwidths on request.
  for (const auto& e : fs::directory_iterator{topologies / "nccl-xml"}) {
    INFO(e.path().string());
    const auto r = run_mgm("topo --bandwidth --file '" + e.path().string() + "'");
    CHECK(r.rc == 0);
    CHECK(r.out.find("GPU0") != std::string::npos);
  }
  const auto bad = run_mgm("topo --file /nonexistent/topo.txt");
  CHECK(bad.rc == 2);
  CHECK(bad.err.find("/nonexistent/topo.txt: no such file") != std::string::npos);
}

TEST_CASE("mgm topo takes the file as its one argument too", "[tool][realdata]") {
  const auto topologies = mgm_test::shared_data("topologies");
  if (topologies.empty()) return;
  const std::string file = (topologies / "topo_dgx1_v100_8gpu_hybridcubemesh_oneflow_dlperf.txt").string();
  const auto named = run_mgm("topo --bandwidth --file '" + file + "'");
  const auto positional = run_mgm("topo '" + file + "' --bandwidth");
  REQUIRE(named.rc == 0);
  REQUIRE(positional.rc == 0);
  CHECK(positional.out == named.out);
  const auto bad = run_mgm("topo /nonexistent/topo.txt");
  CHECK(bad.rc == 2);
  CHECK(bad.err.find("/nonexistent/topo.txt: no such file") != std::string::npos);
  const auto two = run_mgm("topo '" + file + "' '" + file + "'");
  CHECK(two.rc == 1);
}

// Issue 15: NIC rows, --json's NICs, NUMA IDs and bandwidth sources, NVLink generations, headers.
TEST_CASE("mgm topo: NIC-to-NIC cells, --json with NICs, GPU NUMA IDs and bandwidth sources", "[tool]") {
  const auto dir = scratch();
  const auto file = (dir / "nics.txt").string();
  std::ofstream{file} << "        GPU0    GPU1    NIC0    NIC1    NIC2NIC3    CPU Affinity    NUMA Affinity   GPU NUMA ID\n"
                         "GPU0     X      NV6     PIX     PXB     SYSSYS     0-71    0,5-11  4\n"
                         "GPU1    NV6      X      SYS     SYS     PIXNODE    72-143  1,13-19 12\n"
                         "NIC0    PIX     SYS      X      PXB     SYSSYS\n"
                         "NIC1    PXB     SYS     PXB      X      SYSSYS\n"
                         "NIC2    SYS     PIX     SYS     SYS      X      NODE\n"
                         "NIC3    SYS     NODE    SYS     SYS     NODE     X\n"
                         "\nNIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n  NIC2: mlx5_2\n  NIC3: mlx5_3\n";
  const auto r = run_mgm("topo --file '" + file + "'");
  REQUIRE(r.rc == 0);
  const auto printed = mgm::parse_smi_topology(r.out);
  REQUIRE(printed.nics().size() == 4);
  CHECK(printed.nic_path(0, 1)->label() == "PXB");  // was printed as SYS
  CHECK(printed.nic_path(2, 3)->label() == "NODE");
  CHECK(printed.nics().at(2).device == "mlx5_2");
  CHECK(printed.gpu(mgm::device_id{1}).gpu_numa_id == 12);
  CHECK(r.out.find("NIC3: mlx5_3") != std::string::npos);

  const auto j = run_mgm("--json topo --bandwidth --file '" + file + "'");
  REQUIRE(j.rc == 0);
  const auto doc = nlohmann::json::parse(j.out);
  REQUIRE(doc["nics"].size() == 4);
  CHECK(doc["nics"][0]["name"] == "NIC0");
  CHECK(doc["nics"][0]["device"] == "mlx5_0");
  CHECK(doc["nics"][0]["to_gpu"] == nlohmann::json::array({"PIX", "SYS"}));
  CHECK(doc["nics"][0]["to_nic"] == nlohmann::json::array({"X", "PXB", "SYS", "SYS"}));
  CHECK(doc["nics"][3]["to_nic"][2] == "NODE");
  CHECK(doc["gpus"][0]["gpu_numa_id"] == 4);
  CHECK(doc["gpus"][1]["numa_node"] == 1);
  CHECK(doc["gpus"][1]["numa_affinity"] == "1,13-19");
  const auto& cell = doc["links"][0][1];
  CHECK(cell["label"] == "NV6");
  CHECK(cell["bandwidth_gb_per_s"].get<double>() == Approx(6 * 20.0));  // unknown generation: NVLink 2's 20, the slowest with 6 links
  CHECK(cell["bandwidth_source"] == "nominal");
  CHECK(cell["nvlink_generation"] == "unknown");
  CHECK_FALSE(cell.contains("gbps"));  // renamed: bandwidth_gb_per_s
  CHECK_FALSE(doc["links"][0][0].contains("bandwidth_gb_per_s"));
  // Without a GPU NUMA ID it is null, not 0.
  const auto sim = nlohmann::json::parse(run_mgm("--sim dgx-h100 --json topo --bandwidth").out);
  CHECK(sim["gpus"][0]["gpu_numa_id"].is_null());
  CHECK(sim["links"][0][1]["nvlink_generation"] == "NVLink 4");
  CHECK(sim["links"][0][1]["bandwidth_gb_per_s"].get<double>() == Approx(18 * 20.6));
  CHECK(sim["nics"].empty());
}

TEST_CASE("mgm topo --bandwidth names the NVLink generation, or says it is unknown", "[tool]") {
  const auto sim = run_mgm("--sim dgx-h100 topo --bandwidth");
  REQUIRE(sim.rc == 0);
  CHECK(sim.out.find("370.8n") != std::string::npos);
  CHECK(sim.out.find("NVLink generation: NVLink 4") != std::string::npos);
  const auto file = (scratch() / "nv18.txt").string();
  std::ofstream{file} << "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV18\t0-55\nGPU1\tNV18\t X \t0-55\n";
  const auto r = run_mgm("topo --bandwidth --file '" + file + "'");
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("370.8n") != std::string::npos);  // the same figure as the preset (it was 360.0)
  CHECK(r.out.find("NVLink generation: unknown") != std::string::npos);
}

TEST_CASE("mgm topo --file: a wrong header or cell is named, exit 2, no source path", "[tool]") {
  const auto dir = scratch();
  const std::vector<std::pair<std::string, std::string>> cases{
      {"        GPU1    GPU2\nGPU1     X      NV1\nGPU2    NV1      X\n", "the header line 'GPU1 GPU2' has no GPU0 column"},
      {"\tGPU0\tGPU1\nGPU0\t X \tNVX\nGPU1\tNVX\t X \n", "line 2, column 10: 'NVX' in the column of GPU1 is not a link label"},
      {"\tGPU0\tGPU1\nGPU0\t X \tNV1\nGPU1\tNV2\t X \n", "GPU1-GPU0 is NV2 but GPU0-GPU1 (line 2) is NV1"},
  };
  int k = 0;
  for (const auto& [text, says] : cases) {
    const auto file = (dir / ("bad" + std::to_string(k++) + ".txt")).string();
    std::ofstream{file} << text;
    const auto r = run_mgm("topo --file '" + file + "'");
    INFO(r.err);
    CHECK(r.rc == 2);
    CHECK(r.err.find(says) != std::string::npos);
    CHECK(r.err.find(".cpp") == std::string::npos);
    CHECK(r.err.find(".hpp") == std::string::npos);
  }
}

TEST_CASE("mgm topo --file: the real files' NIC rows and NIC names", "[tool][realdata]") {
  const auto topologies = mgm_test::shared_data("topologies");
  if (topologies.empty()) return;
  const auto b200 = (topologies / "topo_gcp_a4_8x_b200_nv18_8nic_dranet.txt").string();
  const auto r = run_mgm("topo --file '" + b200 + "'");
  REQUIRE(r.rc == 0);
  const auto printed = mgm::parse_smi_topology(r.out);
  const auto original = mgm::parse_smi_topology(slurp(b200));
  REQUIRE(printed.nics().size() == 8);
  for (std::size_t a = 0; a < 8; ++a) {
    CHECK(printed.nics()[a].device == original.nics()[a].device);
    for (std::size_t b = 0; b < 8; ++b) CHECK(printed.nic_path(a, b)->label() == original.nic_path(a, b)->label());
  }
  CHECK(printed.nic_path(0, 1)->label() == "PIX");
  CHECK(printed.nic_path(0, 2)->label() == "NODE");
  const auto j = nlohmann::json::parse(run_mgm("--json topo --file '" + b200 + "'").out);
  CHECK(j["nics"][7]["device"] == "mlx5_7");
  CHECK(j["nics"][6]["to_nic"][7] == "PIX");
  const auto gh = nlohmann::json::parse(
      run_mgm("--json topo --file '" + (topologies / "topo_hpe_cray_ex_4x_gh200_nv6_gpunumaid_hpcaienvs.txt").string() + "'").out);
  CHECK(gh["gpus"][3]["gpu_numa_id"] == 28);
}
