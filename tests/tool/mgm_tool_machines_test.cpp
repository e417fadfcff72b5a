// `mgm` on simulated machines: where every capacity comes from (a preset, a device list, a
// topology file with --sim-devices), never invented; and plan's options that would be ignored.
#include "tool/run_mgm.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

using namespace mgm_tool_test;

namespace {

// A topology file as `nvidia-smi topo -m` prints it: mgm writes that layout for a preset.
std::string topology_file(const std::string& preset) {
  const auto path = scratch() / (preset + ".topo.txt");
  const auto r = run_mgm("--sim " + preset + " topo");
  REQUIRE(r.rc == 0);
  std::ofstream{path} << r.out;
  return "'" + path.string() + "'";
}

std::string h100_file() { return topology_file("dgx-h100"); }
std::string four_gpu_file() { return topology_file("pcie-4gpu-mixed"); }

}  // namespace

TEST_CASE("mgm --sim TOPOLOGY_FILE: no capacity is invented, --sim-devices gives them", "[tool]") {
  SECTION("without --sim-devices, memory-dependent commands refuse and say what to add") {
    for (const char* cmd : {"plan --items 10 --bytes-per-item 1MiB", "status", "log -o /dev/null --count 1"}) {
      const auto r = run_mgm("--sim " + h100_file() + " " + cmd);
      INFO(cmd << ": " << r.err);
      CHECK(r.rc == 1);
      CHECK(r.err.find("gives links, not memory") != std::string::npos);
      CHECK(r.err.find("--sim-devices '8x80GiB:H100'") != std::string::npos);
      CHECK(r.out.empty());
    }
  }
  SECTION("the links alone need no capacity: topo runs") {
    const auto r = run_mgm("--sim " + h100_file() + " topo");
    CHECK(r.rc == 0);
    CHECK(r.out.find("NV18") != std::string::npos);
  }
  SECTION("a 24 GB card holds what fits in 24 GB, and the output says where the size came from") {
    const auto r = run_mgm("--sim " + h100_file() + " --sim-devices '8x24GiB:RTX 3090' --json plan --items 25000 "
                           "--bytes-per-item 1MiB");
    REQUIRE(r.rc == 0);
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j["capacity_source"] == "--sim-devices");
    std::size_t sum = 0;
    for (const auto& g : j["gpus"]) {
      CHECK(g["name"] == "RTX 3090");
      CHECK(g["total_bytes"] == std::size_t{24} << 30);
      CHECK(g["capacity_items"].get<std::size_t>() <= 24 * 1024);
      sum += g["items"].get<std::size_t>();
    }
    CHECK(sum == 25000);
    // 8 x 24 GiB cannot hold 250,000 items of 1 MiB (the 80 GiB guess could).
    const auto too_many = run_mgm("--sim " + h100_file() + " --sim-devices '8x24GiB:RTX 3090' plan --items 250000 "
                                  "--bytes-per-item 1MiB");
    CHECK(too_many.rc == 2);
    CHECK(too_many.err.find("do not fit") != std::string::npos);
    const auto text = run_mgm("--sim " + h100_file() + " --sim-devices '8x24GiB:RTX 3090' plan --items 100 "
                              "--bytes-per-item 1MiB");
    CHECK(text.out.find("Memory sizes from --sim-devices.") != std::string::npos);
  }
  SECTION("a mixed box splits by memory, in GPU order") {
    const auto r = run_mgm("--sim " + four_gpu_file() + " --sim-devices '1x32GiB:RTX 5090,1x24GiB:RTX 4090,"
                           "1x32GiB:RTX 5090,1x24GiB:RTX 4090' --json plan --items 1120 --bytes-per-item 1MiB");
    REQUIRE(r.rc == 0);
    const auto j = nlohmann::json::parse(r.out);
    REQUIRE(j["gpus"].size() == 4);
    CHECK(j["gpus"][0]["name"] == "RTX 5090");
    CHECK(j["gpus"][1]["name"] == "RTX 4090");
    CHECK(j["gpus"][0]["items"] == 320);  // 32 : 24 : 32 : 24 of 1120
    CHECK(j["gpus"][1]["items"] == 240);
  }
  SECTION("status and replay say where the memory came from") {
    const auto s = run_mgm("--sim " + four_gpu_file() + " --sim-devices '4x48GiB:RTX 6000 Ada' status");
    REQUIRE(s.rc == 0);
    CHECK(s.out.find("RTX 6000 Ada") != std::string::npos);
    CHECK(s.out.find("memory sizes from --sim-devices") != std::string::npos);
    const auto js = nlohmann::json::parse(run_mgm("--sim dgx-h100 --json status").out);
    CHECK(js["capacity_source"] == "preset dgx-h100");
    const auto list = nlohmann::json::parse(run_mgm("--sim 2x24GiB --json plan --items 4 --bytes-per-item 1").out);
    CHECK(list["capacity_source"] == "the device list");
  }
  SECTION("misplaced or mismatched --sim-devices") {
    const auto no_file = run_mgm("--sim dgx-h100 --sim-devices 2x24GiB topo");
    CHECK(no_file.rc == 1);
    CHECK(no_file.err.find("use it with --sim TOPOLOGY_FILE") != std::string::npos);
    const auto no_sim = run_mgm("--sim-devices 2x24GiB leak /dev/null");
    CHECK(no_sim.rc == 1);
    const auto mismatch = run_mgm("--sim " + h100_file() + " --sim-devices 2x24GiB status");
    CHECK(mismatch.rc == 2);
    CHECK(mismatch.err.find("gives 2 GPUs but") != std::string::npos);
    CHECK(mismatch.err.find("has 8") != std::string::npos);
    const auto bad = run_mgm("--sim " + h100_file() + " --sim-devices 8xlots status");
    CHECK(bad.rc == 2);
    CHECK(bad.err.find("--sim-devices: ") != std::string::npos);
  }
  SECTION("replay on a topology file: --capacity, or --sim-devices, or refused") {
    const auto refused = run_mgm("--sim " + h100_file() + " replay /dev/null");
    CHECK(refused.rc == 1);
    CHECK(refused.err.find("gives links, not memory") != std::string::npos);
    const auto trace = scratch() / "tiny.rmm_log.csv";
    std::ofstream{trace} << "Thread,Time,Action,Pointer,Size,Stream\n1,00:00:00.000001,allocate,0x1000,1048576,0x0\n"
                            "1,00:00:00.000002,free,0x1000,1048576,0x0\n";
    const auto sized = run_mgm("--sim " + h100_file() + " replay '" + trace.string() + "' --capacity 4GiB --devices 2");
    INFO(sized.err);
    CHECK(sized.rc == 0);
    CHECK(sized.out.find("(memory: --capacity)") != std::string::npos);
    const auto named = run_mgm("--sim " + h100_file() + " --sim-devices '8x24GiB:RTX 3090' replay '" + trace.string() + "'");
    CHECK(named.rc == 0);
    CHECK(named.out.find("(memory: --sim-devices)") != std::string::npos);
  }
}

