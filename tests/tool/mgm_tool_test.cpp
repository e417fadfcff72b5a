// The `mgm` binary end to end: each command's output and exit code, on the simulator, on the fake
// NVML and on the real files of ../shared/data.
#include <mgm/telemetry/log_format.hpp>

#include "data/smi_q_2x_a100_80gb_m4logs.hpp"
#include "shared_data.hpp"
#include "tool/run_mgm.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

using namespace mgm_tool_test;
namespace tel = mgm::telemetry;

namespace {

const std::string tiny_trace = "Thread,Time,Action,Pointer,Size,Stream\n"
                               "1,00:00:00.000001,allocate,0x1000,1048576,0x0\n"
                               "1,00:00:00.000002,allocate,0x2000,4194304,0x0\n"
                               "1,00:00:00.000003,free,0x1000,1048576,0x0\n"
                               "1,00:00:00.000004,allocate,0x3000,524288,0x0\n"
                               "1,00:00:00.000005,free,0x3000,524288,0x0\n"
                               "1,00:00:00.000006,free,0x2000,4194304,0x0\n";

}  // namespace

TEST_CASE("mgm: version, help with an example for every command, usage errors exit 1", "[tool]") {
  const auto v = run_mgm("--version");
  CHECK(v.rc == 0);
  CHECK(v.out.find("mgm 0.") != std::string::npos);
  for (const char* c : {"status", "log", "topo", "plan", "leak", "plot", "replay", "serve"}) {
    const auto h = run_mgm(std::string{c} + " --help");
    INFO(c);
    CHECK(h.rc == 0);
    CHECK(h.out.find("Example: mgm") != std::string::npos);
  }
  CHECK(run_mgm("").rc == 1);
  const auto unknown = run_mgm("frobnicate");
  CHECK(unknown.rc == 1);
  CHECK(run_mgm("log --interval 5s").rc == 1);  // -o is required
  CHECK(run_mgm("replay x.csv --allocator nonsense").rc == 1);
}

TEST_CASE("mgm status: without a GPU or --sim it says so and exits 3", "[tool]") {
  const auto r = run_mgm("status");
  CHECK(r.rc == 3);
  CHECK(r.err.find("no GPU can be used") != std::string::npos);
  CHECK(r.err.find("--sim") != std::string::npos);
  CHECK(run_mgm("topo").rc == 3);
  CHECK(run_mgm("plan --items 10 --bytes-per-item 1MiB").rc == 3);
}

TEST_CASE("mgm status on the simulated DGX H100: 8 H100s", "[tool]") {
  const auto r = run_mgm("--sim dgx-h100 status");
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("8 GPUs (sim:dgx-h100; memory sizes from preset dgx-h100)") != std::string::npos);
  CHECK(count(r.out, "H100 80GB HBM3") == 8);
  const auto j = run_mgm("--sim dgx-h100 --json status");
  REQUIRE(j.rc == 0);
  const auto doc = nlohmann::json::parse(j.out);
  REQUIRE(doc["devices"].size() == 8);
  CHECK(doc["devices"][7]["name"] == "NVIDIA H100 80GB HBM3");
  CHECK(doc["devices"][0]["memory.total_mib"].get<double>() > 80000.0);
  const auto bad = run_mgm("--sim no-such-machine status");
  CHECK(bad.rc == 2);
  CHECK(bad.err.find("no-such-machine") != std::string::npos);
}

TEST_CASE("mgm status over NVML (the fake): every metric and the top processes", "[tool]") {
  const std::string env = fake_nvml_env(R"({"devices": [
    {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-11111111-2222-3333-4444-555555555555", "pci_bus_id": "00000000:07:00.0",
     "memory": {"total": 85899345920, "reserved": 536870912, "used": 10737418240}, "temperature": 44, "power_mw": 250000,
     "power_limit_mw": 400000, "clock_sm": 1410, "clock_mem": 1593, "pcie_gen": 4, "pcie_width": 16,
     "nvlinks": [1,1,1,1,1,1,1,1,1,1,1,1], "utilization": [91, 40],
     "processes": [{"pid": 777, "name": "train.py", "used": 10000000000}]}]})");
  // The default table fits 100 columns: memory, utilisation, temperature, power, processes.
  const auto r = run_mgm("status", env);
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("1 GPU (nvml)") != std::string::npos);
  CHECK(r.out.find("A100-SXM4-80GB") != std::string::npos);
  CHECK(r.out.find("10.0/80.0") != std::string::npos);
  CHECK(r.out.find(" 91% ") != std::string::npos);
  CHECK(r.out.find("44C") != std::string::npos);
  CHECK(r.out.find("250/400") != std::string::npos);
  CHECK(r.out.find("train.py(777) 9.3G") != std::string::npos);
  std::istringstream lines{r.out};
  for (std::string line; std::getline(lines, line);) {
    INFO(line);
    CHECK(line.size() <= 100);
  }
  // --wide: everything.
  const auto w = run_mgm("status --wide", env);
  REQUIRE(w.rc == 0);
  CHECK(w.out.find("NVIDIA A100-SXM4-80GB") != std::string::npos);
  CHECK(w.out.find(" 91% ") != std::string::npos);
  CHECK(w.out.find("1410/1593") != std::string::npos);
  CHECK(w.out.find("gen4 x16") != std::string::npos);
  CHECK(w.out.find("512.00 MiB") != std::string::npos);  // reserved by the driver
  CHECK(w.out.find("train.py(777) 9.31 GiB") != std::string::npos);
}

