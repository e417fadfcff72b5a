// mgm log: every GPU sampled at an interval into a file (nvidia-smi CSV, JSON lines or Prometheus
// text), complete whenever it stops.
#include "live_source.hpp"
#include "mgm_tool.hpp"

#include <mgm/telemetry/log_format.hpp>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

namespace mgm_tool {

namespace tel = mgm::telemetry;

void add_log(CLI::App& app, context& ctx) {
  auto* cmd = app.add_subcommand("log", "Sample every GPU at an interval into a file (nvidia-smi CSV, JSON lines or "
                                        "Prometheus text); Ctrl-C stops with the file complete");
  struct options {
    std::string output;
    std::string processes;
    std::string interval{"5s"};
    std::size_t count{0};
    std::string duration;
    std::string format{"csv"};
    bool nounits{false};
  };
  auto o = std::make_shared<options>();
  cmd->add_option("-o,--output", o->output, "The log file (replaced)")->required();
  cmd->add_option("--interval", o->interval, "Time between samples: 5s, 500ms, 1m")->capture_default_str();
  auto* count = cmd->add_option("--count", o->count, "Stop after N samples (leave it out to log until Ctrl-C)")
                    ->check(count_at_least(1));
  cmd->add_option("--duration", o->duration, "Stop after this long: 10m, 2h")->excludes(count);
  cmd->add_option("--format", o->format, "csv (nvidia-smi --query-gpu form), jsonl, or prom (the file holds the latest sample)")
      ->check(CLI::IsMember({"csv", "jsonl", "prom"}))
      ->capture_default_str();
  cmd->add_option("--processes", o->processes, "Also write per-process memory here (--query-compute-apps form)");
  cmd->add_flag("--nounits", o->nounits, "CSV values without units, as nvidia-smi's nounits");
  cmd->footer("Example: mgm log -o gpus.csv --interval 5s --duration 1h");
  cmd->callback([&ctx, o] {
    const auto interval = parse_duration(o->interval);
    if (interval.count() <= 0) throw tool_error{exit_bad_input, "--interval must be more than 0"};
    std::optional<double> until;
    if (!o->duration.empty()) until = parse_duration(o->duration).count();
    std::optional<sim_choice> machine;
    auto src = open_source(ctx, machine);

    std::optional<tel::csv_sink> csv;
    std::optional<tel::jsonl_sink> jsonl;
    std::optional<tel::process_csv_sink> procs;
    try {
      if (o->format == "csv") csv.emplace(std::filesystem::path{o->output}, !o->nounits);
      if (o->format == "jsonl") jsonl.emplace(std::filesystem::path{o->output});
      if (!o->processes.empty()) procs.emplace(std::filesystem::path{o->processes}, !o->nounits);
    } catch (const std::exception& e) {
      throw tool_error{exit_bad_input, e.what()};
    }
    auto write_prom = [&](const std::vector<tel::device_sample>& batch) {
      const auto tmp = o->output + ".tmp";
      {
        std::ofstream f{tmp, std::ios::trunc};
        f << tel::to_prometheus(batch);
        if (!f) throw tool_error{exit_bad_input, "cannot write " + tmp};
      }
      std::filesystem::rename(tmp, o->output);  // readers (node_exporter's textfile collector) never see half
    };

    stop_on_interrupt();
    const bool tty = ::isatty(2) != 0;
    const auto start = std::chrono::steady_clock::now();
    auto next = start;
    std::size_t taken = 0;
    while (!g_interrupted.load()) {
      const auto batch = src->sample();
      // nvidia-smi --query-gpu lists GPUs, not their MIG instances: the CSV keeps its shape (one
      // row per GPU); JSON lines and Prometheus text carry the instances.
      std::vector<tel::device_sample> gpus_only;
      std::copy_if(batch.begin(), batch.end(), std::back_inserter(gpus_only), [](const auto& s) { return !s.mig; });
      if (csv) csv->write(gpus_only);
      if (jsonl) jsonl->write(batch);
      if (o->format == "prom") write_prom(batch);
      if (procs) procs->write(gpus_only);
      ++taken;
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (tty) {
        std::fprintf(stderr, "\r%zu sample%s of %zu GPU%s written to %s (%.0f s)", taken, taken == 1 ? "" : "s",
                     batch.size(), batch.size() == 1 ? "" : "s", o->output.c_str(), elapsed);
      }
      if (o->count != 0 && taken >= o->count) break;
      if (until && elapsed + interval.count() > *until + 1e-9) break;
      next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(interval);
      while (!g_interrupted.load() && std::chrono::steady_clock::now() < next) {
        std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
            next - std::chrono::steady_clock::now(), std::chrono::milliseconds{50}));
      }
    }
    if (tty) std::fprintf(stderr, "\n");
    if (!ctx.json) {
      std::printf("%zu sample%s written to %s%s\n", taken, taken == 1 ? "" : "s", o->output.c_str(),
                  g_interrupted.load() ? " (interrupted; the file is complete)" : "");
    } else {
      const nlohmann::ordered_json j{{"samples", taken}, {"output", o->output}, {"interrupted", g_interrupted.load()}};
      std::printf("%s\n", j.dump().c_str());
    }
  });
}

}  // namespace mgm_tool
