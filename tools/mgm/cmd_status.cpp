// mgm status: every GPU side by side, now or redrawn until Ctrl-C.
#include "live_source.hpp"
#include "mgm_tool.hpp"

#include <mgm/bytes.hpp>
#include <mgm/telemetry/log_format.hpp>
#include <mgm/telemetry/source.hpp>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

namespace mgm_tool {

namespace tel = mgm::telemetry;

namespace {

std::string opt_number(const std::optional<double>& v, const char* fmt) {
  if (!v) return "--";
  char buf[32];
  std::snprintf(buf, sizeof buf, fmt, *v);
  return buf;
}
template <class T>
std::string opt_uint(const std::optional<T>& v) {
  return v ? std::to_string(*v) : std::string{"--"};
}

// Memory in GiB with one decimal: narrow enough for 100 columns, exact enough to compare GPUs.
std::string gib(const std::optional<std::uint64_t>& bytes) {
  if (!bytes) return "--";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(*bytes) / static_cast<double>(std::uint64_t{1} << 30));
  return buf;
}

// The `n` largest processes: "train.py(777) 9.31 GiB", or compact "train.py(777) 9.3G".
std::string top_processes(const tel::device_sample& s, std::size_t n, bool compact = false) {
  auto procs = s.processes;
  std::sort(procs.begin(), procs.end(),
            [](const auto& a, const auto& b) { return a.used_bytes.value_or(0) > b.used_bytes.value_or(0); });
  std::string out;
  for (std::size_t i = 0; i < procs.size() && i < n; ++i) {
    if (!out.empty()) out += compact ? " " : ", ";
    out += (procs[i].name.empty() ? std::string{"?"} : procs[i].name) + "(" + std::to_string(procs[i].pid) + ") " +
           (compact ? gib(procs[i].used_bytes) + (procs[i].used_bytes ? "G" : "") : size_or_dash(procs[i].used_bytes));
  }
  if (procs.size() > n) out += (compact ? " +" : ", +") + std::to_string(procs.size() - n) + " more";
  return out.empty() ? "--" : out;
}

// A GPU by its index; a MIG instance as GPU.GI ("0.1"), named by its profile.
std::string index_label(const tel::device_sample& s) {
  return s.mig ? std::to_string(s.index) + "." + std::to_string(s.mig->gpu_instance_id) : std::to_string(s.index);
}
std::string name_of(const tel::device_sample& s) {
  if (s.mig) return "MIG " + s.mig->profile + " (GI " + std::to_string(s.mig->gpu_instance_id) + ")";
  // "NVIDIA " starts every name: the model is what tells GPUs apart in 20 columns.
  return s.name.rfind("NVIDIA ", 0) == 0 ? s.name.substr(7) : s.name;
}

// The default table fits 100 columns; --wide shows every metric.
constexpr std::size_t narrow_width = 100;

// Words filled into lines of at most `width` columns, each ending in a newline.
std::string wrap(const std::string& text, std::size_t width) {
  std::string out;
  for (const auto& line : wrap_words(text, width)) out += line + "\n";
  return out;
}

std::string fit(std::string text, std::size_t width) {
  if (text.size() <= width) return text;
  return width <= 3 ? text.substr(0, width) : text.substr(0, width - 3) + "...";
}

// Say once why columns are empty, not once per GPU.
void print_missing(const std::vector<tel::device_sample>& batch, std::size_t width) {
  std::vector<std::string> reasons;
  for (const auto& s : batch) {
    for (const auto& m : s.missing) {
      if (std::find(reasons.begin(), reasons.end(), m) == reasons.end()) reasons.push_back(m);
    }
  }
  if (reasons.empty()) return;
  std::string note = "--: not available.";
  for (std::size_t i = 0; i < reasons.size() && i < 4; ++i) note += " " + reasons[i] + ".";
  if (reasons.size() > 4) note += " (" + std::to_string(reasons.size() - 4) + " more reasons; --json lists them per GPU)";
  std::printf("\n%s", wrap(note, width).c_str());
}

void print_narrow(const std::vector<tel::device_sample>& batch) {
  std::printf("%-3s %-20s %13s %7s %4s %4s %9s %11s  %s\n", "GPU", "NAME", "USED/TOTAL GiB", "FREE", "UTIL", "TEMP",
              "POWER W", "POOLS GiB", "TOP PROCESSES");
  for (const auto& s : batch) {
    const std::string used_total = gib(s.memory_used) + "/" + gib(s.memory_total);
    const std::string pools = s.pool_reserved ? gib(s.pool_allocated) + "/" + gib(s.pool_reserved) : "--";
    const std::string power = opt_number(s.power_draw_w, "%.0f") + "/" + opt_number(s.power_limit_w, "%.0f");
    const std::string util = s.utilization_gpu_pct ? std::to_string(*s.utilization_gpu_pct) + "%" : "--";
    char row[160];
    std::snprintf(row, sizeof row, "%-3s %-20.20s %13s %7s %4s %4s %9s %11s  ", index_label(s).c_str(), name_of(s).c_str(),
                  used_total.c_str(), gib(s.memory_free).c_str(), util.c_str(),
                  opt_number(s.temperature_c, "%.0fC").c_str(), power.c_str(), pools.c_str());
    const std::string head{row};
    const std::size_t room = head.size() < narrow_width ? narrow_width - head.size() : 0;
    std::printf("%s%s\n", head.c_str(), fit(top_processes(s, 2, true), room).c_str());
  }
}

void print_wide(const std::vector<tel::device_sample>& batch) {
  std::printf("%-3s %-24s %10s %10s %10s %9s %21s %4s %5s %15s %11s %8s %6s  %s\n", "GPU", "NAME", "TOTAL", "USED", "FREE",
              "RESERVED", "POOLS ALLOC/RESERVED", "UTIL", "TEMP", "POWER/LIMIT W", "SM/MEM MHz", "PCIE", "NVLINK",
              "TOP PROCESSES");
  for (const auto& s : batch) {
    const std::string pools = s.pool_reserved ? size_or_dash(s.pool_allocated) + " / " + size_or_dash(s.pool_reserved) : "--";
    const std::string power = opt_number(s.power_draw_w, "%.0f") + "/" + opt_number(s.power_limit_w, "%.0f");
    const std::string clocks = opt_uint(s.clock_sm_mhz) + "/" + opt_uint(s.clock_mem_mhz);
    const std::string pcie = s.pcie_gen ? "gen" + std::to_string(*s.pcie_gen) + " x" + opt_uint(s.pcie_width) : "--";
    const std::string util = s.utilization_gpu_pct ? std::to_string(*s.utilization_gpu_pct) + "%" : "--";
    std::printf("%-3s %-24.24s %10s %10s %10s %9s %21s %4s %5s %15s %11s %8s %6s  %s\n", index_label(s).c_str(),
                s.mig ? name_of(s).c_str() : s.name.c_str(),
                size_or_dash(s.memory_total).c_str(), size_or_dash(s.memory_used).c_str(),
                size_or_dash(s.memory_free).c_str(), size_or_dash(s.memory_reserved).c_str(), pools.c_str(),
                util.c_str(), opt_number(s.temperature_c, "%.0fC").c_str(), power.c_str(), clocks.c_str(),
                pcie.c_str(), opt_uint(s.nvlink_up).c_str(), top_processes(s, 5).c_str());
  }
}

void print_status(const std::string& source_name, const std::string& capacity_source,
                  const std::vector<tel::device_sample>& batch, bool wide) {
  const auto migs = static_cast<std::size_t>(std::count_if(batch.begin(), batch.end(), [](const auto& s) { return s.mig.has_value(); }));
  const std::size_t gpus = batch.size() - migs;
  const std::string instances = migs == 0 ? "" : ", " + std::to_string(migs) + " MIG instance" + (migs == 1 ? "" : "s");
  std::printf("%zu GPU%s%s (%s%s)\n\n", gpus, gpus == 1 ? "" : "s", instances.c_str(), source_name.c_str(),
              capacity_source.empty() ? "" : ("; memory sizes from " + capacity_source).c_str());
  if (wide) {
    print_wide(batch);
  } else {
    print_narrow(batch);
  }
  const std::size_t width = wide ? 160 : narrow_width;
  print_missing(batch, width);
  std::printf("%s", wrap(std::string{"POOLS: MultiGpuMem pools (allocated/reserved) of this process and of those "
                                     "publishing with MGM_PUBLISH=1."} +
                             (wide ? "" : " --wide: clocks, PCIe, NVLink, reserved memory."),
                         width)
                        .c_str());
}

}  // namespace