TEST_CASE("mgm status --watch redraws until Ctrl-C, then exits 0", "[tool]") {
  // SIGINT after a second and a half; --preserve-status makes timeout exit as mgm did.
  const auto r = run_mgm("--sim 2x24GiB status --watch 200ms", "", "timeout -s INT --preserve-status 1.5");
  CHECK(r.rc == 0);
  CHECK(r.err.empty());
  const auto frames = count(r.out, "every 0.2s (Ctrl-C stops)");
  CHECK(frames >= 3);
  CHECK(count(r.out, "2 GPUs (sim:custom") == frames);
  CHECK(r.out.find("\033[2J") == std::string::npos);  // not a terminal: frames one after another
  CHECK(run_mgm("--sim 2x24GiB status --watch 10ms").rc == 2);
  CHECK(run_mgm("--sim 2x24GiB --json status --watch").rc == 1);
}

TEST_CASE("mgm log writes files the readers read back, in each format", "[tool]") {
  const auto dir = scratch();
  const auto csv = dir / "log.csv", procs = dir / "procs.csv";
  const auto r = run_mgm("--sim 2x8GiB log -o '" + csv.string() + "' --interval 20ms --count 3 --processes '" + procs.string() + "'");
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("3 samples written") != std::string::npos);
  const auto log = tel::read_gpu_log_file(csv, {});
  CHECK(log.issues.empty());
  CHECK(log.samples.size() == 6);
  CHECK(log.samples[1].index == 1);
  CHECK(log.samples[5].memory_total == std::uint64_t{8} << 30);
  CHECK(fs::exists(procs));

  const auto jl = dir / "log.jsonl";
  REQUIRE(run_mgm("--sim 2x8GiB log -o '" + jl.string() + "' --format jsonl --interval 10ms --duration 0.05s").rc == 0);
  const auto jlog = tel::read_gpu_log_file(jl, {});
  CHECK(jlog.format == "jsonl");
  CHECK(jlog.samples.size() >= 2);
  CHECK(jlog.samples.size() % 2 == 0);

  const auto prom = dir / "gpus.prom";
  REQUIRE(run_mgm("--sim dgx-a100 log -o '" + prom.string() + "' --format prom --interval 10ms --count 2").rc == 0);
  const auto text = slurp(prom);
  CHECK(text.find("# TYPE mgm_gpu_memory_total_bytes gauge") != std::string::npos);
  CHECK(count(text, "mgm_gpu_memory_total_bytes{") == 8);

  CHECK(run_mgm("--sim 2x8GiB log -o '" + csv.string() + "' --interval banana --count 1").rc == 2);
  const auto unwritable = run_mgm("--sim 2x8GiB log -o /nonexistent/dir/log.csv --count 1");
  CHECK(unwritable.rc == 2);
  CHECK(unwritable.err.find("/nonexistent/dir/log.csv") != std::string::npos);
}

TEST_CASE("mgm log stops cleanly on Ctrl-C (or SIGTERM) with the file complete", "[tool]") {
  for (const char* sig : {"INT", "TERM"}) {
    INFO(sig);
    const auto csv = scratch() / (std::string{"interrupted_"} + sig + ".csv");
    const std::string cmd = "env MGM_NVML_LIBRARY=/nonexistent '" + std::string{MGM_TOOL} + "' --sim 2x8GiB log -o '" +
                            csv.string() + "' --interval 20ms > '" + csv.string() + ".out' 2>&1 & pid=$!; sleep 0.4; kill -" +
                            sig + " $pid; wait $pid";
    const int status = std::system(cmd.c_str());
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(slurp(fs::path{csv.string() + ".out"}).find("interrupted; the file is complete") != std::string::npos);
    const auto log = tel::read_gpu_log_file(csv, {});
    CHECK(log.issues.empty());
    CHECK(log.samples.size() >= 2);
    CHECK(log.samples.size() % 2 == 0);  // whole batches only
  }
}

