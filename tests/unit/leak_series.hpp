// Series for the leak analysis tests: straight lines, and noise from a fixed-seed generator that
// does not depend on the standard library's distributions.
#pragma once

#include <mgm/telemetry/leak_analysis.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace mgm_test {

inline constexpr double half_gb_per_min_in_mib = 476.837158203125;  // 0.5 GB (10^9 bytes) per minute

inline std::vector<mgm::telemetry::series_point> line(std::size_t n, double interval_s, double intercept, double mib_per_min) {
  std::vector<mgm::telemetry::series_point> out;
  for (std::size_t i = 0; i < n; ++i) {
    const double t = static_cast<double>(i) * interval_s;
    out.push_back({t, intercept + mib_per_min * t / 60.0});
  }
  return out;
}

struct rng {
  std::mt19937_64 engine;
  explicit rng(std::uint64_t seed) : engine{seed} {}
  double uniform() { return static_cast<double>(engine() >> 11) * 0x1.0p-53; }  // [0, 1)
  /// Box-Muller, so that results do not depend on the standard library's distributions.
  double normal() {
    const double u1 = 1.0 - uniform();
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

}  // namespace mgm_test
