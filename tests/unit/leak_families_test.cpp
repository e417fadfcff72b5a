// Leak analysis on generated families with known answers: slope x noise x plateau x restarts x
// interval, each verdict checked against what the noise allows.
#include <mgm/telemetry/leak_analysis.hpp>

#include "leak_series.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

using mgm::telemetry::analyse_series;
using mgm::telemetry::leak_verdict;
using mgm_test::half_gb_per_min_in_mib;
using mgm_test::rng;

namespace {

enum class family { flat, leak, plateau, restart, staircase, small_leak, restart_leak };

const char* family_name(family f) {
  switch (f) {
    case family::flat: return "flat after warm-up";
    case family::leak: return "linear leak";
    case family::plateau: return "growth then plateau";
    case family::restart: return "restarts, no leak";
    case family::staircase: return "staircase leak (20 MiB steps)";
    case family::small_leak: return "small leak (5 MiB/min)";
    case family::restart_leak: return "restarts and a leak";
  }
  return "?";
}

struct generated_case {
  family kind{family::flat};
  double interval_s{1};
  double duration_min{10};
  double level_mib{4096};     ///< working level after the warm-up
  double noise_mib{0};        ///< σ of white noise on the used memory
  double slope_mib_per_min{0};
  double plateau_at{1.0};     ///< growth stops at this share of the duration
  int restarts{0};
  std::uint64_t seed{0};
};

/// Idle at 2 MiB for a few samples, a warm-up ramp to the level (3 % of the time, at least two
/// samples), then growth at the slope (until `plateau_at`), with noise; each restart drops to idle
/// for three samples and warms up again (growth starts over).
std::vector<mgm::telemetry::series_point> make_series(const generated_case& c) {
  rng r{c.seed};
  std::vector<mgm::telemetry::series_point> out;
  const double end = c.duration_min * 60.0;
  const double idle = 2.0;
  const double warm = std::max(2.0 * c.interval_s, 0.03 * end);
  const double lead = 3.0 * c.interval_s;
  std::vector<double> restart_at;
  for (int k = 1; k <= c.restarts; ++k) restart_at.push_back(end * k / (c.restarts + 1));
  double run_start = lead;  // when the current run's warm-up starts
  std::size_t next_restart = 0;
  double down_until = -1;
  for (double t = 0; t <= end + 1e-9; t += c.interval_s) {
    if (next_restart < restart_at.size() && t >= restart_at[next_restart]) {
      down_until = t + 3.0 * c.interval_s;
      run_start = down_until;
      ++next_restart;
    }
    double v = idle;
    if (t >= run_start && t >= down_until) {
      const double since = t - run_start;
      if (since < warm) {
        v = idle + (c.level_mib - idle) * (since + c.interval_s) / (warm + c.interval_s);
      } else {
        const double grow_s = std::min(t, c.plateau_at * end) - (run_start + warm);
        double growth = c.slope_mib_per_min * std::max(0.0, grow_s) / 60.0;
        if (c.kind == family::staircase) growth = 20.0 * std::floor(growth / 20.0);
        v = c.level_mib + growth;
      }
      v += c.noise_mib * r.normal();
    }
    out.push_back({t, std::max(v, 0.0)});
  }
  return out;
}

struct interval_duration {
  double interval_s;
  double duration_min;
};
constexpr interval_duration grid[] = {{1, 10}, {1, 30}, {5, 30}, {5, 60}, {15, 10}, {15, 60},
                                      {30, 60}, {30, 120}, {60, 30}, {60, 120}};
constexpr double noise_shares[] = {0.0, 0.005, 0.02, 0.04};  // of the level

std::vector<generated_case> generated_cases() {
  std::vector<generated_case> all;
  std::uint64_t seed = 20240601;
  const auto add = [&](generated_case c) {
    c.seed = ++seed;
    all.push_back(c);
  };
  int k = 0;
  for (const auto g : grid) {
    for (const double share : noise_shares) {
      generated_case c;
      c.interval_s = g.interval_s;
      c.duration_min = g.duration_min;
      c.level_mib = (k++ % 2 == 0) ? 4096.0 : 12000.0;
      c.noise_mib = share * c.level_mib;
      c.kind = family::flat;
      add(c);
      for (const double s : {20.0, 100.0, 476.837158203125, 2048.0, 4096.0}) {
        c.kind = family::leak;
        c.slope_mib_per_min = s;
        add(c);
      }
      for (const double at : {0.3, 0.5}) {
        c.kind = family::plateau;
        c.slope_mib_per_min = 0.1 * c.level_mib / (at * c.duration_min);  // +10 % of the level
        c.plateau_at = at;
        add(c);
      }
      c.plateau_at = 1.0;
      c.slope_mib_per_min = 0;
      for (const int n : {1, 2}) {
        c.kind = family::restart;
        c.restarts = n;
        add(c);
      }
      c.kind = family::restart_leak;
      c.restarts = 1;
      c.slope_mib_per_min = 476.837158203125;
      add(c);
      c.restarts = 0;
    }
    generated_case s;
    s.interval_s = g.interval_s;
    s.duration_min = g.duration_min;
    s.level_mib = 8000;
    s.kind = family::staircase;
    for (const double rate : {5.0, 20.0}) {
      s.slope_mib_per_min = rate;
      add(s);
    }
    if (g.duration_min >= 30) {
      generated_case m = s;
      m.kind = family::small_leak;
      m.slope_mib_per_min = 5.0;
      for (const double sigma : {0.0, 10.0, 50.0}) {
        m.noise_mib = sigma;
        add(m);
      }
    }
  }
  return all;
}

/// The standard error of a least-squares slope (MiB/min) for white noise on n evenly spaced points.
double slope_standard_error(const generated_case& c, double minutes, double points) {
  return c.noise_mib * std::sqrt(12.0) / (minutes * std::sqrt(points));
}

}  // namespace

