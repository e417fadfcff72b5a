// The sentences of the leak analysis: each verdict's facts, said for people.
#include "leak_detail.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>

namespace mgm::telemetry::leak_detail {

namespace {

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

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

std::string explain(const leak_report& rep, const leak_options& o) {
  const double t0 = rep.first_seconds;
  if (rep.verdict == leak_verdict::no_data) {
    if (rep.points == 0) return "No memory readings, so nothing can be said about leaks.";
    return "Only " + std::to_string(rep.points) +
           " usable reading(s) over " + duration_text(rep.last_seconds - t0) +
           ", too few after the warm-up to judge growth.";
  }
  const run_report& r = rep.runs[rep.deciding_run];
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
  const double load_min = (r.end_seconds - r.load_start_seconds) / 60.0;
  const std::string floor_moves = r.releases >= 2 ? " (" + fixed(r.first_floor_mib, 0) + " to " +
                                                          fixed(r.last_floor_mib, 0) + " MiB, " +
                                                          rate_text(r.rate_mib_per_min) + ")"
                                                    : "";
  if (r.releases >= 2 && rep.verdict == leak_verdict::leak) {
    return "Leak: memory was released " + std::to_string(r.releases) +
           " times, but the floor it fell back to kept rising" + floor_moves + " over " + fixed(load_min, 1) + " min" +
           (restarts.empty() ? "" : ", and " + restarts) + ended + ".";
  }
  if (r.releases >= 2 && rep.verdict == leak_verdict::no_growth) {
    return "No leak: memory rose and was released " + std::to_string(r.releases) +
           " times back to about the same floor" + floor_moves +
           ", as a cache that empties periodically does" + ended + ".";
  }
  switch (rep.verdict) {
    case leak_verdict::leak:
      return "Leak: after the warm-up memory grew from " + fixed(r.start_level_mib, 0) + " to " +
             fixed(r.end_level_mib, 0) + " MiB at " + rate_text(r.rate_mib_per_min) + " over " +
             fixed(load_min, 1) + " min and did not level off" + (restarts.empty() ? "" : ", and " + restarts) +
             ended + ".";
    case leak_verdict::growth_then_plateau:
      return "Not a leak: after the warm-up memory grew by " + fixed(r.end_level_mib - r.start_level_mib, 0) +
             " MiB (" + rate_text(r.rate_mib_per_min) + ") and then levelled off at " + fixed(r.end_level_mib, 0) +
             " MiB from " + duration_text(*r.plateau_start_seconds - t0) + " on" + ended + ".";
    case leak_verdict::restarted:
      return "Not a leak: " + restarts + " and memory did not keep growing within any run" + ended + ".";
    case leak_verdict::no_growth:
      if (r.grew) {
        return "No leak: after the warm-up memory grew only " + rate_text(r.rate_mib_per_min) + " over " +
               fixed(load_min, 1) + " min (from " + fixed(r.start_level_mib, 0) + " to " + fixed(r.end_level_mib, 0) +
               " MiB), below the leak thresholds (" + rate_text(o.min_rate_mib_per_min) + ", or " +
               fixed(o.min_leak_growth_mib, 0) + " MiB in all)" + ended + ".";
      }
      return "No leak: after the warm-up memory stayed near " + fixed(r.median_mib, 0) + " MiB (Theil-Sen slope " +
             rate_text(r.slope.mib_per_min) + " over " + fixed(load_min, 1) + " min)" + ended + ".";
    case leak_verdict::no_data:
      break;
  }
  return {};
}

}  // namespace mgm::telemetry::leak_detail
