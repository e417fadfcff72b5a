// Every `nvidia-smi topo -m` file of ../shared/data/topologies, against values written by hand
// from the files (not derived by the parser). Label realdata: skipped when ../shared is absent.
#include <mgm/error.hpp>
#include <mgm/topology/topology.hpp>

#include "shared_data.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mgm/sim/machine.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

using mgm::device_id;

using mgm_test::slurp;

namespace {

struct expected {
  const char* file;
  int gpus;
  std::vector<const char*> upper;  ///< labels of the pairs (i < j), row by row
  std::vector<std::optional<int>> numa;
  std::size_t nics;
  const char* cpu_affinity_gpu0;
};

const std::vector<expected>& files() {
  using o = std::optional<int>;
  const o unknown = std::nullopt;
  static const std::vector<expected> all{
      {"topo_alcf_polaris_4x_a100_nv4_nps4.txt", 4, {"NV4", "NV4", "NV4", "NV4", "NV4", "NV4"}, {3, 2, 1, 0}, 2, "24-31,56-63"},
      {"topo_asus_esc8000a_e12_4x_rtx6000ada_4nic_stelline.txt", 4, {"NODE", "SYS", "SYS", "SYS", "SYS", "NODE"}, {0, 0, 1, 1}, 4, "0-31"},
      {"topo_dgx1_v100_8gpu_hybridcubemesh_oneflow_dlperf.txt",
       8,
       {"NV1", "NV1", "NV2", "NV2", "SYS", "SYS", "SYS", "NV2", "NV1", "SYS", "NV2", "SYS", "SYS", "NV2", "SYS",
        "SYS", "NV1", "SYS", "SYS", "SYS", "SYS", "NV1", "NV1", "NV1", "NV2", "NV2", "NV1", "NV2"},
       {unknown, unknown, unknown, unknown, unknown, unknown, unknown, unknown},
       1,
       "0-11,24-35"},
      {"topo_gcp_a4_8x_b200_nv18_8nic_dranet.txt", 8, std::vector<const char*>(28, "NV18"), {0, 0, 0, 0, 1, 1, 1, 1}, 8, "0-55,112-167"},
      {"topo_h100_8gpu_nv18_stas00_mlengineering.txt", 8, std::vector<const char*>(28, "NV18"), {0, 0, 0, 0, 1, 1, 1, 1}, 0, "0-51,104-155"},
      {"topo_hpe_cray_ex_4x_gh200_nv6_gpunumaid_hpcaienvs.txt", 4, std::vector<const char*>(6, "NV6"), {0, 1, 2, 3}, 0, "0-71"},
      {"topo_legacy_soc_4x_k40m_mlx4_tensorflow_gdr.txt", 4, {"PHB", "SYS", "SYS", "SYS", "SYS", "PHB"}, {unknown, unknown, unknown, unknown}, 1, "0-5"},
      {"topo_princeton_della_2x_a100_2nic_sys.txt", 2, {"SYS"}, {0, 1}, 2, "0-63"},
      {"topo_princeton_traverse_power9_4x_v100_nv3.txt", 4, {"NV3", "SYS", "SYS", "SYS", "SYS", "NV3"}, {0, 0, 8, 8}, 4, "0-63"},
      {"topo_puget_wrx90_2x_rtx6000ada_phb_stelline.txt", 2, {"PHB"}, {0, 0}, 2, "0-23"},
      {"topo_v100sxm2_8gpu_2nic_handaligned_oneflow_hugectr.txt",
       8,
       {"NV1", "NV2", "NV1", "SYS", "SYS", "SYS", "NV2", "NV1", "NV2", "SYS", "SYS", "NV2", "SYS", "NV2", "SYS",
        "NV1", "SYS", "SYS", "NV1", "SYS", "SYS", "SYS", "NV2", "NV2", "NV1", "NV1", "NV2", "NV1"},
       {0, 0, 0, 0, 1, 1, 1, 1},
       2,
       "0-23,48-71"},
  };
  return all;
}

}  // namespace

