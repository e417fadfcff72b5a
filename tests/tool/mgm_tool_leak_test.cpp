// `mgm leak` as users run it: thresholds as options, per-process verdicts joined to their GPU by
// UUID (`--processes`), a sawtooth and a slow leak judged right end to end.
#include "tool/run_mgm.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

using namespace mgm_tool_test;

namespace {

const char* uuid0 = "GPU-00000000-1111-2222-3333-444444444444";
const char* uuid1 = "GPU-99999999-8888-7777-6666-555555555555";

// "2026/12/01 00:00:00.000" plus `seconds`.
std::string stamp(long seconds) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "2026/12/%02ld %02ld:%02ld:%02ld.000", 1 + seconds / 86400, seconds / 3600 % 24,
                seconds / 60 % 60, seconds % 60);
  return buf;
}

// A two-GPU nvidia-smi CSV (GPU0 flat, GPU1 a sawtooth that empties to its floor every 30 min),
// and the per-process file of the same run: a process on GPU1 leaks 0.6 MiB/min for three days.
void write_logs(const fs::path& gpus, const fs::path& procs) {
  std::ofstream g{gpus};
  std::ofstream p{procs};
  g << "timestamp, index, uuid, name, memory.total [MiB], memory.used [MiB]\n";
  p << "timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n";
  for (long t = 0; t <= 3 * 86400; t += 300) {
    const double saw = 9000.0 + 3000.0 * std::fmod(static_cast<double>(t), 1800.0) / 1800.0;
    g << stamp(t) << ", 0, " << uuid0 << ", NVIDIA A100-SXM4-80GB, 81920 MiB, 4000 MiB\n";
    g << stamp(t) << ", 1, " << uuid1 << ", NVIDIA A100-SXM4-80GB, 81920 MiB, " << std::lround(saw) << " MiB\n";
    p << stamp(t) << ", " << uuid1 << ", 4242, train.py, " << std::lround(5000.0 + 0.6 * static_cast<double>(t) / 60.0)
      << " MiB\n";
  }
}

}  // namespace

TEST_CASE("mgm leak --processes joins each process to its GPU by UUID, sawtooths and slow leaks judged right", "[tool]") {
  const auto gpus = scratch() / "leak_gpus.csv";
  const auto procs = scratch() / "leak_apps.csv";
  write_logs(gpus, procs);
  const auto r = run_mgm("--json leak '" + gpus.string() + "' --processes '" + procs.string() + "'");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j.size() == 3);
  CHECK(j[0]["gpu"] == 0);
  CHECK(j[0]["verdict"] == "no_growth");
  CHECK(j[1]["gpu"] == 1);
  CHECK(j[1]["verdict"] == "no_growth");  // a sawtooth back to the same floor
  CHECK(j[1]["explanation"].get<std::string>().find("released") != std::string::npos);
  CHECK(j[2]["gpu"] == 1);                // the process's GPU, by UUID, not GPU0
  CHECK(j[2]["pid"] == 4242);
  CHECK(j[2]["verdict"] == "leak");       // 0.6 MiB/min, 2.5 GiB in three days
  CHECK(j[2]["rate_mib_per_min"].get<double>() == Approx(0.6).epsilon(0.02));

  const auto text = run_mgm("leak '" + gpus.string() + "' --processes '" + procs.string() + "'");
  REQUIRE(text.rc == 0);
  CHECK(text.out.find("GPU1 NVIDIA A100-SXM4-80GB pid 4242") != std::string::npos);

  // The per-process file alone: its GPU is named by UUID, never taken for GPU0.
  const auto alone = run_mgm("--json leak '" + procs.string() + "'");
  REQUIRE(alone.rc == 0);
  const auto a = nlohmann::json::parse(alone.out);
  REQUIRE(a.size() == 1);
  CHECK(a[0]["gpu"].is_null());
  CHECK(a[0]["key"] == uuid1);
  CHECK(run_mgm("leak '" + procs.string() + "'").out.find("GPU-99999999 pid 4242 (train.py)") != std::string::npos);

  // Thresholds are options: with a higher bar for the total, the slow leak is slow growth.
  const auto strict = run_mgm("--json leak '" + gpus.string() + "' --processes '" + procs.string() + "' --min-growth 4GiB");
  REQUIRE(strict.rc == 0);
  CHECK(nlohmann::json::parse(strict.out)[2]["verdict"] == "no_growth");
  const auto help = run_mgm("leak --help");
  CHECK(help.out.find("--min-rate") != std::string::npos);
  CHECK(help.out.find("--min-growth") != std::string::npos);

  // Bad input.
  CHECK(run_mgm("leak '" + gpus.string() + "' --min-rate -1").rc == 1);
  CHECK(run_mgm("leak '" + gpus.string() + "' --min-growth lots").rc == 2);
  const auto swapped = run_mgm("leak '" + procs.string() + "' --processes '" + procs.string() + "'");
  CHECK(swapped.rc == 2);
  CHECK(swapped.err.find("give the GPU log first") != std::string::npos);
  const auto not_procs = run_mgm("leak '" + gpus.string() + "' --processes '" + gpus.string() + "'");
  CHECK(not_procs.rc == 2);
  CHECK(not_procs.err.find("no per-process rows") != std::string::npos);
}