void add_status(CLI::App& app, context& ctx) {
  auto* cmd = app.add_subcommand("status", "Every GPU side by side: memory (and inside MultiGpuMem pools), "
                                           "utilisation, temperature, power, top processes (--wide: clocks, PCIe, "
                                           "NVLink, reserved memory)");
  auto wide = std::make_shared<bool>(false);
  auto watch = std::make_shared<std::string>();
  cmd->add_flag("--wide", *wide, "Every metric, wider than 100 columns");
  auto* watch_opt = cmd->add_option("--watch", *watch, "Redraw every INTERVAL (default 2s) until Ctrl-C, as nvidia-smi -l")
                        ->expected(0, 1);
  cmd->footer("Example: mgm status    (or: mgm --sim dgx-h100 status, mgm status --watch 1s, mgm --json status)");
  cmd->callback([&ctx, wide, watch, watch_opt] {
    // The options first: a mistake is said as such, with or without a GPU.
    const bool watching = watch_opt->count() > 0;
    if (watching && ctx.json) throw tool_error{exit_usage, "--watch redraws a table: use mgm log --format jsonl for JSON over time"};
    const auto interval = watching ? parse_duration(watch->empty() ? std::string{"2s"} : *watch)
                                   : std::chrono::duration<double>{0};
    if (watching && interval.count() < 0.1) throw tool_error{exit_bad_input, "--watch needs at least 100ms between frames"};
    std::optional<sim_choice> machine;
    auto src = open_source(ctx, machine);
    const std::string capacity_source = machine ? machine->capacity_source : std::string{};
    if (ctx.json) {
      const auto batch = src->sample();
      nlohmann::json out;
      out["source"] = src->name();
      if (!capacity_source.empty()) out["capacity_source"] = capacity_source;
      out["devices"] = nlohmann::json::array();
      for (const auto& s : batch) out["devices"].push_back(nlohmann::json::parse(tel::to_json_line(s)));
      std::printf("%s\n", out.dump(2).c_str());
      return;
    }
    if (!watching) {
      print_status(src->name(), capacity_source, src->sample(), *wide);
      return;
    }
    // Redraw in place on a terminal (home and clear, as watch(1) does); elsewhere, frames one
    // after another with their time. Ctrl-C ends it with the screen as it was.
    stop_on_interrupt();
    const bool tty = ::isatty(1) != 0;
    auto next = std::chrono::steady_clock::now();
    std::size_t frames = 0;
    while (!g_interrupted.load()) {
      const auto batch = src->sample();
      const std::time_t now = std::time(nullptr);
      char when[32];
      std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
      if (tty) std::printf("\033[H\033[2J");
      else if (frames > 0) std::printf("\n");
      std::printf("%s, every %.3gs (Ctrl-C stops)\n", when, interval.count());
      print_status(src->name(), capacity_source, batch, *wide);
      std::fflush(stdout);
      ++frames;
      // After a stall (a suspend, a slow driver call) the next frame is an interval from now, not a
      // burst of the frames missed.
      next = std::max(next + std::chrono::duration_cast<std::chrono::steady_clock::duration>(interval),
                      std::chrono::steady_clock::now());
      while (!g_interrupted.load() && std::chrono::steady_clock::now() < next) {
        std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
            next - std::chrono::steady_clock::now(), std::chrono::milliseconds{50}));
      }
    }
    std::fflush(stdout);
  });
}

}  // namespace mgm_tool
