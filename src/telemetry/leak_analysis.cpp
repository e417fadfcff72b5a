// Leak analysis of memory series: runs judged by their warm-up, growth, plateau or floor; series
// by their runs and restarts; logs by GPU and process. The design and the thresholds are
// described in include/mgm/telemetry/leak_analysis.hpp; the parts are in leak_detail.hpp.
#include "leak_detail.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>

namespace mgm::telemetry {

using namespace leak_detail;

namespace {

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
  if (window.size() < min_window_readings || !(window.back().seconds > window.front().seconds)) {
    r.verdict = leak_verdict::no_data;
    return r;
  }
  r.noise_mib = noise_of(window);
  r.slope = theil_sen(window, o.max_pairs);
  // A climb in a few bursts is worth a few readings, not hundreds: widen the interval for that.
  if (const double k = independent_readings(window, r.slope); k < static_cast<double>(window.size())) {
    r.slope = theil_sen(window, o.max_pairs, k);
  }
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
  if (releases.size() >= sawtooth_min_releases &&
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
    r.confidence = std::clamp(confidence_plateau_found + plateau_share, 0.0, 1.0) * fewer;
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

/// The shape that decided `rep` (its verdict and deciding run set).
leak_reason reason_of(const leak_report& rep) {
  if (rep.verdict == leak_verdict::no_data) return rep.points == 0 ? leak_reason::no_readings : leak_reason::too_few_readings;
  const run_report& r = rep.runs[rep.deciding_run];
  if (r.releases >= sawtooth_min_releases && rep.verdict == leak_verdict::leak) return leak_reason::floor_kept_rising;
  if (r.releases >= sawtooth_min_releases && rep.verdict == leak_verdict::no_growth) return leak_reason::sawtooth_same_floor;
  switch (rep.verdict) {
    case leak_verdict::leak: return leak_reason::kept_growing;
    case leak_verdict::growth_then_plateau: return leak_reason::levelled_off;
    case leak_verdict::restarted: return leak_reason::restarts_only;
    case leak_verdict::no_growth: return r.grew ? leak_reason::grew_below_thresholds : leak_reason::flat;
    case leak_verdict::no_data: break;
  }
  return leak_reason::too_few_readings;
}

}  // namespace

const char* to_string(leak_reason r) noexcept {
  switch (r) {
    case leak_reason::no_readings: return "no_readings";
    case leak_reason::too_few_readings: return "too_few_readings";
    case leak_reason::kept_growing: return "kept_growing";
    case leak_reason::floor_kept_rising: return "floor_kept_rising";
    case leak_reason::levelled_off: return "levelled_off";
    case leak_reason::restarts_only: return "restarts_only";
    case leak_reason::flat: return "flat";
    case leak_reason::grew_below_thresholds: return "grew_below_thresholds";
    case leak_reason::sawtooth_same_floor: return "sawtooth_same_floor";
  }
  return "unknown";
}

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

leak_report analyse_series(std::span<const series_point> points, const leak_options& options) {
  std::vector<series_point> p;
  p.reserve(points.size());
  for (const auto& x : points) {
    if (std::isfinite(x.seconds) && std::isfinite(x.mib)) p.push_back(x);
  }
  std::stable_sort(p.begin(), p.end(), [](const series_point& a, const series_point& b) { return a.seconds < b.seconds; });

  leak_report rep;
  rep.min_rate_mib_per_min = options.min_rate_mib_per_min;
  rep.min_leak_growth_mib = options.min_leak_growth_mib;
  rep.points = p.size();
  if (!p.empty()) {
    rep.first_seconds = p.front().seconds;
    rep.last_seconds = p.back().seconds;
  }
  if (p.size() < min_window_readings || !(rep.last_seconds > rep.first_seconds)) {
    rep.reason = reason_of(rep);
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
  if (drops.restarts.size() >= sawtooth_min_releases && rep.runs.size() == drops.restarts.size() + 1) {
    // Most of them, as noise on a short tooth can look like a warm-up.
    std::size_t warmed = 0;
    for (std::size_t k = 1; k < rep.runs.size(); ++k) warmed += rep.runs[k].load_start_seconds > rep.runs[k].start_seconds ? 1 : 0;
    if (static_cast<double>(warmed) < restarts_warmed_share * static_cast<double>(rep.runs.size() - 1)) {
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
    rep.reason = reason_of(rep);
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
    rep.confidence = std::clamp(confidence_restarts + (1.0 - confidence_restarts) * least, 0.0, 1.0) * size_factor(p.size());
  } else {
    rep.confidence = r.confidence;
  }
  rep.confidence = std::clamp(rep.confidence, least_confidence, 1.0);
  rep.reason = reason_of(rep);
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
      ++out[it->second].memory_readings;
      gpu_points[it->second].push_back({seconds(s.time), static_cast<double>(*s.memory_used) / mib});
    }
  }
  for (std::size_t g = 0; g < out.size(); ++g) out[g].report = analyse_series(gpu_points[g], options);
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
    g.memory_readings = pr.points.size();
    g.report = analyse_series(pr.points, options);
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace mgm::telemetry
