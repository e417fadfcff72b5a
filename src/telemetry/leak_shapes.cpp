// The shapes a memory series takes, for the leak analysis: restarts and the job's end, warm-ups,
// plateaus, a sawtooth's releases and floor.
#include "leak_detail.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>

namespace mgm::telemetry::leak_detail {

/// Drops to near the idle level, and whether memory came back after each.
drop_scan find_drops(std::span<const series_point> p, const leak_options& o) {
  drop_scan out;
  if (p.size() < min_window_readings) return out;
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
  if (n < min_warmup_readings) return s;
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
    const std::size_t ahead = std::min<std::size_t>(ramp_lookahead, n - 1 - k);
    return r[k + 1] - r[k] > ramp_step || (r[k + ahead] - r[k]) / static_cast<double>(ahead) > ramp_step;
  };
  while (i + 1 < n && rising(i)) ++i;
  return s + i;
}


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
  if (n < 2 * plateau_edge_readings) return std::nullopt;
  const double span_s = p[e - 1].seconds - p[w].seconds;
  // About 60 candidates, each with a Theil–Sen of at most 20 000 pairs: O(1.2 M) per window.
  const std::size_t step = std::max<std::size_t>(1, n / plateau_candidates);
  const std::size_t pairs = std::min<std::size_t>(o.max_pairs, screening_pairs);
  const double z = o.significance_z;
  for (std::size_t at = w + plateau_edge_readings; at + plateau_edge_readings <= e; at += step) {
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
    const double sd_grew = sd_of_median * noise * std::sqrt(1.0 / static_cast<double>(mp) + 1.0 / static_cast<double>(after));
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
      while (first > w + plateau_edge_readings && std::abs(p[first - 1].mib - p[at].mib) <= o.min_growth_mib) --first;
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
  const double min_fall = std::max(release_min_growth_factor * o.min_growth_mib, release_fall_sd * noise);
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
  const double rate = floors.size() >= floor_fit_min ? fs.mib_per_min
                      : span_s > 0.0     ? (floors.back().mib - floors.front().mib) / span_s * 60.0
                                         : 0.0;
  const double growth = rate * span_s / 60.0;
  // The lowest of a tooth's noisy readings is itself noisy by about one sd; k floors average it.
  const double sd = floor_sd_factor * r.noise_mib / std::sqrt(floor_halves * static_cast<double>(floors.size()));
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

}  // namespace mgm::telemetry::leak_detail
