#include <mgm/bytes.hpp>
#include <mgm/partition/partitioner.hpp>
#include <mgm/partition/rebalancer.hpp>

#include "plan_shape.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>
#include <string>

namespace mgm {
namespace {

using detail::saturating_add;
using detail::unlimited;

// Largest-remainder apportionment of `units` by `weights`, with iterative capping at `caps` and
// raising to `mins` (all in units). Deterministic: ties go to the lower index.
std::vector<std::size_t> apportion(std::size_t units, const std::vector<double>& weights,
                                   const std::vector<std::size_t>& mins, const std::vector<std::size_t>& caps) {
  const std::size_t n = weights.size();
  std::vector<std::size_t> counts(n, 0);
  std::vector<bool> fixed(n, false);
  std::size_t left = units;
  while (true) {
    double total = 0.0;
    for (std::size_t i = 0; i < n; ++i) total += fixed[i] ? 0.0 : weights[i];
    bool changed = false;
    // Fix at the cap every device whose quota passes it, and at the minimum every one below it.
    for (std::size_t i = 0; i < n; ++i) {
      if (fixed[i]) continue;
      const double quota = total > 0 ? static_cast<double>(left) * weights[i] / total : 0.0;
      if (quota >= static_cast<double>(caps[i])) {
        counts[i] = caps[i];
        fixed[i] = true;
        changed = true;
      } else if (quota < static_cast<double>(mins[i])) {
        counts[i] = mins[i];
        fixed[i] = true;
        changed = true;
      }
      if (changed) break;  // re-apportion the rest after each fix
    }
    if (changed) {
      std::size_t taken = 0;
      for (std::size_t k = 0; k < n; ++k) taken += fixed[k] ? counts[k] : 0;
      left = units >= taken ? units - taken : 0;
      continue;
    }
    // Floors, then the largest remainders.
    std::vector<std::pair<double, std::size_t>> rest;
    std::size_t given = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (fixed[i]) continue;
      const double quota = total > 0 ? static_cast<double>(left) * weights[i] / total : 0.0;
      counts[i] = static_cast<std::size_t>(std::floor(quota));
      given += counts[i];
      rest.emplace_back(quota - std::floor(quota), i);
    }
    std::stable_sort(rest.begin(), rest.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (std::size_t k = 0; given < left && k < rest.size(); ++k) {
      if (counts[rest[k].second] < caps[rest[k].second]) {
        ++counts[rest[k].second];
        ++given;
      }
    }
    return counts;
  }
}

// Each unit to the device that would finish it first (minimises max(count / throughput)).
std::vector<std::size_t> fastest_first(std::size_t units, const std::vector<double>& throughput,
                                       const std::vector<std::size_t>& mins, const std::vector<std::size_t>& caps) {
  const std::size_t n = throughput.size();
  std::vector<std::size_t> counts = mins;
  std::size_t given = std::accumulate(mins.begin(), mins.end(), std::size_t{0});
  using entry = std::pair<double, std::size_t>;  // finish time of one more unit, device
  const auto later = [](const entry& a, const entry& b) { return a.first > b.first || (a.first == b.first && a.second > b.second); };
  std::priority_queue<entry, std::vector<entry>, decltype(later)> next{later};
  for (std::size_t i = 0; i < n; ++i) {
    if (counts[i] < caps[i]) next.emplace(static_cast<double>(counts[i] + 1) / throughput[i], i);
  }
  while (given < units && !next.empty()) {
    const auto [t, i] = next.top();
    next.pop();
    ++counts[i];
    ++given;
    if (counts[i] < caps[i]) next.emplace(static_cast<double>(counts[i] + 1) / throughput[i], i);
  }
  return counts;
}

// Devices in an order where neighbours have the best links: from device 0, always the unvisited
// device with the best path (NCCL's type, then the most NVLinks), ties to the lower ordinal.
std::vector<std::size_t> layout_order(std::size_t n, const topology* links) {
  std::vector<std::size_t> order;
  if (links == nullptr || links->gpu_count() != n) {
    for (std::size_t i = 0; i < n; ++i) order.push_back(i);
    return order;
  }
  std::vector<bool> seen(n, false);
  std::size_t at = 0;
  for (std::size_t k = 0; k < n; ++k) {
    order.push_back(at);
    seen[at] = true;
    std::size_t best = n;
    for (std::size_t j = 0; j < n; ++j) {
      if (seen[j]) continue;
      if (best == n) {
        best = j;
        continue;
      }
      const auto& pj = links->path(device_id{static_cast<int>(at)}, device_id{static_cast<int>(j)});
      const auto& pb = links->path(device_id{static_cast<int>(at)}, device_id{static_cast<int>(best)});
      if (pj.type < pb.type || (pj.type == pb.type && pj.nvlinks > pb.nvlinks)) best = j;
    }
    if (best == n) break;
    at = best;
  }
  return order;
}


}  // namespace

std::size_t partition_capacity(const partition_device& d, std::size_t bytes_per_item) noexcept {
  const std::size_t fixed = d.reserve_bytes + d.overhead_bytes;
  if (d.free_bytes < fixed) return 0;
  const std::size_t by_memory = bytes_per_item == 0 ? unlimited : (d.free_bytes - fixed) / bytes_per_item;
  return std::min(by_memory, d.max_items);
}

partition_plan partition(const partition_request& r, const topology* links) {
  const std::size_t n = r.devices.size();
  MGM_EXPECTS(n > 0, "partition: no devices");
  MGM_EXPECTS(r.granularity > 0, "partition: the granularity must be at least 1");
  partition_plan plan;
  plan.capacity.resize(n);
  std::size_t total_capacity = 0;
  std::size_t total_min = 0;
  std::vector<std::size_t> short_by(n, 0);
  bool min_over_cap = false;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& d = r.devices[i];
    MGM_EXPECTS(d.throughput > 0 && std::isfinite(d.throughput), "partition: device " + std::to_string(i) + " needs a positive throughput");
    MGM_EXPECTS(d.weight > 0 && std::isfinite(d.weight), "partition: device " + std::to_string(i) + " needs a positive weight");
    plan.capacity[i] = partition_capacity(d, r.bytes_per_item);
    total_capacity = saturating_add(total_capacity, plan.capacity[i]);
    total_min += d.min_items;
    if (d.min_items > plan.capacity[i]) {
      short_by[i] = d.min_items - plan.capacity[i];
      min_over_cap = true;
    }
  }
  if (min_over_cap) {
    std::string what = "partition: a device cannot hold its minimum:";
    for (std::size_t i = 0; i < n; ++i) {
      if (short_by[i] != 0) what += " device " + std::to_string(i) + " lacks room for " + std::to_string(short_by[i]) + " items;";
    }
    throw partition_error{what, short_by};
  }
  if (total_capacity < r.items) {
    const std::size_t lacking = r.items - total_capacity;
    // Name each device's share of the shortfall in proportion to its memory.
    std::vector<std::size_t> share(n, 0);
    double mem_total = 0;
    for (const auto& d : r.devices) mem_total += static_cast<double>(d.free_bytes);
    for (std::size_t i = 0; i < n; ++i) {
      share[i] = mem_total > 0 ? static_cast<std::size_t>(std::ceil(static_cast<double>(lacking) *
                                                                      static_cast<double>(r.devices[i].free_bytes) / mem_total))
                               : lacking;
    }
    throw partition_error{"partition: " + std::to_string(r.items) + " items need room for " + std::to_string(lacking) +
                              " more than the devices hold (" + std::to_string(total_capacity) + " items, " +
                              format_bytes(lacking * r.bytes_per_item) + " short)",
                          share};
  }
  if (total_min > r.items) {
    throw partition_error{"partition: the minimums (" + std::to_string(total_min) + " items) exceed the " +
                              std::to_string(r.items) + " items",
                          std::vector<std::size_t>(n, 0)};
  }