TEST_CASE("realdata: every nvidia-smi topo -m file parses to the values it shows", "[realdata][topology]") {
  const auto dir = mgm_test::shared_data("topologies");
  if (dir.empty()) return;
  std::size_t checked = 0;
  for (const auto& e : files()) {
    INFO(e.file);
    const auto t = mgm::parse_smi_topology(slurp(dir / e.file));
    REQUIRE(t.gpu_count() == static_cast<std::size_t>(e.gpus));
    std::size_t k = 0;
    for (int a = 0; a < e.gpus; ++a) {
      for (int b = a + 1; b < e.gpus; ++b) {
        INFO("GPU" << a << "-GPU" << b);
        REQUIRE(t.path(device_id{a}, device_id{b}).label() == e.upper.at(k));
        REQUIRE(t.path(device_id{b}, device_id{a}).label() == e.upper.at(k));
        ++k;
      }
    }
    REQUIRE(k == e.upper.size());
    for (int g = 0; g < e.gpus; ++g) REQUIRE(t.gpu(device_id{g}).numa_node == e.numa.at(static_cast<std::size_t>(g)));
    REQUIRE(t.nics().size() == e.nics);
    REQUIRE(t.gpu(device_id{0}).cpu_affinity == e.cpu_affinity_gpu0);
    // Printed in nvidia-smi's layout, it reads back to the same matrix.
    const auto again = mgm::parse_smi_topology(t.to_smi_matrix());
    REQUIRE(again == t);
    REQUIRE(again.nics().size() == e.nics);
    ++checked;
  }
  REQUIRE(checked == 11);
  std::size_t on_disk = 0;
  for (const auto& entry : std::filesystem::directory_iterator{dir}) on_disk += entry.path().extension() == ".txt" ? 1 : 0;
  REQUIRE(on_disk == checked);  // a new file needs its expected values here
}

TEST_CASE("realdata: details the topology files show", "[realdata][topology]") {
  const auto dir = mgm_test::shared_data("topologies");
  if (dir.empty()) return;
  const auto gh = mgm::parse_smi_topology(slurp(dir / "topo_hpe_cray_ex_4x_gh200_nv6_gpunumaid_hpcaienvs.txt"));
  REQUIRE(gh.gpu(device_id{0}).numa_affinity == "0,5-11");
  REQUIRE(gh.gpu(device_id{3}).gpu_numa_id == 28);
  const auto b200 = mgm::parse_smi_topology(slurp(dir / "topo_gcp_a4_8x_b200_nv18_8nic_dranet.txt"));
  REQUIRE(b200.nics().at(0).device == "mlx5_0");
  REQUIRE(b200.nics().at(0).to_gpu.at(1).label() == "PIX");
  REQUIRE(b200.nics().at(7).to_gpu.at(0).label() == "SYS");
  const auto k40 = mgm::parse_smi_topology(slurp(dir / "topo_legacy_soc_4x_k40m_mlx4_tensorflow_gdr.txt"));
  REQUIRE(k40.nics().at(0).device == "mlx4_0");
  REQUIRE(k40.nics().at(0).to_gpu.at(2).label() == "PHB");
}

TEST_CASE("topology text: errors name the line", "[topology]") {
  const auto line_of = [](const std::string& text) -> std::size_t {
    try {
      (void)mgm::parse_smi_topology(text);
    } catch (const mgm::parse_error& e) {
      return e.line();
    }
    return 0;
  };
  REQUIRE(line_of("") == 1);
  REQUIRE(line_of("hello\nworld\n") == 2);
  REQUIRE(line_of("\tGPU0\tGPU1\nGPU0\t X \tNV1\nGPU1\tNV1\n") == 3);           // a short row
  REQUIRE(line_of("\tGPU0\tGPU1\nGPU0\t X \tNV1\nGPU7\tNV1\t X\n") == 3);      // not a column
  REQUIRE(line_of("\tGPU0\tGPU1\nGPU0\t X \tNVX\nGPU1\tNVX\t X\n") == 2);      // a bad label: the cell's line
  REQUIRE_THROWS_WITH(mgm::parse_smi_topology("\tGPU0\tGPU1\nGPU0\t X \tNV1\n"), Catch::Contains("no row for GPU1"));
  const auto t = mgm::parse_smi_topology("$ nvidia-smi topo -m\r\n\tGPU0\tGPU1\tCPU Affinity\r\nGPU0\t X \tSOC\t0-5\r\nGPU1\tSOC\t X \t6-11\r\n");
  REQUIRE(t.path(device_id{0}, device_id{1}).label() == "SYS");
  REQUIRE(t.gpu(device_id{1}).cpu_affinity == "6-11");
  REQUIRE_FALSE(t.gpu(device_id{1}).numa_node.has_value());
}

