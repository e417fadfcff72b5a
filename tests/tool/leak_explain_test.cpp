// The sentences of `mgm leak` (tools/mgm/leak_explain.cpp): each reason of a leak report, said with
// its numbers, exactly as `mgm leak` and the "explanation" key of `mgm leak --json` print them.
#include "leak_explain.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

namespace tel = mgm::telemetry;
using mgm_tool::leak_explanation;

namespace {

// `n` readings a minute apart: `mib(k)` at minute k.
std::vector<tel::series_point> minutes(int n, const std::function<double(int)>& mib) {
  std::vector<tel::series_point> out;
  for (int k = 0; k < n; ++k) out.push_back({60.0 * k, mib(k)});
  return out;
}

// Six hours of a cache that fills by 3000 MiB and empties every 40 minutes, on a floor that rises
// `floor_mib_per_min`.
double sawtooth(int k, double floor_mib_per_min) {
  return k < 2 ? 2.0 : 9000.0 + 75.0 * (k % 40) + floor_mib_per_min * k;
}

}  // namespace

TEST_CASE("leak sentences: each reason, with the report's numbers", "[leak]") {
  struct expected {
    const char* what;
    tel::leak_report report;
    tel::leak_reason reason;
    const char* sentence;
  };
  tel::leak_options strict;
  strict.min_rate_mib_per_min = 5.0;
  strict.min_leak_growth_mib = 4096.0;
  const std::vector<expected> all{
      {"empty", tel::analyse_series({}), tel::leak_reason::no_readings,
       "No memory readings, so nothing can be said about leaks."},
      {"two readings", tel::analyse_series(std::vector<tel::series_point>{{0, 100}, {1, 101}}),
       tel::leak_reason::too_few_readings, "Only 2 usable reading(s) over 1 s, too few after the warm-up to judge growth."},
      {"flat", tel::analyse_series(minutes(360, [](int) { return 4000.0; })), tel::leak_reason::flat,
       "No leak: after the warm-up memory stayed near 4000 MiB (Theil-Sen slope 0.00 MiB/min over 359.0 min)."},
      {"sawtooth on a flat floor", tel::analyse_series(minutes(360, [](int k) { return sawtooth(k, 0.0); })),
       tel::leak_reason::sawtooth_same_floor,
       "No leak: memory rose and was released 8 times back to about the same floor (9000 to 9000 MiB, 0.00 MiB/min), "
       "as a cache that empties periodically does."},
      {"sawtooth on a rising floor", tel::analyse_series(minutes(360, [](int k) { return sawtooth(k, 2.0); })),
       tel::leak_reason::floor_kept_rising,
       "Leak: memory was released 8 times, but the floor it fell back to kept rising (9080 to 9640 MiB, 2.00 MiB/min) "
       "over 357.0 min."},
      {"leak", tel::analyse_series(minutes(360, [](int k) { return k < 2 ? 2.0 : 8000.0 + 40.0 * k; })),
       tel::leak_reason::kept_growing,
       "Leak: after the warm-up memory grew from 8080 to 22360 MiB at 40.0 MiB/min over 357.0 min and did not level off."},
      {"plateau", tel::analyse_series(minutes(360, [](int k) { return k < 2 ? 2.0 : 10000.0 + 20.0 * std::min(k, 30); })),
       tel::leak_reason::levelled_off,
       "Not a leak: after the warm-up memory grew by 560 MiB (20.0 MiB/min) and then levelled off at 10600 MiB from "
       "30.0 min on."},
      {"restarts", tel::analyse_series(minutes(360, [](int k) { return k % 120 < 2 ? 2.0 : 9000.0; })),
       tel::leak_reason::restarts_only,
       "Not a leak: the process restarted 2 times (memory fell to idle at 120.0 min, 4.00 h) and memory did not keep "
       "growing within any run."},
      {"a leak between a restart and the job's end", tel::analyse_series(minutes(257, [](int k) {
         const int j = (k - 5) % 126;
         return k < 5 || j >= 123 ? 10240.0 : j < 3 ? 10240.0 + 2000.0 * (j + 1) : 16240.0 + 40.0 * (j - 3);
       })),
       tel::leak_reason::kept_growing,
       "Leak: after the warm-up memory grew from 16240 to 21000 MiB at 40.0 MiB/min over 120.0 min and did not level "
       "off, and the process restarted 1 time (memory fell to idle at 128.0 min); the job ended at 4.23 h and freed its "
       "memory."},
      {"slow growth below stricter thresholds",
       tel::analyse_series(
           [] {
             std::vector<tel::series_point> p;
             for (int k = 0; k < 865; ++k) p.push_back({300.0 * k, 5000.0 + 3.0 * k});
             return p;
           }(),
           strict),
       tel::leak_reason::grew_below_thresholds,
       "No leak: after the warm-up memory grew only 0.60 MiB/min over 4320.0 min (from 5000 to 7592 MiB), below the "
       "leak thresholds (5.00 MiB/min, or 4096 MiB in all)."},
  };
  for (const auto& e : all) {
    INFO(e.what);
    CHECK(e.report.reason == e.reason);
    CHECK(leak_explanation(e.report) == e.sentence);
    // A GPU of a log with memory readings says what its series says.
    if (e.report.points > 0) {
      tel::gpu_leak_report g;
      g.report = e.report;
      g.samples = e.report.points;
      g.memory_readings = e.report.points;
      CHECK(leak_explanation(g) == leak_explanation(e.report));
    }
  }
}

TEST_CASE("leak sentences: a GPU or a process of a log without memory readings", "[leak]") {
  tel::gpu_leak_report g;
  g.samples = 360;
  CHECK(leak_explanation(g) == "No memory.used readings in the 360 samples of this GPU, so nothing can be said about leaks.");
  g.pid = 77;
  CHECK(leak_explanation(g) ==
        "No used_gpu_memory readings in the 360 rows of this process, so nothing can be said about leaks.");
  // The same from analyse_log: rows of a GPU, none of them with memory.used.
  tel::gpu_log log;
  for (int m = 0; m < 90; ++m) {
    tel::device_sample s;
    s.time = tel::clock::time_point{} + std::chrono::minutes{m};
    s.uuid = "GPU-cccc";
    s.missing.push_back("memory.used: [N/A]");
    log.samples.push_back(s);
  }
  const auto reports = tel::analyse_log(log);
  REQUIRE(reports.size() == 1);
  CHECK(leak_explanation(reports[0]) == "No memory.used readings in the 90 samples of this GPU, so nothing can be said "
                                        "about leaks.");
}