  // Whole units first; the remainder goes to the device with the most spare capacity.
  const std::size_t g = r.granularity;
  const std::size_t units = r.items / g;
  const std::size_t remainder = r.items % g;
  std::vector<std::size_t> unit_caps(n);
  std::vector<std::size_t> unit_mins(n);
  std::vector<double> weights(n);
  for (std::size_t i = 0; i < n; ++i) {
    unit_caps[i] = plan.capacity[i] / g;
    unit_mins[i] = std::min(unit_caps[i], (r.devices[i].min_items + g - 1) / g);
    const auto& d = r.devices[i];
    switch (r.policy) {
      case partition_policy::memory:
        weights[i] = static_cast<double>(d.free_bytes > d.reserve_bytes + d.overhead_bytes
                                             ? d.free_bytes - d.reserve_bytes - d.overhead_bytes
                                             : 0);
        if (r.bytes_per_item == 0) weights[i] = static_cast<double>(d.free_bytes) + 1.0;
        break;
      case partition_policy::throughput: weights[i] = d.throughput; break;
      case partition_policy::equal: weights[i] = 1.0; break;
      case partition_policy::weights: weights[i] = d.weight; break;
    }
  }
  std::size_t unit_total = 0;
  for (const auto c : unit_caps) unit_total = saturating_add(unit_total, c);
  MGM_EXPECTS(unit_total >= units || g > 1, "partition: internal capacity error");
  if (unit_total < units) {
    throw partition_error{"partition: in units of " + std::to_string(g) + " items the devices hold " +
                              std::to_string(unit_total) + " units, " + std::to_string(units) + " are needed",
                          std::vector<std::size_t>(n, 0)};
  }
  plan.counts = r.policy == partition_policy::throughput ? fastest_first(units, weights, unit_mins, unit_caps)
                                                         : apportion(units, weights, unit_mins, unit_caps);
  for (auto& c : plan.counts) c *= g;
  if (remainder != 0) {
    std::size_t best = n;
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t spare = plan.capacity[i] - plan.counts[i];
      if (spare >= remainder && (best == n || spare > plan.capacity[best] - plan.counts[best])) best = i;
    }
    if (best == n) {
      throw partition_error{"partition: no device has room for the last " + std::to_string(remainder) + " items",
                            std::vector<std::size_t>(n, 0)};
    }
    plan.counts[best] += remainder;
  }
  // Minimums that are not whole units.
  for (std::size_t i = 0; i < n; ++i) {
    while (plan.counts[i] < r.devices[i].min_items) {
      // take from the device with the most above its own minimum
      std::size_t donor = n;
      for (std::size_t j = 0; j < n; ++j) {
        if (j != i && plan.counts[j] > r.devices[j].min_items && (donor == n || plan.counts[j] > plan.counts[donor])) donor = j;
      }
      if (donor == n) break;
      --plan.counts[donor];
      ++plan.counts[i];
    }
  }
  plan.order = layout_order(n, links);
  detail::shape_plan(plan, r.devices);
  return plan;
}