TEST_CASE("topology: nominal bandwidths follow NCCL's constants, overrides keep their provenance", "[topology]") {
  REQUIRE(mgm::nvlink_gbps_per_link(70) == 20.0);
  REQUIRE(mgm::nvlink_gbps_per_link(86) == 12.0);
  REQUIRE(mgm::nvlink_gbps_per_link(90) == 20.6);
  REQUIRE(mgm::nvlink_gbps_per_link(100) == 40.1);
  REQUIRE(mgm::nvlink_gbps_per_link(89) == 0.0);  // Ada has no NVLink
  REQUIRE(mgm::nvlink_gbps_per_link(0) == 0.0);   // unknown
  REQUIRE(mgm::inter_socket_gbps("GenuineIntel", 0xCF) == 40.0);
  REQUIRE(mgm::inter_socket_gbps("GenuineIntel", 0x55) == 10.0);
  REQUIRE(mgm::inter_socket_gbps("AuthenticAMD") == 16.0);
  std::vector<mgm::gpu_info> gpus(3);
  for (auto& g : gpus) g.compute_capability = 90;
  mgm::topology t{gpus};
  t.set_path(device_id{0}, device_id{1}, mgm::gpu_path::from_label("NV18"));
  t.set_path(device_id{0}, device_id{2}, mgm::gpu_path::from_label("PHB"));
  REQUIRE(t.bandwidth(device_id{0}, device_id{1}).gbps == Approx(18 * 20.6));
  REQUIRE(t.bandwidth(device_id{0}, device_id{2}).gbps == 48.0);  // PCIe Gen5 x16
  REQUIRE(t.bandwidth(device_id{1}, device_id{2}).gbps == 10.0);  // SYS: the default inter-socket figure
  t.set_bandwidth(device_id{0}, device_id{1}, {300.0, mgm::link_provenance::measured});
  REQUIRE(t.bandwidth(device_id{0}, device_id{1}) == mgm::link_bandwidth{300.0, mgm::link_provenance::measured});
  REQUIRE(t.bandwidth(device_id{1}, device_id{0}).provenance == mgm::link_provenance::nominal);  // per direction
  const std::string text = t.to_smi_matrix(true);
  REQUIRE(text.find("300.0m") != std::string::npos);
  REQUIRE(text.find("NV18") != std::string::npos);
}

// ---- NCCL topology XML ----------------------------------------------------------------------

namespace {
struct xml_expected {
  const char* file;
  std::size_t gpus;
  std::size_t nics;
  std::vector<int> numa;                  ///< per GPU ordinal
  std::vector<const char*> upper;         ///< labels of the pairs (i < j)
  double pcie_gbps_gpu0;
  int pci_depth;                          ///< bridges between the CPU and each GPU
};

std::vector<const char*> labels(std::size_t n, const std::function<const char*(std::size_t, std::size_t)>& f) {
  std::vector<const char*> out;
  for (std::size_t a = 0; a < n; ++a) {
    for (std::size_t b = a + 1; b < n; ++b) out.push_back(f(a, b));
  }
  return out;
}
}  // namespace