TEST_CASE("mgm leak and mgm plot on real logs", "[tool][realdata]") {
  const auto smi = mgm_test::shared_data("nvidia-smi");
  if (smi.empty()) return;
  const auto step = run_mgm("--json leak '" + (smi / "csv_rtx_24576mib_60s_stepwise_growth_rckola_076d3d9.csv").string() + "'");
  REQUIRE(step.rc == 0);
  const auto s = nlohmann::json::parse(step.out);
  REQUIRE(s.size() == 1);
  CHECK(s[0]["verdict"] == "leak");
  CHECK(s[0]["rate_mib_per_min"].get<double>() > 0.0);
  const auto plateau = run_mgm("leak '" + (smi / "csv_rtx_24564mib_60s_warmup_plateau_rckola_e21ca9c.csv").string() + "'");
  REQUIRE(plateau.rc == 0);
  CHECK(plateau.out.find(" leak ") == std::string::npos);
  CHECK(run_mgm("leak '" + (smi / "csv_rtx_24564mib_60s_warmup_plateau_rckola_e21ca9c.csv").string() + "' --baseline 10m:5m").rc == 2);

  const auto dir = scratch();
  const auto svg1 = dir / "one.svg", svg2 = dir / "two.svg";
  REQUIRE(run_mgm("plot '" + (smi / "csv_rtx_24576mib_60s_stepwise_growth_rckola_076d3d9.csv").string() + "' -o '" + svg1.string() + "'").rc == 0);
  REQUIRE(run_mgm("plot '" + (smi / "csv_rtx4090_rtx4080_2gpu_30s_nounits_baikal.csv").string() + "' -o '" + svg2.string() + "'").rc == 0);
  CHECK(count(slurp(svg1), "<polyline class=\"gpu\"") == 1);
  CHECK(count(slurp(svg1), "<line class=\"fit\"") == 1);
  CHECK(count(slurp(svg2), "<polyline class=\"gpu\"") == 2);
  if (std::system("command -v xmllint >/dev/null 2>&1") == 0) {
    CHECK(std::system(("xmllint --noout '" + svg1.string() + "' '" + svg2.string() + "'").c_str()) == 0);
  }
  const auto header_only = scratch() / "header_only.csv";
  std::ofstream{header_only} << "timestamp, index, memory.used [MiB]\n";
  const auto empty = run_mgm("leak '" + header_only.string() + "'");
  CHECK(empty.rc == 2);
  CHECK(empty.err.find("no readings") != std::string::npos);
  const auto missing = run_mgm("leak /nonexistent/gpus.csv");
  CHECK(missing.rc == 2);
  CHECK(missing.err.find("/nonexistent/gpus.csv") != std::string::npos);
}

