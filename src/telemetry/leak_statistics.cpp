// Robust statistics for the leak analysis: medians, levels, noise, significance, and Theil-Sen.
#include "leak_detail.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>

namespace mgm::telemetry {
namespace leak_detail {

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
  if (p.size() < min_window_readings) return 0.0;
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
  return std::clamp<std::size_t>(n / level_share, std::min<std::size_t>(level_min_points, std::max<std::size_t>(1, n / 2)), level_max_points);
}

/// Probability-like score of a z statistic: erf(z / √2), 1 for an infinite z.
double significance(double z) {
  if (!(z > 0.0)) return 0.0;
  if (std::isinf(z)) return 1.0;
  return std::erf(z / std::sqrt(2.0));
}

/// Fewer points, less confidence: n / (n + 5).
double size_factor(std::size_t n) { return static_cast<double>(n) / (static_cast<double>(n) + confidence_points); }

}  // namespace leak_detail

namespace {

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

}  // namespace

using namespace leak_detail;

slope_estimate theil_sen(std::span<const series_point> points, std::size_t max_pairs, double independent_points) {
  slope_estimate out;
  const std::size_t n = points.size();
  out.points = n;
  out.independent_points = static_cast<double>(n);
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
    for (std::size_t k = 0; k < pair_draws * max_pairs && slopes.size() < max_pairs; ++k) {
      const auto i = static_cast<std::size_t>(rng.next() % n);
      const auto j = static_cast<std::size_t>(rng.next() % n);
      if (i != j) add(std::min(i, j), std::max(i, j));
    }
  }
  out.pairs = slopes.size();
  if (slopes.empty()) return out;
  out.mib_per_min = median_of(slopes) * 60.0;
  // Sen's interval: the order statistics at (N ± z·sqrt(Var S)) / 2, scaled to the pairs used; Var S
  // grows by n / n* when only n* of the readings are independent.
  const double nd = static_cast<double>(n);
  if (independent_points > 0.0 && independent_points < nd) out.independent_points = independent_points;
  const double c = sen_z95 * std::sqrt(nd * (nd - 1.0) * (2.0 * nd + 5.0) / 18.0 * (nd / out.independent_points));
  const double lo_share = std::clamp((all_pairs - c) / (2.0 * all_pairs), 0.0, 1.0);
  const double hi_share = std::clamp((all_pairs + c) / (2.0 * all_pairs), 0.0, 1.0);
  const std::size_t last = slopes.size() - 1;
  const auto lo_rank = std::min(last, static_cast<std::size_t>(std::floor(lo_share * static_cast<double>(last))));
  const auto hi_rank = std::min(last, static_cast<std::size_t>(std::ceil(hi_share * static_cast<double>(last))));
  out.lower_mib_per_min = std::min(kth(slopes, lo_rank) * 60.0, out.mib_per_min);
  out.upper_mib_per_min = std::max(kth(slopes, hi_rank) * 60.0, out.mib_per_min);
  return out;
}

double independent_readings(std::span<const series_point> points, const slope_estimate& slope) {
  const std::size_t n = points.size();
  const double nd = static_cast<double>(n);
  if (n < min_window_readings) return nd;
  const double per_s = slope.mib_per_min / 60.0;
  std::vector<double> r;
  r.reserve(n);
  for (const auto& x : points) r.push_back(x.mib - per_s * x.seconds);
  std::vector<double> sorted = r;
  const double intercept = median_of(sorted);
  double mean = 0.0;
  for (double& x : r) mean += (x -= intercept);
  mean /= nd;
  double var = 0.0;
  double lag1 = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    var += (r[i] - mean) * (r[i] - mean);
    if (i > 0) lag1 += (r[i] - mean) * (r[i - 1] - mean);
  }
  if (!(var > 0.0)) return nd;  // on the line exactly: nothing wanders
  const double rho = lag1 / var;
  if (!(rho > 0.0)) return nd;
  return std::clamp(nd * (1.0 - rho) / (1.0 + rho), std::min(2.0, nd), nd);
}

}  // namespace mgm::telemetry