TEST_CASE("realdata: the Azure NCCL topology files", "[realdata][topology][xml]") {
  const auto dir = mgm_test::shared_data("topologies");
  if (dir.empty() || mgm_test::shared_data("topologies/nccl-xml").empty()) return;
  // Written from the files: ND v2 puts GPUs 0001-0004 under CPU 0 and 0005-0008 under CPU 1,
  // straight on the CPU; ND v4 pairs two GPUs (and two NICs) under a bridge on each of 4 NUMA
  // nodes (0003/0004 on node 0, 0001/0002 on 1, 000d/000e on 2, 000b/000c on 3); ND v5 gives each
  // GPU a bridge of its own, four per socket; NC v4 has one A100 per NUMA node, with <gpu> elements.
  const auto same_half = [](std::size_t a, std::size_t b) { return (a < 4) == (b < 4) ? "PHB" : "SYS"; };
  const std::vector<xml_expected> all{
      {"azure_ndv2-topo.xml", 8, 1, {0, 0, 0, 0, 1, 1, 1, 1}, labels(8, same_half), 24.0, 0},
      {"azure_ndv4-topo.xml",
       8,
       8,
       {1, 1, 0, 0, 3, 3, 2, 2},
       labels(8, [](std::size_t a, std::size_t b) { return a / 2 == b / 2 ? "PIX" : "SYS"; }),
       24.0,
       1},
      {"azure_ndv5-topo.xml", 8, 8, {0, 0, 0, 0, 1, 1, 1, 1}, labels(8, same_half), 48.0, 1},
      {"azure_ncv4-topo.xml", 4, 1, {0, 1, 2, 3}, labels(4, [](std::size_t, std::size_t) { return "SYS"; }), 0.0, 0},
  };
  for (const auto& e : all) {
    INFO(e.file);
    const auto t = mgm::parse_nccl_topology_xml(slurp(dir / "nccl-xml" / e.file));
    REQUIRE(t.gpu_count() == e.gpus);
    REQUIRE(t.nics().size() == e.nics);
    std::size_t k = 0;
    for (std::size_t a = 0; a < e.gpus; ++a) {
      REQUIRE(t.gpu(device_id{static_cast<int>(a)}).numa_node == e.numa.at(a));
      for (std::size_t b = a + 1; b < e.gpus; ++b) {
        INFO("GPU" << a << "-GPU" << b);
        REQUIRE(t.path(device_id{static_cast<int>(a)}, device_id{static_cast<int>(b)}).label() == e.upper.at(k++));
      }
    }
    REQUIRE(t.gpu(device_id{0}).pcie_gbps == e.pcie_gbps_gpu0);
    for (const auto& g : t.gpus()) REQUIRE(g.pci_depth == e.pci_depth);
    // Written and read back: the same GPUs, NUMA nodes and paths.
    const auto again = mgm::parse_nccl_topology_xml(mgm::to_nccl_xml(t));
    REQUIRE(again == t);
    for (std::size_t a = 0; a < e.gpus; ++a) {
      REQUIRE(again.gpu(device_id{static_cast<int>(a)}).numa_node == t.gpu(device_id{static_cast<int>(a)}).numa_node);
      REQUIRE(again.gpu(device_id{static_cast<int>(a)}).pci_bus_id == t.gpu(device_id{static_cast<int>(a)}).pci_bus_id);
    }
  }
  const auto nc = mgm::parse_nccl_topology_xml(slurp(dir / "nccl-xml" / "azure_ncv4-topo.xml"));
  REQUIRE(nc.gpu(device_id{2}).compute_capability == 80);
  REQUIRE(nc.nics().at(0).name == "eth0");
  REQUIRE(nc.inter_socket() == 16.0);  // AMD
}