namespace {

// `text` with the first `from` replaced by `to` (the test fails when `from` is not there).
std::string replace_once(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("mgm leak and plot on an nvidia-smi -q log: a verdict per GPU, labelled as nvidia-smi numbers them", "[tool]") {
  // 40 runs of the real two-A100 `nvidia-smi -q` excerpt a minute apart, as `-l 60` appends
  // them: GPU 0's memory grows 50 MiB a run, GPU 1's stays.
  const std::string real{mgm_test::smi_q_2x_a100_80gb_m4logs};
  std::string text;
  for (int k = 0; k < 40; ++k) {
    char stamp[32];
    std::snprintf(stamp, sizeof stamp, "Sat Mar  4 %02d:%02d:00 2023", 5 + k / 60, k % 60);
    std::string run = replace_once(real, "Sat Mar  4 04:55:00 2023", stamp);
    text += replace_once(run, "Used                              : 22377 MiB",
                         "Used                              : " + std::to_string(22377 + 50 * k) + " MiB");
  }
  const auto file = scratch() / "a100x2.smi-q.txt";
  std::ofstream{file, std::ios::binary} << text;
  const auto r = run_mgm("--json leak '" + file.string() + "'");
  REQUIRE(r.rc == 0);
  const auto j = nlohmann::json::parse(r.out);
  int gpus = 0;
  for (const auto& g : j) {
    if (g.contains("pid")) continue;
    ++gpus;
    CHECK(g["name"] == "NVIDIA A100-SXM4-80GB");
    if (g["gpu"] == 0) {
      CHECK(g["key"] == "GPU-eb0003d2-77b4-70fd-4ab9-3ef1c9853c49");
      CHECK(g["verdict"] == "leak");
      CHECK(g["rate_mib_per_min"].get<double>() == Approx(50.0).epsilon(0.05));
    } else {
      CHECK(g["gpu"] == 1);
      CHECK(g["key"] == "GPU-39cbea41-34d5-0fca-4f58-d64c23221021");
      CHECK(g["verdict"] == "no_growth");
    }
  }
  CHECK(gpus == 2);
  const auto table = run_mgm("leak '" + file.string() + "'");
  REQUIRE(table.rc == 0);
  CHECK(table.out.find("nvidia-smi-q, 80 readings") != std::string::npos);
  CHECK(table.out.find("GPU0 NVIDIA A100-SXM4-80GB               leak") != std::string::npos);
  CHECK(table.out.find("GPU1 NVIDIA A100-SXM4-80GB               no_growth") != std::string::npos);
  const auto svg = scratch() / "a100x2.svg";
  REQUIRE(run_mgm("plot '" + file.string() + "' -o '" + svg.string() + "'").rc == 0);
  CHECK(count(slurp(svg), "<polyline class=\"gpu\"") == 2);
  CHECK(slurp(svg).find("GPU1 NVIDIA A100-SXM4-80GB") != std::string::npos);
}

TEST_CASE("mgm leak and plot on an nvidia-smi -q -x -l log built from a real sample", "[tool][realdata]") {
  const auto smi = mgm_test::shared_data("nvidia-smi");
  if (smi.empty()) return;
  // 30 copies of the real A100 (MIG) document, a minute apart, memory growing 20 MiB a minute.
  const auto real = slurp(smi / "smi_q_x_a100-sxm4-mig_netdata.xml");
  std::string text;
  for (int k = 0; k < 30; ++k) {
    char stamp[64];
    std::snprintf(stamp, sizeof stamp, "<timestamp>Fri Jan 27 12:%02d:31 2023</timestamp>", k);
    std::string doc = replace_once(real, "<timestamp>Fri Jan 27 11:32:31 2023</timestamp>", stamp);
    text += replace_once(doc, "<used>38 MiB</used>", "<used>" + std::to_string(38 + 20 * k) + " MiB</used>");
  }
  const auto file = scratch() / "a100.smi-q-x.xml";
  std::ofstream{file, std::ios::binary} << text;
  const auto r = run_mgm("--json leak '" + file.string() + "'");
  REQUIRE(r.rc == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j.size() == 1);
  CHECK(j[0]["gpu"] == 0);
  CHECK(j[0]["name"] == "NVIDIA A100-SXM4-40GB");
  CHECK(j[0]["verdict"] == "leak");
  CHECK(j[0]["rate_mib_per_min"].get<double>() == Approx(20.0).epsilon(0.05));
  CHECK(run_mgm("leak '" + file.string() + "'").out.find("GPU0 NVIDIA A100-SXM4-40GB") != std::string::npos);
  const auto svg = scratch() / "a100.svg";
  REQUIRE(run_mgm("plot '" + file.string() + "' -o '" + svg.string() + "'").rc == 0);
  CHECK(count(slurp(svg), "<polyline class=\"gpu\"") == 1);
  // Each real sample alone: one reading, no verdict to give, but read.
  for (const char* f : {"smi_q_x_rtx-2080-win_netdata.xml", "smi_q_x_rtx-3060_netdata.xml",
                        "smi_q_x_rtx-4090-driver-535_netdata.xml", "smi_q_x_tesla-p100_netdata.xml"}) {
    const auto one = run_mgm("leak '" + (smi / f).string() + "'");
    CHECK(one.rc == 0);
    CHECK(one.out.find("nvidia-smi-xml, 1 readings") != std::string::npos);
  }
}

TEST_CASE("mgm leak on pasted tables, an unreadable one is refused naming --columns", "[tool]") {
  const auto dir = scratch();
  std::string md = "| timestamp | index | name | memory.used [MiB] |\n|---|---|---|---|\n";
  for (int k = 0; k < 30; ++k) {
    char row[128];
    std::snprintf(row, sizeof row, "| 2025/06/13 00:%02d:00.000 | 0 | NVIDIA H100 80GB HBM3 | %d MiB |\n", k, 1000 + 30 * k);
    md += row;
  }
  std::ofstream{dir / "table.md"} << md;
  const auto r = run_mgm("--json leak '" + (dir / "table.md").string() + "'");
  REQUIRE(r.rc == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j.size() == 1);
  CHECK(j[0]["name"] == "NVIDIA H100 80GB HBM3");
  CHECK(j[0]["verdict"] == "leak");

  std::ofstream{dir / "noheader.txt"} << "2025/06/13 00:00:00.000 | 0 | 1000 MiB\n2025/06/13 00:01:00.000 | 0 | 1030 MiB\n";
  const auto refused = run_mgm("leak '" + (dir / "noheader.txt").string() + "'");
  CHECK(refused.rc == 2);
  CHECK(refused.err.find("--columns") != std::string::npos);
  CHECK(refused.err.find("log_read_options") == std::string::npos);
  CHECK(refused.err.find(".cpp") == std::string::npos);
  const auto given = run_mgm("leak '" + (dir / "noheader.txt").string() + "' --columns 'timestamp,index,memory.used [MiB]'");
  CHECK(given.rc == 0);
  CHECK(given.out.find("2 readings") != std::string::npos);

  std::ofstream{dir / "cut.xml"} << "<?xml version=\"1.0\" ?>\n<nvidia_smi_log>\n<timestamp>Fri Jan 27 11:32:31 2023</timestamp>\n<gpu id=\"x\">\n";
  const auto cut = run_mgm("leak --strict '" + (dir / "cut.xml").string() + "'");
  CHECK(cut.rc == 2);
  CHECK(cut.err.find("not well-formed XML") != std::string::npos);
  CHECK(cut.err.find(".cpp") == std::string::npos);
}

TEST_CASE("mgm plan: counts add up, spill order per GPU", "[tool]") {
  const auto r = run_mgm("--sim pcie-4gpu-mixed --json plan --items 50000 --bytes-per-item 1MiB --reserve 2GiB");
  REQUIRE(r.rc == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["gpus"].size() == 4);
  std::size_t sum = 0;
  for (const auto& g : j["gpus"]) {
    sum += g["items"].get<std::size_t>();
    CHECK_FALSE(g["spill_order"].empty());
  }
  CHECK(sum == 50000);
  const auto table = run_mgm("--sim dgx-h100 plan --items 1000 --bytes-per-item 64MiB --policy equal");
  REQUIRE(table.rc == 0);
  CHECK(table.out.find("Total 1000 items") != std::string::npos);
  CHECK(table.out.find("NV18") != std::string::npos);  // the first spill target of every H100 is a peer
  const auto too_much = run_mgm("--sim 2x8GiB plan --items 100 --bytes-per-item 1GiB");
  CHECK(too_much.rc == 2);
  CHECK(too_much.err.find("do not fit") != std::string::npos);
  CHECK(run_mgm("--sim 2x8GiB plan --items 10 --bytes-per-item lots").rc == 2);
  // JAX's share of each GPU: items and overhead over the GPU's memory, rounded up.
  const auto jax = run_mgm("--sim 2x8GiB plan --items 6 --bytes-per-item 1GiB --overhead 512MiB --jax");
  REQUIRE(jax.rc == 0);
  CHECK(jax.out.find("CUDA_VISIBLE_DEVICES=0 XLA_PYTHON_CLIENT_PREALLOCATE=true XLA_CLIENT_MEM_FRACTION=0.438") != std::string::npos);
  const auto jj = nlohmann::json::parse(run_mgm("--sim 2x8GiB --json plan --items 6 --bytes-per-item 1GiB").out);
  CHECK(jj["gpus"][1]["xla_client_mem_fraction"].get<double>() == Approx(0.375));
}

TEST_CASE("mgm plan --watch: a tenant, then a lost GPU, each change one JSON line with its reason", "[tool]") {
  // Two 80 GiB GPUs over the fake NVML, which reads its file again at every memory query; the
  // launcher changes the file while mgm watches: a tenant takes 60 % of GPU1, then GPU0 falls off.
  const auto gpu = [](int i, std::uint64_t used, bool lost) {
    return std::string{R"({"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0000000)"} + std::to_string(i) +
           R"(-2222-3333-4444-555555555555", "pci_bus_id": "00000000:0)" + std::to_string(i) +
           R"(:00.0", "memory": {"total": 85899345920, "reserved": 0, "used": )" + std::to_string(used) + "}" +
           (lost ? R"(, "lost": true)" : "") + "}";
  };
  const auto config = [&](std::uint64_t used1, bool lost0) {
    return R"({"reload": true, "devices": [)" + gpu(0, 0, lost0) + ", " + gpu(1, used1, false) + "]}";
  };
  const std::string env = fake_nvml_env(config(0, false), "watch.json");
  const auto dir = scratch();
  std::ofstream{dir / "tenant.json"} << config(51539607552, false);  // 48 GiB
  std::ofstream{dir / "lost.json"} << config(51539607552, true);
  const std::string cfg = (dir / "watch.json").string();
  // The launcher's background part waits for what mgm prints (so a slow start changes nothing):
  // the plan, then the tenant; the move, then the lost GPU; the second move, then Ctrl-C.
  const std::string out = (dir / "stdout").string();
  const std::string swap = [&](const char* from) {
    return "cp " + (dir / from).string() + " " + cfg + ".new; mv " + cfg + ".new " + cfg + "; ";
  }("tenant.json");
  const std::string swap_lost = "cp " + (dir / "lost.json").string() + " " + cfg + ".new; mv " + cfg + ".new " + cfg + "; ";
  const auto waits = [&](int n) {
    // (each wait ends too when mgm has gone: nothing is left behind)
    return "until [ $(grep -c moved " + out + ") -ge " + std::to_string(n) + " ] || ! kill -0 $$; do sleep 0.05; done; ";
  };
  const std::string script = "until grep -q plan " + out + " || ! kill -0 $$; do sleep 0.05; done; sleep 0.3; " + swap + waits(1) +
                             "sleep 0.3; " + swap_lost + waits(2) + "sleep 0.5; kill -INT $$";
  const std::string launcher = "sh -c '(" + script + R"() & exec "$0" "$@"')";
  const auto r = run_mgm("--json plan --items 100 --bytes-per-item 256MiB --reserve 1GiB --watch 100ms --duration 60s",
                         env, launcher);
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  std::vector<nlohmann::json> lines;
  std::istringstream in{r.out};
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  REQUIRE(lines.size() >= 3);
  CHECK(lines[0]["event"] == "plan");
  CHECK(lines[0]["counts"]["GPU0"] == 50);
  CHECK(lines[0]["counts"]["GPU1"] == 50);
  // The tenant: GPU1's items go to GPU0 after two readings.
  const auto& moved = lines[1];
  CHECK(moved["event"] == "moved");
  CHECK(moved["moves"][0]["from"] == "GPU1");
  CHECK(moved["moves"][0]["to"] == "GPU0");
  CHECK(moved["counts"]["GPU1"].get<int>() < 30);
  CHECK(moved["reason"].get<std::string>().find("differs by") != std::string::npos);
  // GPU0 falls off: its items are rebuilt on GPU1, at once.
  const auto& lost = lines[2];
  CHECK(lost["event"] == "moved");
  CHECK(lost["lost"][0] == "GPU0");
  CHECK(lost["moves"][0]["from_lost"] == true);
  CHECK(lost["counts"]["GPU0"] == 0);
  CHECK(lost["reason"].get<std::string>().find("GPU0 is gone") != std::string::npos);
  // The readings before and after are quiet: no other change was made.
  CHECK(lines.size() == 3);

  // A GPU whose memory is never read: its note is news once, not a "stayed" line every reading.
  const std::string silent_gpu = R"({"devices": [)" + gpu(0, 0, false) +
                                 R"(, {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-00000001-2222-3333-4444-555555555555",
                                 "pci_bus_id": "00000000:01:00.0", "memory": {"total": 85899345920, "reserved": 0, "used": 0},
                                 "unsupported": ["memory"]}]})";
  const auto quiet = run_mgm("--json plan --items 10 --bytes-per-item 1GiB --watch 100ms --duration 0.8s",
                             fake_nvml_env(silent_gpu, "silent.json"));
  INFO(quiet.out << quiet.err);
  REQUIRE(quiet.rc == 0);
  CHECK(count(quiet.out, "\n") == 2);  // the plan, and the note once (before: one line per reading)
  CHECK(count(quiet.out, "GPU1: no memory reading") == 1);

  // Options that mean nothing without --watch, and bad shares, are refused.
  CHECK(run_mgm("--sim 2x8GiB plan --items 4 --bytes-per-item 1GiB --cooldown 3").rc == 1);
  CHECK(run_mgm("--sim 2x8GiB plan --items 4 --bytes-per-item 1GiB --watch 1s --min-change 100%").rc == 2);
  const auto text = run_mgm("--sim 2x8GiB plan --items 4 --bytes-per-item 1GiB --watch 100ms --duration 0.3s");
  CHECK(text.rc == 0);
  CHECK(text.out.find("plan: GPU0 2, GPU1 2") != std::string::npos);
  CHECK(text.out.find("0 changes, 0 failed readings") != std::string::npos);
  // A bare --watch reads every 5 s.
  const auto bare = run_mgm("--sim 2x8GiB plan --items 4 --bytes-per-item 1GiB --watch --duration 0.2s");
  CHECK(bare.rc == 0);
  CHECK(bare.out.find("every 5s") != std::string::npos);

  // The same tenant in text: the reason, then each move and the new plan, on lines of their own.
  std::ofstream{cfg} << config(0, false);
  const std::string text_script = "until grep -q plan: " + out + " || ! kill -0 $$; do sleep 0.05; done; sleep 0.3; " + swap +
                                  "until grep -q \"GPU1 -> GPU0\" " + out + " || ! kill -0 $$; do sleep 0.05; done; sleep 0.3; kill -INT $$";
  const auto t = run_mgm("plan --items 100 --bytes-per-item 256MiB --reserve 1GiB --watch 100ms --duration 60s", env,
                         "sh -c '(" + text_script + R"() & exec "$0" "$@"')");
  INFO(t.out << t.err);
  REQUIRE(t.rc == 0);
  CHECK(t.out.find("plan: GPU0 50, GPU1 50") != std::string::npos);
  const auto reason = t.out.find("differs by");
  REQUIRE(reason != std::string::npos);
  const auto move = t.out.find("GPU1 -> GPU0", reason);
  REQUIRE(move != std::string::npos);
  CHECK(t.out.find("items", move) != std::string::npos);
  CHECK(t.out.find("plan: GPU0 ", move) != std::string::npos);
  CHECK(t.out.find("1 changes") != std::string::npos);
}