std::string partition_plan::to_string() const {
  std::string out;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    out += "device " + std::to_string(i) + ": " + std::to_string(counts[i]) + " items [" +
           std::to_string(ranges[i].first) + ", " + std::to_string(ranges[i].second) + ") of capacity " +
           (capacity[i] == unlimited ? std::string{"unlimited"} : std::to_string(capacity[i])) + "\n";
  }
  return out;
}

rebalance_plan rebalance(const partition_plan& previous, const partition_request& now, const topology* links,
                         double hysteresis) {
  MGM_EXPECTS(previous.counts.size() == now.devices.size(), "rebalance: the previous plan has another device count");
  MGM_EXPECTS(hysteresis >= 0.0 && hysteresis < 1.0, "rebalance: hysteresis is a fraction in [0, 1)");
  rebalance_plan out;
  const partition_plan next = partition(now, links);
  std::size_t prev_total = 0;
  for (const auto c : previous.counts) prev_total += c;
  bool overflow = prev_total != now.items;
  for (std::size_t i = 0; i < next.capacity.size() && !overflow; ++i) overflow = previous.counts[i] > next.capacity[i];
  const double previous_makespan = detail::makespan_of(previous.counts, now.devices);
  if (!overflow && next.makespan >= previous_makespan * (1.0 - hysteresis)) {
    out.plan = previous;
    out.plan.capacity = next.capacity;
    out.plan.makespan = previous_makespan;
    out.reason = "kept: the best plan is not " + std::to_string(static_cast<int>(hysteresis * 100)) + " % faster";
    return out;
  }
  out.kept = false;
  out.plan = next;
  out.reason = overflow ? "moved: a device no longer holds its items" : "moved: the makespan improves enough";
  // Surpluses go to deficits at the least cost over the links (route_moves: a min-cost flow).
  std::vector<std::size_t> surplus(next.counts.size(), 0);
  std::vector<std::size_t> deficit(next.counts.size(), 0);
  for (std::size_t i = 0; i < next.counts.size(); ++i) {
    if (previous.counts[i] > next.counts[i]) surplus[i] = previous.counts[i] - next.counts[i];
    if (previous.counts[i] < next.counts[i]) deficit[i] = next.counts[i] - previous.counts[i];
  }
  // With fewer items than before, the surplus beyond the deficits is dropped, not moved: the
  // largest surpluses give it up first.
  std::size_t to_send = 0;
  std::size_t to_take = 0;
  for (std::size_t i = 0; i < surplus.size(); ++i) {
    to_send += surplus[i];
    to_take += deficit[i];
  }
  while (to_send > to_take) {
    const auto most = std::max_element(surplus.begin(), surplus.end());
    const std::size_t cut = std::min(*most, to_send - to_take);
    *most -= cut;
    to_send -= cut;
  }
  const bool routed = links != nullptr && links->gpu_count() == surplus.size();
  out.moves = route_moves(surplus, deficit, routed ? links : nullptr);
  return out;
}

}  // namespace mgm