TEST_CASE("NCCL XML: the simulated DGX-1's NVLinks and a PCIe tree round-trip", "[topology][xml]") {
  auto m = mgm::sim::machine::preset("dgx1-v100");
  const auto xml = mgm::to_nccl_xml(m.links());
  REQUIRE(xml.find("<nvlink target=") != std::string::npos);
  REQUIRE(mgm::parse_nccl_topology_xml(xml) == m.links());
  // PIX pairs, a PXB pair across two bridges, PHB through the CPU, SYS across sockets.
  std::vector<mgm::gpu_info> gpus(5);
  for (std::size_t i = 0; i < 5; ++i) gpus[i].numa_node = i < 4 ? 0 : 1;
  mgm::topology t{gpus};
  const auto set = [&](int a, int b, const char* l) { t.set_path(device_id{a}, device_id{b}, mgm::gpu_path::from_label(l)); };
  set(0, 1, "PIX");
  set(0, 2, "PXB");
  set(1, 2, "PXB");
  set(0, 3, "PHB");
  set(1, 3, "PHB");
  set(2, 3, "PHB");
  for (int a = 0; a < 4; ++a) set(a, 4, "SYS");
  REQUIRE(mgm::parse_nccl_topology_xml(mgm::to_nccl_xml(t)) == t);
}

TEST_CASE("NCCL XML: malformed text names the line and column", "[topology][xml]") {
  const auto where = [](const char* text) -> std::pair<std::size_t, std::size_t> {
    try {
      (void)mgm::parse_nccl_topology_xml(text);
    } catch (const mgm::parse_error& e) {
      return {e.line(), e.column()};
    }
    return {0, 0};
  };
  REQUIRE(where("").first == 1);
  const auto mismatch = where("<system>\n  <cpu numaid=\"0\">\n  </gpu>\n</system>");
  REQUIRE(mismatch.first == 3);
  REQUIRE(mismatch.second == 8);  // just after the closing name
  REQUIRE(where("<system>\n<cpu numaid=0/>\n</system>").first == 2);
  REQUIRE(where("<machine/>").first == 1);
  REQUIRE_THROWS_WITH(mgm::parse_nccl_topology_xml("<?xml version=\"1.0\"?>\n<!-- none -->\n<system version=\"1\"><cpu/></system>"),
                      Catch::Contains("no GPU"));
}

// ---- NVLink generations (issue 15: one table for presets and files) ----------------------------