TEST_CASE("mgm replay: replay_result JSON, devices in parallel, async needs a GPU", "[tool]") {
  const auto trace = scratch() / "tiny.rmm_log.csv";
  std::ofstream{trace} << tiny_trace;
  const auto r = run_mgm("--sim 2x8GiB --json replay '" + trace.string() + "' --allocator pool,direct --devices 2 --iterations 2 --fit");
  REQUIRE(r.rc == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["results"].size() == 4);  // 2 allocators x 2 devices
  for (const char* field : {"trace", "allocator", "device", "iterations", "events", "host_ns_per_event", "loop_ns_per_event",
                            "events_per_second",
                            "upstream_allocations", "upstream_frees", "upstream_calls_after_first_iteration", "peak_live_bytes",
                            "peak_reserved_bytes", "reserved_over_live", "fit", "driver_calls",
                            "modelled_driver_seconds", "modelled_upstream_seconds"}) {
    INFO(field);
    CHECK(j["results"][0].contains(field));
  }
  for (const char* kind : {"malloc", "free", "reserve", "unreserve", "create", "release", "map", "unmap", "set_access",
                           "event_record", "event_query", "event_wait", "peer_enable"}) {
    INFO(kind);
    CHECK(j["results"][0]["driver_calls"].contains(kind));
    CHECK(j["results"][0]["modelled_driver_seconds"]["by_kind"].contains(kind));
  }
  for (const char* key : {"total", "after_first_iteration", "floor"}) {
    CHECK(j["results"][0]["modelled_driver_seconds"].contains(key));
  }
  CHECK(j["results"][0]["modelled_upstream_seconds"] == j["results"][0]["modelled_driver_seconds"]["total"]);
  CHECK_FALSE(j["results"][0].contains("hazards"));  // the judge is off unless asked for

  // --judge counts hazards (none in our pool's replay of this trace); --cost-model picks the profile.
  const auto judged = run_mgm("--sim 1x8GiB --json replay '" + trace.string() + "' --allocator pool,cub --judge");
  REQUIRE(judged.rc == 0);
  for (const auto& res : nlohmann::json::parse(judged.out)["results"]) CHECK(res["hazards"] == 0);
  const auto total_with = [&](const char* model) {
    const auto out = run_mgm("--sim 1x8GiB --json replay '" + trace.string() + "' --allocator direct --cost-model " + model);
    REQUIRE(out.rc == 0);
    return nlohmann::json::parse(out.out)["results"][0]["modelled_driver_seconds"]["total"].get<double>();
  };
  const double typical = total_with("typical");
  CHECK(total_with("default") == typical);
  CHECK(total_with("high") > typical);
  CHECK(total_with("low") <= typical);
  CHECK(total_with("none") == 0.0);
  CHECK(run_mgm("replay '" + trace.string() + "' --cost-model free").rc == 1);
  CHECK(j["results"][1]["device"] == 1);
  CHECK(j["results"][0]["peak_live_bytes"] == 5242880);
  CHECK_FALSE(j["results"][0]["fit"].is_null());
  CHECK(j["data_parallel"].size() == 2);
  CHECK(j["data_parallel"][0]["devices"] == 2);

  const auto table = run_mgm("replay '" + trace.string() + "' --allocator cub --cost-model none");
  REQUIRE(table.rc == 0);
  CHECK(table.out.find("tiny.rmm_log.csv") != std::string::npos);

  const auto async = run_mgm("--sim 2x8GiB replay '" + trace.string() + "' --allocator async");
  CHECK(async.rc == 2);
  CHECK(async.err.find("needs a GPU") != std::string::npos);
  const auto too_many = run_mgm("--sim dgx-h100 replay '" + trace.string() + "' --devices 9");
  CHECK(too_many.rc == 2);
  CHECK(too_many.err.find("the machine has 8 GPUs") != std::string::npos);
  const auto bad_file = scratch() / "bad.csv";
  std::ofstream{bad_file} << "Thread,Time,Action,Pointer,Size,Stream\n1,00:00:00.1,allocate,0x1,notasize,0x0\n";
  const auto bad = run_mgm("replay '" + bad_file.string() + "'");
  CHECK(bad.rc == 2);
  CHECK(bad.err.find("bad.csv:2") != std::string::npos);
}

