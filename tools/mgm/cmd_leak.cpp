// mgm leak: verdicts on a GPU log, per GPU and per process.
#include "leak_explain.hpp"
#include "log_input.hpp"
#include "mgm_tool.hpp"

#include <mgm/bytes.hpp>
#include <mgm/telemetry/leak_analysis.hpp>
#include <mgm/telemetry/log_format.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>

namespace mgm_tool {

namespace tel = mgm::telemetry;

namespace {

struct threshold_options {
  double min_rate{tel::leak_options{}.min_rate_mib_per_min};
  std::string min_growth{"256MiB"};
};

tel::leak_options leak_options_from(const std::string& baseline, const threshold_options& t) {
  tel::leak_options lo;
  lo.min_rate_mib_per_min = t.min_rate;
  try {
    lo.min_leak_growth_mib = static_cast<double>(mgm::parse_bytes(t.min_growth)) / (1024.0 * 1024.0);
  } catch (const std::exception& e) {
    throw tool_error{exit_bad_input, "--min-growth: " + std::string{e.what()}};
  }
  if (baseline.empty()) return lo;
  const auto colon = baseline.find(':');
  if (colon == std::string::npos) {
    throw tool_error{exit_bad_input, "--baseline '" + baseline + "': write START:END, times from the log's start (0:10m)"};
  }
  const double start = parse_duration(baseline.substr(0, colon)).count();
  const double end = parse_duration(baseline.substr(colon + 1)).count();
  if (end <= start) throw tool_error{exit_bad_input, "--baseline '" + baseline + "': END must come after START"};
  lo.baseline = tel::time_window{start, end};
  return lo;
}

std::string who(const tel::gpu_leak_report& g) {
  // A process whose GPU is not in the log is named by its GPU's UUID, never taken for GPU0.
  std::string s = g.gpu_found ? "GPU" + std::to_string(g.index) : g.gpu_key.empty() ? std::string{"GPU ?"} : g.gpu_key.substr(0, 12);
  if (!g.name.empty()) s += " " + g.name;
  if (g.pid) s += " pid " + std::to_string(*g.pid) + (g.process_name.empty() ? "" : " (" + g.process_name + ")");
  return s;
}

}  // namespace

void add_leak(CLI::App& app, context& ctx) {
  auto* cmd = app.add_subcommand("leak", "Leak verdicts per GPU (and per process) from a log: ours, nvidia-smi CSV or table, nvidia-smi -q / -q -x, or GPU-Z");
  auto file = std::make_shared<std::string>();
  auto baseline = std::make_shared<std::string>();
  auto lo = std::make_shared<log_options>();
  cmd->add_option("file", *file, "The log")->required();
  cmd->add_option("--baseline", *baseline, "The window of normal use, times from the log's start: 0:10m");
  auto processes = std::make_shared<std::string>();
  cmd->add_option("--processes", *processes,
                  "The per-process log of the same run (mgm log --processes, nvidia-smi --query-compute-apps): "
                  "each process is joined to its GPU by UUID");
  auto t = std::make_shared<threshold_options>();
  cmd->add_option("--min-rate", t->min_rate, "Growth at least this fast (MiB/min) after the warm-up is a leak")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--min-growth", t->min_growth,
                  "... and so is slower growth that adds up to at least this much (a slow leak over days)")
      ->capture_default_str();
  add_log_options(cmd, *lo);
  cmd->footer("Example: mgm leak gpus.csv --processes apps.csv --baseline 5m:15m");
  cmd->callback([&ctx, file, baseline, lo, processes, t] {
    auto log = read_log(*file, *lo);
    report_issues(*file, log);
    if (!processes->empty()) {
      auto procs = read_log(*processes, *lo);
      report_issues(*processes, procs);
      if (procs.process_rows.empty()) {
        throw tool_error{exit_bad_input, "--processes " + *processes + ": no per-process rows in it (a --query-compute-apps "
                                         "log has gpu_uuid, pid, process_name, used_gpu_memory)"};
      }
      if (log.samples.empty() && !log.process_rows.empty()) {
        throw tool_error{exit_bad_input, *file + " is itself a per-process log: give the GPU log first, then --processes"};
      }
      // The per-process file is the record of the processes: the GPU log's own rows give way.
      log.process_rows = std::move(procs.process_rows);
    }
    if (log.samples.empty() && log.process_rows.empty()) throw tool_error{exit_bad_input, *file + ": no readings in it"};
    const auto reports = tel::analyse_log(log, leak_options_from(*baseline, *t));
    if (ctx.json) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& g : reports) {
        nlohmann::json j{{"gpu", g.gpu_found ? nlohmann::json(g.index) : nlohmann::json(nullptr)},
                         {"key", g.gpu_key}, {"name", g.name}, {"verdict", tel::to_string(g.report.verdict)},
                         {"rate_mib_per_min", g.report.rate_mib_per_min}, {"confidence", g.report.confidence},
                         {"explanation", leak_explanation(g)}, {"samples", g.samples},
                         {"restart_seconds", g.report.restart_seconds}};
        if (g.pid) {
          j["pid"] = *g.pid;
          j["process_name"] = g.process_name;
        }
        out.push_back(j);
      }
      std::printf("%s\n", out.dump(2).c_str());
      return;
    }
    std::printf("%s: %s, %zu readings%s\n\n", file->c_str(), log.format.c_str(), log.samples.size(),
                log.has_timestamps ? "" : " (no timestamps: rows taken --interval apart)");
    std::printf("%-40s %-20s %13s %6s  %s\n", "GPU", "VERDICT", "RATE MiB/min", "CONF", "WHY");
    for (const auto& g : reports) {
      std::printf("%-40.40s %-20s %13.1f %6.2f  %s\n", who(g).c_str(), tel::to_string(g.report.verdict),
                  g.report.rate_mib_per_min, g.report.confidence, leak_explanation(g).c_str());
    }
  });
}

}  // namespace mgm_tool
