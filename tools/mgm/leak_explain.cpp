// The sentences of `mgm leak`: each reason of a leak report, with its facts, said for people.
#include "leak_explain.hpp"

#include "number_text.hpp"

#include <cmath>
#include <string>

namespace mgm_tool {

namespace tel = mgm::telemetry;

namespace {

/// "95 s", "30.1 min", "2.50 h".
std::string duration_text(double seconds) {
  if (std::abs(seconds) < 120.0) return fixed(seconds, 0) + " s";
  if (std::abs(seconds) < 3 * 3600.0) return fixed(seconds / 60.0, 1) + " min";
  return fixed(seconds / 3600.0, 2) + " h";
}

std::string rate_text(double mib_per_min) {
  return fixed(mib_per_min, std::abs(mib_per_min) < 10.0 ? 2 : 1) + " MiB/min";
}

}  // namespace

std::string leak_explanation(const tel::leak_report& rep) {
  const double t0 = rep.first_seconds;
  if (rep.reason == tel::leak_reason::no_readings) return "No memory readings, so nothing can be said about leaks.";
  if (rep.reason == tel::leak_reason::too_few_readings) {
    return "Only " + std::to_string(rep.points) + " usable reading(s) over " + duration_text(rep.last_seconds - t0) +
           ", too few after the warm-up to judge growth.";
  }
  const tel::run_report& r = rep.runs[rep.deciding_run];
  std::string restarts;
  if (!rep.restart_seconds.empty()) {
    restarts = "the process restarted " + std::to_string(rep.restart_seconds.size()) +
               (rep.restart_seconds.size() == 1 ? " time" : " times") + " (memory fell to idle at";
    for (std::size_t i = 0; i < rep.restart_seconds.size(); ++i) {
      restarts += (i == 0 ? " " : ", ") + duration_text(rep.restart_seconds[i] - t0);
    }
    restarts += ")";
  }
  const std::string ended =
      rep.job_end_seconds ? "; the job ended at " + duration_text(*rep.job_end_seconds - t0) + " and freed its memory"
                          : "";
  const std::string and_restarts = restarts.empty() ? "" : ", and " + restarts;
  const double load_min = (r.end_seconds - r.load_start_seconds) / 60.0;
  const std::string floor_moves = " (" + fixed(r.first_floor_mib, 0) + " to " + fixed(r.last_floor_mib, 0) + " MiB, " +
                                  rate_text(r.rate_mib_per_min) + ")";
  switch (rep.reason) {
    case tel::leak_reason::floor_kept_rising:
      return "Leak: memory was released " + std::to_string(r.releases) +
             " times, but the floor it fell back to kept rising" + floor_moves + " over " + fixed(load_min, 1) + " min" +
             and_restarts + ended + ".";
    case tel::leak_reason::sawtooth_same_floor:
      return "No leak: memory rose and was released " + std::to_string(r.releases) +
             " times back to about the same floor" + floor_moves + ", as a cache that empties periodically does" + ended +
             ".";
    case tel::leak_reason::kept_growing:
      return "Leak: after the warm-up memory grew from " + fixed(r.start_level_mib, 0) + " to " +
             fixed(r.end_level_mib, 0) + " MiB at " + rate_text(r.rate_mib_per_min) + " over " + fixed(load_min, 1) +
             " min and did not level off" + and_restarts + ended + ".";
    case tel::leak_reason::levelled_off:
      return "Not a leak: after the warm-up memory grew by " + fixed(r.end_level_mib - r.start_level_mib, 0) + " MiB (" +
             rate_text(r.rate_mib_per_min) + ") and then levelled off at " + fixed(r.end_level_mib, 0) + " MiB from " +
             duration_text(*r.plateau_start_seconds - t0) + " on" + ended + ".";
    case tel::leak_reason::restarts_only:
      return "Not a leak: " + restarts + " and memory did not keep growing within any run" + ended + ".";
    case tel::leak_reason::grew_below_thresholds:
      return "No leak: after the warm-up memory grew only " + rate_text(r.rate_mib_per_min) + " over " +
             fixed(load_min, 1) + " min (from " + fixed(r.start_level_mib, 0) + " to " + fixed(r.end_level_mib, 0) +
             " MiB), below the leak thresholds (" + rate_text(rep.min_rate_mib_per_min) + ", or " +
             fixed(rep.min_leak_growth_mib, 0) + " MiB in all)" + ended + ".";
    case tel::leak_reason::flat:
      return "No leak: after the warm-up memory stayed near " + fixed(r.median_mib, 0) + " MiB (Theil-Sen slope " +
             rate_text(r.slope.mib_per_min) + " over " + fixed(load_min, 1) + " min)" + ended + ".";
    case tel::leak_reason::no_readings:
    case tel::leak_reason::too_few_readings:
      break;
  }
  return {};
}

std::string leak_explanation(const tel::gpu_leak_report& g) {
  if (g.memory_readings == 0) {
    return g.pid ? "No used_gpu_memory readings in the " + std::to_string(g.samples) +
                       " rows of this process, so nothing can be said about leaks."
                 : "No memory.used readings in the " + std::to_string(g.samples) +
                       " samples of this GPU, so nothing can be said about leaks.";
  }
  return leak_explanation(g.report);
}

}  // namespace mgm_tool