TEST_CASE("generated families: slope x noise x plateau x restarts x interval", "[leak]") {
  const auto cases = generated_cases();
  REQUIRE(cases.size() >= 200);
  struct tally {
    int total{0};
    int right{0};
    std::map<std::string, int> verdicts;
  };
  std::map<family, tally> table;
  for (const auto& c : cases) {
    const auto pts = make_series(c);
    const auto r = analyse_series(pts);
    const double n = static_cast<double>(pts.size());
    const double minutes = c.duration_min;
    INFO("family " << family_name(c.kind) << ", interval " << c.interval_s << " s, " << c.duration_min << " min, level "
                   << c.level_mib << " MiB, noise " << c.noise_mib << " MiB, slope " << c.slope_mib_per_min
                   << " MiB/min, plateau at " << c.plateau_at << ", restarts " << c.restarts << ", seed " << c.seed
                   << " -> " << to_string(r.verdict) << " " << r.rate_mib_per_min << " MiB/min, " << to_string(r.reason));
    auto& t = table[c.kind];
    ++t.total;
    ++t.verdicts[to_string(r.verdict)];
    CHECK(r.confidence >= 0.0);
    CHECK(r.confidence <= 1.0);
    bool right = false;
    switch (c.kind) {
      case family::flat:
        right = r.verdict == leak_verdict::no_growth;
        CHECK(r.verdict != leak_verdict::leak);  // never
        break;
      case family::leak: {
        right = r.verdict == leak_verdict::leak &&
                std::abs(r.rate_mib_per_min - c.slope_mib_per_min) <= 0.1 * c.slope_mib_per_min;
        // What can be guaranteed (white noise; se: the standard error of a least-squares slope
        // over the load window): found when the slope is 10 se, with its rate within 10 % at 30 se.
        const double se = slope_standard_error(c, 0.9 * minutes, 0.9 * n);
        if (c.slope_mib_per_min >= 10.0 * se) CHECK(r.verdict == leak_verdict::leak);
        if (c.slope_mib_per_min >= 30.0 * se) CHECK(right);
        if (c.slope_mib_per_min == half_gb_per_min_in_mib) CHECK(right);  // 0.5 GB/min: always
        break;
      }
      case family::plateau:
        right = r.verdict == leak_verdict::growth_then_plateau;
        // Never a leak while the growth before the plateau (10 % of the level) is 5 σ or more.
        if (c.noise_mib <= 0.02 * c.level_mib) CHECK(r.verdict != leak_verdict::leak);
        if (c.noise_mib == 0.0) CHECK(right);
        break;
      case family::restart:
        right = r.verdict == leak_verdict::restarted &&
                r.restart_seconds.size() == static_cast<std::size_t>(c.restarts);
        CHECK(right);
        break;
      case family::restart_leak:
        right = r.verdict == leak_verdict::leak && r.restart_seconds.size() == static_cast<std::size_t>(c.restarts) &&
                std::abs(r.rate_mib_per_min - c.slope_mib_per_min) <= 0.25 * c.slope_mib_per_min;
        CHECK(r.verdict == leak_verdict::leak);
        CHECK(r.restart_seconds.size() == static_cast<std::size_t>(c.restarts));
        break;
      case family::staircase:
        right = r.verdict == leak_verdict::leak &&
                std::abs(r.rate_mib_per_min - c.slope_mib_per_min) <= 0.25 * c.slope_mib_per_min;
        CHECK(right);
        break;
      case family::small_leak:
        // Leaks of 5 MiB/min over 30 min or more with σ <= 50 MiB are found.
        right = r.verdict == leak_verdict::leak;
        CHECK(right);
        CHECK(r.rate_mib_per_min == Approx(5.0).epsilon(0.5));
        break;
    }
    if (right) ++t.right;
  }
  std::printf("Leak analysis, generated families (%zu cases):\n", cases.size());
  std::printf("  %-32s %5s %5s  verdicts\n", "family", "right", "cases");
  for (const auto& [kind, t] : table) {
    std::string verdicts;
    for (const auto& [v, k] : t.verdicts) verdicts += " " + v + "=" + std::to_string(k);
    std::printf("  %-32s %5d %5d %s\n", family_name(kind), t.right, t.total, verdicts.c_str());
  }
}