TEST_CASE("mgm --sim NCCL_XML: names and memory from the GPUs' PCI device IDs, where the file has them", "[tool]") {
  // As NCCL writes them (Azure's NC A100 v4 file has device="0x20b5"); IDs in either case.
  const auto path = scratch() / "two_boards.xml";
  std::ofstream{path} << R"(<system version="1">
  <cpu numaid="0" affinity="ffff" arch="x86_64" vendor="AuthenticAMD" familyid="23" modelid="49">
    <pci busid="0001:00:00.0" class="0x030200" vendor="0x10de" device="0x20B5" link_speed="16 GT/s" link_width="16">
      <gpu dev="0" sm="80" rank="0" gdr="1"/>
    </pci>
    <pci busid="0002:00:00.0" class="0x030200" vendor="0x10de" device="0x2330" link_speed="16 GT/s" link_width="16">
      <gpu dev="1" sm="90" rank="1" gdr="1"/>
    </pci>
  </cpu>
</system>
)";
  const auto r = run_mgm("--sim '" + path.string() + "' --json plan --items 10 --bytes-per-item 1GiB");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["capacity_source"] == "the topology file (its GPUs' PCI device IDs)");
  CHECK(j["gpus"][0]["name"] == "NVIDIA A100 80GB PCIe");
  CHECK(j["gpus"][1]["name"] == "NVIDIA H100 80GB HBM3");
  CHECK(j["gpus"][0]["total_bytes"] == std::size_t{80} << 30);
  // An ID that names no one memory size (or none at all) is not guessed.
  std::string text = slurp(path);
  text.replace(text.find("0x2330"), 6, "0x0000");
  std::ofstream{path} << text;
  const auto unknown = run_mgm("--sim '" + path.string() + "' plan --items 10 --bytes-per-item 1GiB");
  CHECK(unknown.rc == 1);
  CHECK(unknown.err.find("gives links, not memory") != std::string::npos);
}

