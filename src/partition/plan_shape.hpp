// What partition() and the rebalancer both derive from a plan's counts: its ranges (in its layout
// order) and its makespan.
#pragma once

#include <mgm/partition/partitioner.hpp>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

namespace mgm::detail {

/// A capacity with no bound: what a device holds when an item needs no memory.
inline constexpr std::size_t unlimited = std::numeric_limits<std::size_t>::max();

/// `a + b`, or `unlimited` where the sum would wrap.
constexpr std::size_t saturating_add(std::size_t a, std::size_t b) { return b > unlimited - a ? unlimited : a + b; }

/// `max(count / throughput)`: the time the slowest device needs.
inline double makespan_of(const std::vector<std::size_t>& counts, const std::vector<partition_device>& d) {
  double m = 0.0;
  for (std::size_t i = 0; i < counts.size(); ++i) m = std::max(m, static_cast<double>(counts[i]) / d[i].throughput);
  return m;
}

/// Sets `plan.ranges` from its counts, contiguous in `plan.order`, and its makespan.
inline void shape_plan(partition_plan& plan, const std::vector<partition_device>& devices) {
  plan.ranges.assign(plan.counts.size(), {0, 0});
  std::size_t begin = 0;
  for (const std::size_t i : plan.order) {
    plan.ranges[i] = {begin, begin + plan.counts[i]};
    begin += plan.counts[i];
  }
  plan.makespan = makespan_of(plan.counts, devices);
}

}  // namespace mgm::detail