TEST_CASE("mgm plot: legends that fit, a time axis in days for days, gaps drawn as gaps", "[tool]") {
  const auto gpus = scratch() / "plot_gpus.csv";
  const auto procs = scratch() / "plot_apps.csv";
  write_logs(gpus, procs);
  // Cut a gap of a day out of GPU1's readings (the logger stopped).
  const auto gapped = scratch() / "plot_gapped.csv";
  {
    std::ifstream in{gpus};
    std::ofstream out{gapped};
    std::string line;
    std::getline(in, line);
    out << line << "\n";
    while (std::getline(in, line)) {
      const bool day_two = line.rfind("2026/12/02", 0) == 0;
      if (!(day_two && line.find(uuid1) != std::string::npos)) out << line << "\n";
    }
  }
  const auto svg_path = scratch() / "plot.svg";
  const auto r = run_mgm("plot '" + gapped.string() + "' -o '" + svg_path.string() + "' --title 'Three days'");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  const std::string svg = slurp(svg_path);
  CHECK(svg.find("days since the first reading") != std::string::npos);
  // GPU0 is one stretch; GPU1 two, either side of its missing day.
  CHECK(count(svg, "<polyline class=\"gpu\" data-gpu=\"GPU0") == 1);
  CHECK(count(svg, "<polyline class=\"gpu\" data-gpu=\"GPU1") == 2);
  // Every legend line fits the margin (29 characters), and words are whole: the legend's words,
  // put back together, are the label and the verdict.
  std::string legend_words;
  for (auto at = svg.find("<text class=\"legend\""); at != std::string::npos; at = svg.find("<text class=\"legend\"", at + 1)) {
    const auto open = svg.find('>', at) + 1;
    const std::string text = svg.substr(open, svg.find("</text>", open) - open);
    CHECK(text.size() <= 29);
    legend_words += (legend_words.empty() ? "" : " ") + text;
  }
  CHECK(legend_words.find("GPU0 NVIDIA A100-SXM4-80GB: no_growth") != std::string::npos);
  // A renderer draws it (librsvg, as a browser would; where it is installed).
  if (std::system("command -v rsvg-convert >/dev/null 2>&1") == 0) {
    const auto png = scratch() / "plot.png";
    CHECK(std::system(("rsvg-convert '" + svg_path.string() + "' -o '" + png.string() + "'").c_str()) == 0);
    CHECK(fs::file_size(png) > 1000);
  }
  CHECK(legend_words.find("GPU1 NVIDIA A100-SXM4-80GB: no_growth") != std::string::npos);
  // An hour's log is in minutes, a day's in hours.
  const auto hour = scratch() / "plot_hour.csv";
  {
    std::ofstream out{hour};
    out << "timestamp, index, memory.used [MiB]\n";
    for (long t = 0; t <= 4 * 3600; t += 60) out << stamp(t) << ", 0, 1000 MiB\n";
  }
  REQUIRE(run_mgm("plot '" + hour.string() + "' -o '" + svg_path.string() + "'").rc == 0);
  CHECK(slurp(svg_path).find("hours since the first reading") != std::string::npos);
  // Thinned to about two points per pixel column, a long log without gaps is still one line.
  const auto dense = scratch() / "plot_dense.csv";
  {
    std::ofstream out{dense};
    out << "timestamp, index, memory.used [MiB]\n";
    for (long t = 0; t <= 8 * 3600; t += 5) out << stamp(t) << ", 0, " << 1000 + t % 700 << " MiB\n";
  }
  REQUIRE(run_mgm("plot '" + dense.string() + "' -o '" + svg_path.string() + "'").rc == 0);
  CHECK(count(slurp(svg_path), "<polyline class=\"gpu\"") == 1);
}