TEST_CASE("mgm plan: options that would be ignored are refused, the granularity's help says the truth", "[tool]") {
  const auto no_throughput = run_mgm("--sim pcie-4gpu-mixed plan --items 100 --bytes-per-item 1MiB --policy throughput");
  CHECK(no_throughput.rc == 1);
  CHECK(no_throughput.err.find("--policy throughput needs --throughput") != std::string::npos);
  const auto ignored = run_mgm("--sim pcie-4gpu-mixed plan --items 100 --bytes-per-item 1MiB --throughput 1,1,1,1");
  CHECK(ignored.rc == 1);
  CHECK(ignored.err.find("--policy throughput only") != std::string::npos);
  const auto zero = run_mgm("--sim pcie-4gpu-mixed plan --items 100 --bytes-per-item 1MiB --policy throughput "
                            "--throughput 1,0,1,1");
  CHECK(zero.rc == 2);
  const auto ok = run_mgm("--sim pcie-4gpu-mixed --json plan --items 100 --bytes-per-item 1MiB --policy throughput "
                          "--throughput 3,1,1,1");
  REQUIRE(ok.rc == 0);
  const auto fastest = nlohmann::json::parse(ok.out)["gpus"][0]["items"].get<std::size_t>();
  CHECK((fastest == 50 || fastest == 51));  // three times as fast: 3/6 of the work, the makespan 17 either way

  // The help and the code agree: the remainder goes to the GPU with the most room left.
  const auto help = run_mgm("plan --help");
  CHECK(help.out.find("go to the GPU with the most room") != std::string::npos);
  const auto r = run_mgm("--sim 1x8GiB,1x24GiB,1x8GiB --json plan --items 103 --bytes-per-item 1MiB --granularity 10");
  REQUIRE(r.rc == 0);
  const auto j = nlohmann::json::parse(r.out);
  for (std::size_t i = 0; i < 3; ++i) {
    const auto items = j["gpus"][i]["items"].get<std::size_t>();
    CHECK((i == 1 ? items % 10 == 3 : items % 10 == 0));
  }
  CHECK(j["gpus"][0]["spill_order"][0].contains("gb_per_s"));
}

TEST_CASE("mgm serve: bad addresses and intervals exit 2 before listening, no GPU exits 3", "[tool]") {
  for (const char* listen : {"19400", "127.0.0.1:99999", "127.0.0.1:http", "nohost:19400"}) {
    const auto r = run_mgm(std::string{"--sim dgx-h100 serve --listen "} + listen);
    INFO(listen << ": " << r.err);
    CHECK(r.rc == 2);
    CHECK(r.err.find("--listen") != std::string::npos);
  }
  const auto fast = run_mgm("--sim dgx-h100 serve --listen 127.0.0.1:0 --interval 10ms");
  CHECK(fast.rc == 2);
  CHECK(fast.err.find("at most every 100ms") != std::string::npos);
  const auto none = run_mgm("serve --listen 127.0.0.1:0");
  CHECK(none.rc == 3);
  CHECK(none.err.find("--sim") != std::string::npos);
}

TEST_CASE("mgm status over NVML (the fake) with MIG: each instance a row after its GPU, in JSON too", "[tool]") {
  const std::string env = fake_nvml_env(R"({"devices": [
    {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-a100", "pci_bus_id": "00000000:07:00.0",
     "memory": {"total": 85899345920, "reserved": 0, "used": 0},
     "mig": [{"name": "NVIDIA A100-SXM4-80GB MIG 3g.40gb", "uuid": "MIG-one", "gpu_instance_id": 1,
              "compute_instance_id": 0, "memory": {"total": 42949672960, "reserved": 0, "used": 10737418240}},
             {"name": "NVIDIA A100-SXM4-80GB MIG 2g.20gb", "uuid": "MIG-two", "gpu_instance_id": 5,
              "compute_instance_id": 0, "memory": {"total": 21474836480, "reserved": 0, "used": 0}}]}]})",
                                        "mig.json");
  const auto r = run_mgm("status", env);
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("1 GPU, 2 MIG instances (nvml)") != std::string::npos);
  const auto gpu_row = r.out.find("\n0   A100-SXM4-80GB");
  const auto first = r.out.find("\n0.1 MIG 3g.40gb (GI 1)");
  const auto second = r.out.find("\n0.5 MIG 2g.20gb (GI 5)");
  REQUIRE(gpu_row != std::string::npos);
  REQUIRE(first != std::string::npos);
  REQUIRE(second != std::string::npos);
  CHECK(gpu_row < first);  // after their GPU, in slot order
  CHECK(first < second);
  CHECK(r.out.find("10.0/40.0") != std::string::npos);
  const auto j = run_mgm("status --json", env);
  REQUIRE(j.rc == 0);
  const auto doc = nlohmann::json::parse(j.out);
  REQUIRE(doc["devices"].size() == 3);
  CHECK(doc["devices"][1]["mgm.mig.gpu_instance_id"] == 1);
  CHECK(doc["devices"][1]["mgm.mig.profile"] == "3g.40gb");
  CHECK(doc["devices"][1]["uuid"] == "MIG-one");
  // mgm log: the CSV keeps nvidia-smi's shape (GPUs only); JSON lines carry the instances.
  const auto csv = scratch() / "mig.csv";
  REQUIRE(run_mgm("log -o '" + csv.string() + "' --count 1", env).rc == 0);
  const auto csv_text = slurp(csv);
  CHECK(count(csv_text, "\n") == 2);  // the header and the A100
  CHECK(csv_text.find("MIG") == std::string::npos);
  const auto jsonl = scratch() / "mig.jsonl";
  REQUIRE(run_mgm("log -o '" + jsonl.string() + "' --format jsonl --count 1", env).rc == 0);
  const auto jsonl_text = slurp(jsonl);
  CHECK(count(jsonl_text, "\n") == 3);
  CHECK(count(jsonl_text, "\"mgm.mig.profile\"") == 2);
}