// Issue 15, "Inputs that must be refused": each with a clear message (exit 1 for usage, 2 for
// bad input), and no message shows a source file's path.
TEST_CASE("mgm refuses bad input with a clear message, never a source path", "[tool]") {
  const auto dir = scratch();
  const std::string trace = (dir / "tiny.csv").string();
  std::ofstream{trace} << tiny_trace;
  const std::string log = (dir / "refused.csv").string();
  struct refusal {
    std::string args;
    int rc;
    std::string says;
  };
  const std::vector<refusal> cases{
      {"--sim pcie-4gpu-mixed plan --items 100 --bytes-per-item 1MiB --granularity -1", 1, "--granularity: '-1' is not a whole number"},
      {"--sim pcie-4gpu-mixed plan --items -5 --bytes-per-item 1MiB", 1, "--items: '-5' is not a whole number"},
      {"--sim dgx-h100 log --count -1 -o '" + log + "'", 1, "--count: '-1' is not a whole number"},
      {"--sim dgx-h100 log --count 0 --interval 1ms -o '" + log + "'", 1, "--count: must be at least 1"},
      {"--sim dgx-h100 log --interval 3000000h --count 1 -o '" + log + "'", 2, "too long"},
      {"--sim pcie-4gpu-mixed plan --items 100 --bytes-per-item 0", 2, "--bytes-per-item must be more than 0"},
      {"--sim dgx-h100 replay --devices 0 '" + trace + "'", 1, "--devices: must be at least 1, not 0"},
      {"--sim dgx-h100 replay --iterations 0 '" + trace + "'", 1, "--iterations: must be at least 1"},
      {"--sim pcie-4gpu-mixed plan --items 100 --bytes-per-item 1MiB --granularity 0", 1, "--granularity: must be at least 1"},
      {"--sim foo status", 2, "unknown preset (the presets: dgx1-v100"},
      {"--sim '" + dir.string() + "' status", 2, "a directory, not a topology file"},
      {"leak '" + dir.string() + "'", 2, "a directory, not a file"},
      {"plot '" + dir.string() + "' -o x.svg", 2, "a directory, not a file"},
      {"--sim dgx-h100 replay '" + dir.string() + "'", 2, "a directory, not a file"},
      {"topo --file '" + dir.string() + "'", 2, "a directory, not a file"},
      {"leak '" + (dir / "absent.csv").string() + "'", 2, "no such file"},
      // Without --sim and without a GPU, cudaMallocAsync cannot run: exit 3, as status; with --sim, 2.
      {"replay --allocator async '" + trace + "'", 3, "no GPU can be used"},
      {"--sim dgx-h100 replay --allocator async '" + trace + "'", 2, "it needs a GPU"},
  };
  for (const auto& c : cases) {
    const auto r = run_mgm(c.args);
    INFO("mgm " << c.args << "\n" << r.err);
    CHECK(r.rc == c.rc);
    CHECK(r.err.find(c.says) != std::string::npos);
    CHECK(r.err.find(".cpp") == std::string::npos);
    CHECK(r.err.find(".hpp") == std::string::npos);
  }
  CHECK_FALSE(fs::exists(log));  // refused before anything was written
}
