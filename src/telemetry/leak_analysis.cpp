// Leak analysis of memory series: Theil–Sen slopes, warm-up, plateau and restart detection.
// The design and the thresholds are described in include/mgm/telemetry/leak_analysis.hpp.
#include <mgm/telemetry/leak_analysis.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>

namespace mgm::telemetry {

namespace {

constexpr double mib = 1024.0 * 1024.0;
constexpr double sd_of_median_difference = 1.7725;  // sqrt(2) * sqrt(pi/2): two medians of m normal points

// The thresholds that are not options, each with its reason. (The options, in leak_options, are
// what a user may need to change for a job; these follow from statistics or from the shapes.)
constexpr double mad_to_sd = 1.4826;          // MAD of normal data times this is its sd
constexpr double sen_z95 = 1.96;              // Sen's 95 % interval
constexpr std::size_t fall_readings = 3;      // a fall (restart or release) may take this many readings
constexpr double restart_fall_sd = 6.0;       // a 6-sd fall of white noise: about once in 10^9 readings
constexpr double comes_back_share = 0.25;     // after a fall, a rise of a quarter of it: memory came back
constexpr double warmup_rise_sd = 4.0;        // a warm-up rises more than noise could
constexpr double warmup_reach = 0.9;          // the warm-up ends 90 % of the way to the working level
constexpr double ramp_step_share = 0.1;       // the ramp goes on while steps add a tenth of its steepest
constexpr std::size_t level_share = 10;       // a level: the median of a tenth of the window ...
constexpr std::size_t level_max_points = 1000;  // ... of at most this many readings
constexpr double confidence_points = 5.0;     // n readings weigh n / (n + 5): few readings, less sure
constexpr std::size_t plateau_candidates = 60;  // plateau starts tried per window (cost: 60 Theil-Sen fits)
constexpr std::size_t screening_pairs = 20'000; // pairs per candidate's fit
constexpr double warmup_tail_share = 0.05;    // growth in the window's first 5 %: the warm-up's tail
constexpr double plateau_rate_share = 0.25;   // a plateau grows at most a quarter as fast as before it
constexpr double release_fall_sd = 8.0;       // a release falls further than noise ever does (8 sd)
constexpr double release_give_back = 0.5;     // a release gives back half of what was gained
constexpr double floor_sd_factor = 2.0;       // the lowest of a tooth's readings is noisy by about an sd or two
constexpr double confidence_below_threshold = 0.5;  // grew, but below both leak thresholds
constexpr double confidence_flat_floor = 0.95;      // a sawtooth whose floor did not move
constexpr double confidence_staircase = 0.6;        // a leak resting on a few steps, not a steady climb
constexpr double confidence_least_flat = 0.05;      // a flat verdict is never less sure than this

/// splitmix64: a fixed, portable generator for the Theil–Sen pair sample.
struct splitmix64 {
  std::uint64_t state;
  std::uint64_t next() noexcept {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
};

/// The k-th smallest of `v` (0-based), reordering `v`.
double kth(std::vector<double>& v, std::size_t k) {
  const auto it = v.begin() + static_cast<std::ptrdiff_t>(k);
  std::nth_element(v.begin(), it, v.end());
  return *it;
}

/// The median of `v` (the mean of the two middle values for an even count), reordering `v`.
double median_of(std::vector<double>& v) {
  if (v.empty()) return 0.0;
  const std::size_t mid = v.size() / 2;
  const double hi = kth(v, mid);
  if (v.size() % 2 == 1) return hi;
  const double lo = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lo + hi) / 2.0;
}

struct level {
  double mib{0};
  double seconds{0};  ///< the median time of the points it is taken over
};

/// The median of the values and of the times of points [first, last).
level level_of(std::span<const series_point> p, std::size_t first, std::size_t last) {
  std::vector<double> v;
  std::vector<double> t;
  v.reserve(last - first);
  t.reserve(last - first);
  for (std::size_t i = first; i < last; ++i) {
    v.push_back(p[i].mib);
    t.push_back(p[i].seconds);
  }
  return {median_of(v), median_of(t)};
}

/// σ of white noise from the first differences: 1.4826 · MAD / √2 (robust to steps and trends).
double noise_of(std::span<const series_point> p) {
  if (p.size() < 3) return 0.0;
  std::vector<double> d;
  d.reserve(p.size() - 1);
  for (std::size_t i = 1; i < p.size(); ++i) d.push_back(p[i].mib - p[i - 1].mib);
  const double med = median_of(d);
  for (double& x : d) x = std::abs(x - med);
  return mad_to_sd * median_of(d) / std::sqrt(2.0);
}

/// Readings' points per level: one without noise (a staircase's last step counts), else a tenth.
std::size_t level_points(std::size_t n, double noise) {
  if (noise <= 0.0) return 1;
  return std::clamp<std::size_t>(n / level_share, std::min<std::size_t>(3, std::max<std::size_t>(1, n / 2)), level_max_points);
}

/// Probability-like score of a z statistic: erf(z / √2), 1 for an infinite z.
double significance(double z) {
  if (!(z > 0.0)) return 0.0;
  if (std::isinf(z)) return 1.0;
  return std::erf(z / std::sqrt(2.0));
}

/// Fewer points, less confidence: n / (n + 5).
double size_factor(std::size_t n) { return static_cast<double>(n) / (static_cast<double>(n) + confidence_points); }

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

struct drop_scan {
  std::vector<std::size_t> restarts;     // index of the first low point of each restart
  std::optional<std::size_t> job_end;   // a drop that never came back
};

/// Drops to near the idle level, and whether memory came back after each.
drop_scan find_drops(std::span<const series_point> p, const leak_options& o) {
  drop_scan out;
  if (p.size() < 3) return out;
  double idle = p[0].mib;
  for (const auto& x : p) idle = std::min(idle, x.mib);
  const double noise = noise_of(p);
  const double min_drop = std::max(o.min_restart_drop_mib, restart_fall_sd * noise);
  bool high = true;
  std::size_t high_start = 0;
  std::size_t drop_at = 0;
  double low = 0;
  double ref_at_drop = 0;
  for (std::size_t i = 1; i < p.size(); ++i) {
    const double v = p[i].mib;
    if (high) {
      double ref = -std::numeric_limits<double>::infinity();
      for (std::size_t j = std::max(high_start, i >= fall_readings ? i - fall_readings : 0); j < i; ++j) ref = std::max(ref, p[j].mib);
      if (v <= idle + (1.0 - o.restart_drop_fraction) * (ref - idle) && ref - v >= min_drop) {
        high = false;
        drop_at = i;
        low = v;
        ref_at_drop = ref;
      }
    } else {
      low = std::min(low, v);
      if (v - low >= std::max(min_drop, comes_back_share * (ref_at_drop - low))) {
        high = true;
        high_start = i;
        out.restarts.push_back(drop_at);
      }
    }
  }
  if (!high) out.job_end = drop_at;
  return out;
}

/// The first index of [s, e) whose time is at least `seconds`.
std::size_t index_at(std::span<const series_point> p, std::size_t s, std::size_t e, double seconds) {
  std::size_t i = s;
  while (i < e && p[i].seconds < seconds) ++i;
  return i;
}

/// The end of the warm-up of run [s, e): remove the second half's slope, then the first point at
/// 90 % of the way from the run's first value to the median of the second half.
std::size_t warmup_end(std::span<const series_point> p, std::size_t s, std::size_t e, const leak_options& o) {
  const std::size_t n = e - s;
  if (n < 4) return s;
  const std::size_t half = s + n / 2;
  const slope_estimate c = theil_sen(p.subspan(half, e - half), o.max_pairs);
  const double per_s = c.mib_per_min / 60.0;
  const double t0 = p[s].seconds;
  std::vector<double> r;
  r.reserve(n);
  for (std::size_t i = s; i < e; ++i) r.push_back(p[i].mib - per_s * (p[i].seconds - t0));
  std::vector<double> second(r.begin() + static_cast<std::ptrdiff_t>(half - s), r.end());
  const double working = median_of(second);
  const double start = r[0];
  const double noise = noise_of(p.subspan(s, n));
  if (working - start <= std::max(o.min_growth_mib, warmup_rise_sd * noise)) return s;
  const double threshold = start + warmup_reach * (working - start);
  std::size_t i = 0;
  while (i < n && r[i] < threshold) ++i;
  if (i == n) return s;
  // The ramp goes on while each step still adds a sizeable share of it (its last samples may lie
  // above 90 %); slower growth after it belongs to the load window.
  double steepest = 0;
  for (std::size_t k = 1; k <= i; ++k) steepest = std::max(steepest, r[k] - r[k - 1]);
  const double ramp_step = std::max(o.min_growth_mib, ramp_step_share * steepest);
  // Over the next three samples, so that one noisy step does not end the ramp.
  const auto rising = [&](std::size_t k) {
    const std::size_t ahead = std::min<std::size_t>(3, n - 1 - k);
    return r[k + 1] - r[k] > ramp_step || (r[k + ahead] - r[k]) / static_cast<double>(ahead) > ramp_step;
  };
  while (i + 1 < n && rising(i)) ++i;
  return s + i;
}

struct plateau_found {
  std::size_t at{0};
  double rate_before_per_s{0};
  slope_estimate slope;
};

/// The longest flat suffix of the load window [w, e) after significant growth (see the header).
/// For a candidate start `at`: the suffix's median level must exceed the start level
/// significantly; its Theil–Sen slope must be at most a quarter of the rate before it (the growth
/// to the suffix's median over the time to the suffix's median time, which is the true rate for a
/// straight line), significantly so; and its net change (first to last level) must be small, so
/// that a late step of a staircase is not taken for a plateau.
std::optional<plateau_found> find_plateau(std::span<const series_point> p, std::size_t w, std::size_t e,
                                          std::optional<level> baseline, double noise, std::size_t m,
                                          const leak_options& o) {
  const std::size_t n = e - w;
  if (n < 6) return std::nullopt;
  const double span_s = p[e - 1].seconds - p[w].seconds;
  // About 60 candidates, each with a Theil–Sen of at most 20 000 pairs: O(1.2 M) per window.
  const std::size_t step = std::max<std::size_t>(1, n / plateau_candidates);
  const std::size_t pairs = std::min<std::size_t>(o.max_pairs, screening_pairs);
  const double z = o.significance_z;
  for (std::size_t at = w + 3; at + 3 <= e; at += step) {
    if (p[e - 1].seconds - p[at].seconds < o.plateau_min_fraction * span_s) break;
    // Growth over a few samples just after the load window's start is the end of the warm-up.
    if (p[at].seconds - p[w].seconds < warmup_tail_share * span_s) continue;
    const std::size_t before = at - w;
    const std::size_t after = e - at;
    const std::size_t mp = noise <= 0.0 ? 1 : std::max<std::size_t>(1, std::min({m, before / 2, after / 2}));
    const level a = baseline ? *baseline : level_of(p, w, w + mp);
    const level suffix = level_of(p, at, e);
    const double t_before = suffix.seconds - a.seconds;
    if (!(t_before > 0.0)) continue;
    const double sd_grew = 1.2533 * noise * std::sqrt(1.0 / static_cast<double>(mp) + 1.0 / static_cast<double>(after));
    const double grew = suffix.mib - a.mib;
    if (grew < std::max(o.min_growth_mib, z * sd_grew)) continue;
    const double net = level_of(p, e - mp, e).mib - level_of(p, at, at + mp).mib;
    if (std::abs(net) > std::max(o.min_growth_mib, z * sd_of_median_difference * noise / std::sqrt(static_cast<double>(mp)))) {
      continue;
    }
    const double r_before = grew / t_before;  // MiB/s, diluted: to the suffix's median time
    const slope_estimate pre = theil_sen(p.subspan(w, before), pairs);
    const slope_estimate s = theil_sen(p.subspan(at, after), pairs);
    const double r_after = s.mib_per_min / 60.0;
    const double fastest_before = std::max(r_before, pre.mib_per_min / 60.0);
    if (r_after > std::max(o.min_rate_mib_per_min / 60.0, plateau_rate_share * fastest_before)) continue;
    // Slower by z standard errors: measured by the net growth, or by the Theil–Sen slopes before
    // and after (stronger when the growth before is long and noisy).
    const double se = std::hypot(sd_grew / t_before, s.standard_error() / 60.0);
    const bool slower_net = r_before - r_after >= z * se;
    const bool slower_slope = pre.pairs > 0 && s.mib_per_min <= std::max(o.min_rate_mib_per_min, plateau_rate_share * pre.mib_per_min) &&
                              pre.mib_per_min - s.mib_per_min >= z * std::hypot(pre.standard_error(), s.standard_error());
    if (!slower_net && !slower_slope) continue;
    // Without noise the flat part may start before the candidate (when step > 1).
    std::size_t first = at;
    if (noise <= 0.0) {
      while (first > w + 3 && std::abs(p[first - 1].mib - p[at].mib) <= o.min_growth_mib) --first;
    }
    const double growth_s = p[first].seconds - a.seconds;
    return plateau_found{first, growth_s > 0.0 ? (p[first].mib - a.mib) / growth_s : r_before, s};
  }
  return std::nullopt;
}

/// The releases of load window [w, e): falls of at least `max(2 min_growth, 8 sd)` within three
/// readings that give back at least half of what was gained since the last floor. Each is the
/// index of the first reading after the fall.
std::vector<std::size_t> find_releases(std::span<const series_point> p, std::size_t w, std::size_t e, double noise,
                                       const leak_options& o) {
  std::vector<std::size_t> out;
  const double min_fall = std::max(2.0 * o.min_growth_mib, release_fall_sd * noise);
  double floor = p[w].mib;
  double peak = p[w].mib;
  std::size_t since = w;
  for (std::size_t i = w + 1; i < e; ++i) {
    const double v = p[i].mib;
    double ref = v;
    for (std::size_t j = std::max(since, i >= fall_readings ? i - fall_readings : 0); j < i; ++j) ref = std::max(ref, p[j].mib);
    const double fall = ref - v;
    if (fall >= min_fall && peak - floor >= min_fall && fall >= release_give_back * (peak - floor)) {
      out.push_back(i);
      floor = peak = v;
      since = i;
      continue;
    }
    floor = std::min(floor, v);
    peak = std::max(peak, v);
  }
  return out;
}

/// The share of a load window its releases must span for it to be judged as a sawtooth.
constexpr double sawtooth_min_span = 0.5;

/// The lowest reading of [first, last).
series_point lowest(std::span<const series_point> p, std::size_t first, std::size_t last) {
  series_point m = p[first];
  for (std::size_t i = first + 1; i < last; ++i) {
    if (p[i].mib < m.mib) m = p[i];
  }
  return m;
}

/// A sawtooth run judged by its floor: the lowest reading after each release. (Before the first
/// release the window may start mid-tooth, so that part has no floor.)
void judge_floor(std::span<const series_point> p, std::size_t e, const std::vector<std::size_t>& releases,
                 const leak_options& o, run_report& r) {
  std::vector<series_point> floors;
  for (std::size_t k = 0; k < releases.size(); ++k) {
    const std::size_t to = k + 1 < releases.size() ? releases[k + 1] : e;
    floors.push_back(lowest(p, releases[k], to));
  }
  r.releases = releases.size();
  r.first_floor_mib = floors.front().mib;
  r.last_floor_mib = floors.back().mib;
  const double span_s = floors.back().seconds - floors.front().seconds;
  // Theil-Sen over the floors (robust to one tooth released less deeply), else the net change.
  const slope_estimate fs = theil_sen(floors, o.max_pairs);
  const double rate = floors.size() >= 3 ? fs.mib_per_min
                      : span_s > 0.0     ? (floors.back().mib - floors.front().mib) / span_s * 60.0
                                         : 0.0;
  const double growth = rate * span_s / 60.0;
  // The lowest of a tooth's noisy readings is itself noisy by about one sd; k floors average it.
  const double sd = floor_sd_factor * r.noise_mib / std::sqrt(0.5 * static_cast<double>(floors.size()));
  const bool grew = growth >= std::max(o.min_growth_mib, o.significance_z * sd) && rate > 0.0;
  const double fewer = size_factor(floors.size());
  r.grew = grew;
  r.rate_mib_per_min = rate;
  if (grew && (rate >= o.min_rate_mib_per_min || growth >= o.min_leak_growth_mib)) {
    r.verdict = leak_verdict::leak;
    r.confidence = significance(sd > 0.0 ? growth / sd : std::numeric_limits<double>::infinity()) * fewer;
    return;
  }
  r.verdict = leak_verdict::no_growth;
  r.confidence = (grew ? confidence_below_threshold : confidence_flat_floor) * fewer;
}

/// One run [s, e): warm-up, load window, growth, plateau, verdict.
run_report analyse_run(std::span<const series_point> p, std::size_t s, std::size_t e, bool first_run,
                       const leak_options& o, const std::vector<std::size_t>* forced_releases = nullptr) {
  run_report r;
  r.start_seconds = p[s].seconds;
  r.end_seconds = p[e - 1].seconds;
  std::size_t w = s;
  std::optional<level> baseline;
  if (first_run && o.baseline) {
    const double b0 = p[0].seconds + o.baseline->start_seconds;
    const double b1 = p[0].seconds + o.baseline->end_seconds;
    const std::size_t i0 = index_at(p, s, e, b0);
    std::size_t i1 = i0;
    while (i1 < e && p[i1].seconds <= b1) ++i1;
    if (i1 > i0 && i0 < e) {
      w = i0;
      baseline = level_of(p, i0, i1);
      r.baseline_from_user = true;
    }
  }
  if (!baseline) w = warmup_end(p, s, e, o);
  r.load_start_seconds = p[w].seconds;
  const auto window = p.subspan(w, e - w);
  r.points = window.size();
  if (window.size() < 3 || !(window.back().seconds > window.front().seconds)) {
    r.verdict = leak_verdict::no_data;
    return r;
  }
  r.noise_mib = noise_of(window);
  r.slope = theil_sen(window, o.max_pairs);
  {
    std::vector<double> v;
    for (const auto& x : window) v.push_back(x.mib);
    r.median_mib = median_of(v);
  }
  const std::size_t m = level_points(window.size(), r.noise_mib);
  const level a = baseline ? *baseline : level_of(p, w, w + m);
  const level z = level_of(p, e - m, e);
  r.start_level_mib = a.mib;
  r.end_level_mib = z.mib;
  const double growth = z.mib - a.mib;
  const double t_growth = z.seconds - a.seconds;
  const double sd = sd_of_median_difference * r.noise_mib / std::sqrt(static_cast<double>(m));
  const double span_min = (window.back().seconds - window.front().seconds) / 60.0;
  const double se = r.slope.standard_error();
  const bool slope_significant = r.slope.mib_per_min > o.significance_z * se && r.slope.pairs > 0 &&
                                 r.slope.mib_per_min * span_min >= o.min_growth_mib;
  const bool net_significant = growth >= std::max(o.min_growth_mib, o.significance_z * sd) && t_growth > 0.0;
  const double fewer = size_factor(window.size());

  // A sawtooth: releases over most of the load window (two cache flushes at the end of a long
  // climb do not make one).
  std::vector<std::size_t> releases = forced_releases != nullptr ? *forced_releases : find_releases(p, w, e, r.noise_mib, o);
  std::erase_if(releases, [&](std::size_t i) { return i < w || i >= e; });
  if (releases.size() >= 2 &&
      p[releases.back()].seconds - p[releases.front()].seconds >= sawtooth_min_span * (p[e - 1].seconds - p[w].seconds)) {
    judge_floor(p, e, releases, o, r);
    return r;
  }
  if (!slope_significant && !net_significant) {
    r.verdict = leak_verdict::no_growth;
    r.rate_mib_per_min = r.slope.mib_per_min;
    const double z_flat = se > 0.0 ? (o.min_rate_mib_per_min - r.slope.mib_per_min) / se
                                   : std::numeric_limits<double>::infinity();
    r.confidence = std::max(confidence_least_flat, significance(z_flat)) * fewer;
    return r;
  }
  r.grew = true;
  if (const auto plateau = find_plateau(p, w, e, baseline, r.noise_mib, m, o)) {
    r.verdict = leak_verdict::growth_then_plateau;
    r.plateau_start_seconds = p[plateau->at].seconds;
    r.plateau_rate_mib_per_min = plateau->slope.mib_per_min;
    r.rate_mib_per_min = plateau->rate_before_per_s * 60.0;
    const double plateau_share = (r.end_seconds - p[plateau->at].seconds) / (span_min * 60.0);
    r.confidence = std::clamp(0.5 + plateau_share, 0.0, 1.0) * fewer;
    return r;
  }
  const double net_rate = t_growth > 0.0 ? growth / t_growth * 60.0 : 0.0;
  r.rate_mib_per_min = slope_significant ? r.slope.mib_per_min : net_rate;
  if (r.rate_mib_per_min < o.min_rate_mib_per_min && growth < o.min_leak_growth_mib) {
    r.verdict = leak_verdict::no_growth;
    r.confidence = confidence_below_threshold * fewer;
    return r;
  }
  r.verdict = leak_verdict::leak;
  if (slope_significant) {
    r.confidence = significance(se > 0.0 ? r.slope.mib_per_min / se : std::numeric_limits<double>::infinity()) * fewer;
  } else {
    // The growth rests on a few steps of a staircase: less sure than a steady climb.
    const double z_net = sd > 0.0 ? growth / sd : std::numeric_limits<double>::infinity();
    r.confidence = confidence_staircase * significance(z_net) * fewer;
  }
  return r;
}

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

}  // namespace

const char* to_string(leak_verdict v) noexcept {
  switch (v) {
    case leak_verdict::no_data: return "no_data";
    case leak_verdict::no_growth: return "no_growth";
    case leak_verdict::growth_then_plateau: return "growth_then_plateau";
    case leak_verdict::leak: return "leak";
    case leak_verdict::restarted: return "restarted";
  }
  return "unknown";
}

slope_estimate theil_sen(std::span<const series_point> points, std::size_t max_pairs) {
  slope_estimate out;
  const std::size_t n = points.size();
  out.points = n;
  if (n < 2) return out;
  const double all_pairs = static_cast<double>(n) * static_cast<double>(n - 1) / 2.0;
  std::vector<double> slopes;
  const auto add = [&](std::size_t i, std::size_t j) {
    const double dt = points[j].seconds - points[i].seconds;
    if (dt != 0.0) slopes.push_back((points[j].mib - points[i].mib) / dt);
  };
  if (all_pairs <= static_cast<double>(std::max<std::size_t>(max_pairs, 1))) {
    slopes.reserve(static_cast<std::size_t>(all_pairs));
    for (std::size_t i = 0; i + 1 < n; ++i) {
      for (std::size_t j = i + 1; j < n; ++j) add(i, j);
    }
  } else {
    out.subsampled = true;
    slopes.reserve(max_pairs);
    splitmix64 rng{0x6D676D2D6C65616BULL ^ static_cast<std::uint64_t>(n)};
    for (std::size_t k = 0; k < 2 * max_pairs && slopes.size() < max_pairs; ++k) {
      const auto i = static_cast<std::size_t>(rng.next() % n);
      const auto j = static_cast<std::size_t>(rng.next() % n);
      if (i != j) add(std::min(i, j), std::max(i, j));
    }
  }
  out.pairs = slopes.size();
  if (slopes.empty()) return out;
  out.mib_per_min = median_of(slopes) * 60.0;
  // Sen's interval: the order statistics at (N ± z·sqrt(Var S)) / 2, scaled to the pairs used.
  const double nd = static_cast<double>(n);
  const double c = sen_z95 * std::sqrt(nd * (nd - 1.0) * (2.0 * nd + 5.0) / 18.0);
  const double lo_share = std::clamp((all_pairs - c) / (2.0 * all_pairs), 0.0, 1.0);
  const double hi_share = std::clamp((all_pairs + c) / (2.0 * all_pairs), 0.0, 1.0);
  const std::size_t last = slopes.size() - 1;
  const auto lo_rank = std::min(last, static_cast<std::size_t>(std::floor(lo_share * static_cast<double>(last))));
  const auto hi_rank = std::min(last, static_cast<std::size_t>(std::ceil(hi_share * static_cast<double>(last))));
  out.lower_mib_per_min = std::min(kth(slopes, lo_rank) * 60.0, out.mib_per_min);
  out.upper_mib_per_min = std::max(kth(slopes, hi_rank) * 60.0, out.mib_per_min);
  return out;
}

leak_report analyse_series(std::span<const series_point> points, const leak_options& options) {
  std::vector<series_point> p;
  p.reserve(points.size());
  for (const auto& x : points) {
    if (std::isfinite(x.seconds) && std::isfinite(x.mib)) p.push_back(x);
  }
  std::stable_sort(p.begin(), p.end(), [](const series_point& a, const series_point& b) { return a.seconds < b.seconds; });

  leak_report rep;
  rep.points = p.size();
  if (!p.empty()) {
    rep.first_seconds = p.front().seconds;
    rep.last_seconds = p.back().seconds;
  }
  if (p.size() < 3 || !(rep.last_seconds > rep.first_seconds)) {
    rep.explanation = explain(rep, options);
    return rep;
  }
  const std::span<const series_point> all{p};
  const drop_scan drops = find_drops(all, options);
  for (const std::size_t i : drops.restarts) rep.restart_seconds.push_back(p[i].seconds);
  if (drops.job_end) rep.job_end_seconds = p[*drops.job_end].seconds;

  std::vector<std::size_t> bounds{0};
  for (const std::size_t i : drops.restarts) bounds.push_back(i);
  bounds.push_back(drops.job_end ? *drops.job_end : p.size());
  for (std::size_t k = 0; k + 1 < bounds.size(); ++k) {
    if (bounds[k + 1] > bounds[k]) rep.runs.push_back(analyse_run(all, bounds[k], bounds[k + 1], k == 0, options));
  }
  // Falls to the lowest level the log holds, followed by climbs that have no warm-up: when
  // the log starts inside a job, its lowest level is the job's own floor, not idle. Those falls are
  // a sawtooth's releases (a cache that empties), judged by its floor as one run. A restart warms
  // up (the model loads, the caches fill) before it climbs.
  if (drops.restarts.size() >= 2 && rep.runs.size() == drops.restarts.size() + 1) {
    // Most of them, as noise on a short tooth can look like a warm-up.
    std::size_t warmed = 0;
    for (std::size_t k = 1; k < rep.runs.size(); ++k) warmed += rep.runs[k].load_start_seconds > rep.runs[k].start_seconds ? 1 : 0;
    if (2 * warmed < rep.runs.size() - 1) {
      const std::size_t end = drops.job_end ? *drops.job_end : p.size();
      rep.runs = {analyse_run(all, 0, end, true, options, &drops.restarts)};
      rep.restart_seconds.clear();
    }
  }

  // A leaking run decides (the longest load window of them); else restarts; else the one run.
  std::optional<std::size_t> leaking;
  std::optional<std::size_t> longest;
  const auto load_span = [&](std::size_t k) { return rep.runs[k].end_seconds - rep.runs[k].load_start_seconds; };
  for (std::size_t k = 0; k < rep.runs.size(); ++k) {
    if (rep.runs[k].verdict == leak_verdict::no_data) continue;
    if (!longest || load_span(k) > load_span(*longest)) longest = k;
    if (rep.runs[k].verdict == leak_verdict::leak && (!leaking || load_span(k) > load_span(*leaking))) leaking = k;
  }
  // A climb cut off by a restart does not outweigh a longer run after it that did not leak (a
  // leak in the last runs, as a new job that runs out of memory, still decides).
  if (leaking) {
    for (std::size_t k = *leaking + 1; k < rep.runs.size(); ++k) {
      const auto v = rep.runs[k].verdict;
      if (v != leak_verdict::leak && v != leak_verdict::no_data && load_span(k) > load_span(*leaking)) {
        leaking.reset();
        break;
      }
    }
  }
  if (leaking) {
    rep.deciding_run = *leaking;
    rep.verdict = leak_verdict::leak;
  } else if (!rep.restart_seconds.empty()) {
    rep.deciding_run = rep.runs.size() - 1;
    rep.verdict = leak_verdict::restarted;
  } else if (longest) {
    rep.deciding_run = *longest;
    rep.verdict = rep.runs[*longest].verdict;
  } else {
    rep.verdict = leak_verdict::no_data;
    rep.runs.clear();
    rep.explanation = explain(rep, options);
    return rep;
  }
  const run_report& r = rep.runs[rep.deciding_run];
  rep.rate_mib_per_min = rep.verdict == leak_verdict::restarted ? r.slope.mib_per_min : r.rate_mib_per_min;
  if (rep.verdict == leak_verdict::restarted) {
    // Drops of most of the memory are unmistakable; what is less sure is that no run leaks.
    double least = 1.0;
    for (const auto& run : rep.runs) {
      if (run.verdict != leak_verdict::no_data) least = std::min(least, run.confidence);
    }
    rep.confidence = std::clamp(0.5 + 0.5 * least, 0.0, 1.0) * size_factor(p.size());
  } else {
    rep.confidence = r.confidence;
  }
  rep.confidence = std::clamp(rep.confidence, 0.01, 1.0);
  rep.explanation = explain(rep, options);
  return rep;
}

std::vector<gpu_leak_report> analyse_log(const gpu_log& log, const leak_options& options) {
  std::vector<gpu_leak_report> out;
  if (log.samples.empty() && log.process_rows.empty()) return out;
  clock::time_point origin = clock::time_point::max();
  for (const auto& s : log.samples) origin = std::min(origin, s.time);
  for (const auto& r : log.process_rows) origin = std::min(origin, r.time);
  const auto seconds = [&](clock::time_point t) { return std::chrono::duration<double>(t - origin).count(); };

  // GPUs, in order of first appearance.
  std::unordered_map<std::string, std::size_t> gpu_at;
  std::vector<std::vector<series_point>> gpu_points;
  for (const auto& s : log.samples) {
    const std::string key = s.key();
    auto [it, fresh] = gpu_at.try_emplace(key, out.size());
    if (fresh) {
      gpu_leak_report g;
      g.gpu_key = key;
      g.index = s.index;
      g.name = s.name;
      g.origin = origin;
      out.push_back(std::move(g));
      gpu_points.emplace_back();
    }
    ++out[it->second].samples;
    if (s.memory_used) {
      gpu_points[it->second].push_back({seconds(s.time), static_cast<double>(*s.memory_used) / mib});
    }
  }
  for (std::size_t g = 0; g < out.size(); ++g) {
    out[g].report = analyse_series(gpu_points[g], options);
    if (gpu_points[g].empty()) {
      out[g].report.explanation = "No memory.used readings in the " + std::to_string(out[g].samples) +
                                  " samples of this GPU, so nothing can be said about leaks.";
    }
  }
  const std::size_t gpus = out.size();

  // Processes: GPU UUID and pid, in order of first appearance.
  struct proc {
    std::string gpu;
    std::uint32_t pid{0};
    std::string name;
    std::size_t rows{0};
    std::vector<series_point> points;
  };
  std::map<std::pair<std::string, std::uint32_t>, std::size_t> proc_at;
  std::vector<proc> procs;
  const auto add = [&](const std::string& gpu, clock::time_point t, const process_sample& ps) {
    auto [it, fresh] = proc_at.try_emplace({gpu, ps.pid}, procs.size());
    if (fresh) procs.push_back(proc{gpu, ps.pid, ps.name, 0, {}});
    proc& pr = procs[it->second];
    ++pr.rows;
    if (pr.name.empty()) pr.name = ps.name;
    if (ps.used_bytes) pr.points.push_back({seconds(t), static_cast<double>(*ps.used_bytes) / mib});
  };
  if (!log.process_rows.empty()) {
    for (const auto& r : log.process_rows) add(r.gpu_uuid, r.time, r.process);
  } else {
    for (const auto& s : log.samples) {
      for (const auto& ps : s.processes) add(s.key(), s.time, ps);
    }
  }
  for (auto& pr : procs) {
    gpu_leak_report g;
    g.gpu_key = pr.gpu;
    if (const auto it = gpu_at.find(pr.gpu); it != gpu_at.end() && it->second < gpus) {
      g.index = out[it->second].index;
      g.name = out[it->second].name;
    } else {
      g.gpu_found = false;
    }
    g.pid = pr.pid;
    g.process_name = pr.name;
    g.origin = origin;
    g.samples = pr.rows;
    g.report = analyse_series(pr.points, options);
    if (pr.points.empty()) {
      g.report.explanation = "No used_gpu_memory readings in the " + std::to_string(pr.rows) +
                             " rows of this process, so nothing can be said about leaks.";
    }
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace mgm::telemetry