TEST_CASE("NVLink: one table by generation, named, presets and files take the same one", "[topology]") {
  const auto gens = mgm::nvlink_generations();
  REQUIRE(gens.size() == 6);
  for (std::size_t i = 1; i < gens.size(); ++i) REQUIRE(gens[i].min_cc > gens[i - 1].max_cc);  // one row per capability
  const auto name = [](int cc) {
    const auto* g = mgm::find_nvlink_generation(cc);
    return g == nullptr ? std::string{"unknown"} : std::string{g->name};
  };
  REQUIRE(name(60) == "NVLink 1");
  REQUIRE(name(70) == "NVLink 2");
  REQUIRE(name(80) == "NVLink 3");
  REQUIRE(name(86) == "NVLink 3 (GA102, x4 links)");
  REQUIRE(name(90) == "NVLink 4");
  REQUIRE(name(100) == "NVLink 5");
  REQUIRE(name(89) == "unknown");
  REQUIRE(name(0) == "unknown");
  // Unknown generation: the slowest generation that can bond that many links.
  REQUIRE(mgm::nvlink_gbps_per_link_lower_bound(18) == 20.6);  // NVLink 4 or 5
  REQUIRE(mgm::nvlink_gbps_per_link_lower_bound(12) == 20.0);  // 3, 4 or 5
  REQUIRE(mgm::nvlink_gbps_per_link_lower_bound(4) == 12.0);   // any, GA102's the slowest
  REQUIRE(mgm::nvlink_gbps_per_link_lower_bound(24) == 12.0);  // none has 24: the slowest of all

  // The preset's H100s: NVLink 4, 18 x 20.6.
  const auto h100 = mgm::sim::machine::preset("dgx-h100");
  REQUIRE(h100.links().nvlink_generation_of(device_id{0}, device_id{1})->name == "NVLink 4");
  REQUIRE(h100.links().bandwidth(device_id{0}, device_id{1}).gbps == Approx(18 * 20.6));
  REQUIRE(h100.links().to_smi_matrix(true).find("NVLink generation: NVLink 4 (H100, H200), 20.6 GB/s") != std::string::npos);
  REQUIRE(mgm::sim::machine::preset("dgx1-v100").links().bandwidth(device_id{0}, device_id{3}).gbps == Approx(2 * 20.0));
  REQUIRE(mgm::sim::machine::preset("dgx-a100").links().nvlink_generation_of(device_id{0}, device_id{7})->name == "NVLink 3");
  // Written as NCCL XML (which keeps sm=) and read back: the same generation and figure.
  const auto xml = mgm::parse_nccl_topology_xml(mgm::to_nccl_xml(h100.links()));
  REQUIRE(xml.nvlink_generation_of(device_id{2}, device_id{5})->name == "NVLink 4");
  REQUIRE(xml.bandwidth(device_id{2}, device_id{5}).gbps == h100.links().bandwidth(device_id{2}, device_id{5}).gbps);

  // The same NV18 from a topo -m text, which names no GPU model: unknown, and the lower bound.
  const auto text = mgm::parse_smi_topology("\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV18\t X \n");
  REQUIRE(text.nvlink_generation_of(device_id{0}, device_id{1}) == nullptr);
  REQUIRE(text.bandwidth(device_id{0}, device_id{1}).gbps == Approx(18 * 20.6));  // was 360 (SM80's 20 per link)
  REQUIRE(text.to_smi_matrix(true).find("NVLink generation: unknown (no GPU model) for NV18: its figures take 20.6 GB/s") != std::string::npos);
  // A B200 once its model is known: NVLink 5.
  std::vector<mgm::gpu_info> b200(2);
  for (auto& g : b200) g.compute_capability = 100;
  mgm::topology b{b200};
  b.set_path(device_id{0}, device_id{1}, mgm::gpu_path::from_label("NV18"));
  REQUIRE(b.nvlink_generation_of(device_id{1}, device_id{0})->name == "NVLink 5");
  REQUIRE(b.bandwidth(device_id{0}, device_id{1}).gbps == Approx(18 * 40.1));
  const std::string printed = b.to_smi_matrix(true);
  REQUIRE(printed.find("721.8n") != std::string::npos);
  REQUIRE(printed.find("NVLink 5 (B200, GB200)") != std::string::npos);
  // Mixed or half-known pairs: the slower generation; unknown when one side is.
  b200[1].compute_capability = 90;
  mgm::topology mixed{b200};
  mixed.set_path(device_id{0}, device_id{1}, mgm::gpu_path::from_label("NV18"));
  REQUIRE(mixed.nvlink_generation_of(device_id{0}, device_id{1})->name == "NVLink 4");
  b200[1].compute_capability = 0;
  mgm::topology half{b200};
  half.set_path(device_id{0}, device_id{1}, mgm::gpu_path::from_label("NV18"));
  REQUIRE(half.nvlink_generation_of(device_id{0}, device_id{1}) == nullptr);
  REQUIRE(half.nvlink_generation_of(device_id{0}, device_id{0}) == nullptr);  // no NVLink
}

TEST_CASE("realdata: the H100 and B200 files' NV18 say their generation is unknown", "[realdata][topology]") {
  const auto dir = mgm_test::shared_data("topologies");
  if (dir.empty()) return;
  for (const char* f : {"topo_h100_8gpu_nv18_stas00_mlengineering.txt", "topo_gcp_a4_8x_b200_nv18_8nic_dranet.txt"}) {
    INFO(f);
    const auto t = mgm::parse_smi_topology(slurp(dir / f));
    REQUIRE(t.nvlink_generation_of(device_id{0}, device_id{7}) == nullptr);
    REQUIRE(t.bandwidth(device_id{0}, device_id{7}).gbps == Approx(18 * 20.6));
    REQUIRE(t.to_smi_matrix(true).find("NVLink generation: unknown") != std::string::npos);
  }
  // The preset of the H100 machine and its file agree.
  REQUIRE(mgm::sim::machine::preset("dgx-h100").links().bandwidth(device_id{0}, device_id{7}).gbps ==
          mgm::parse_smi_topology(slurp(dir / "topo_h100_8gpu_nv18_stas00_mlengineering.txt")).bandwidth(device_id{0}, device_id{7}).gbps);
}
