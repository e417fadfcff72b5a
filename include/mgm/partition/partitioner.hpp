/// @file
/// @brief `partition`: splits N items across heterogeneous GPUs; `rebalance`: moves between plans.
///
/// Pure functions, no CUDA. Glossary:
/// - *capacity* of a device: the items it can hold, `min(max_items, (free - reserve - overhead) /
///   bytes_per_item)`.
/// - *unit*: `granularity` items; counts are whole units except on the one device that takes the
///   remainder `N mod granularity` (the one with the most spare capacity after the units).
/// - *makespan*: `max(count / throughput)`, the time the slowest device needs.
///
/// Policies:
/// - `memory`: proportional to usable memory, by largest remainder with iterative capping (a device
///   whose quota passes its capacity is fixed there and the rest re-apportioned; minimums likewise);
/// - `throughput`: minimises the makespan under the memory capacities (a D'Hondt-style greedy that
///   gives each unit to the device that would finish it first: optimal for equal-size items);
/// - `equal`, `weights`: proportional to 1, or to the given weights, capped as `memory` is.
///
/// Invariants of every plan: `Σ counts == N`; `min_items <= count <= capacity` per device;
/// uncapped, `|count - quota| < 1` unit for the proportional policies; the same input gives the
/// same plan. Ranges are contiguous, laid out so that devices with the best links are neighbours.
#pragma once

#include <mgm/error.hpp>
#include <mgm/topology/topology.hpp>

#include <cstddef>
#include <limits>
#include <string>
#include <vector>

namespace mgm {

enum class partition_policy { memory, throughput, equal, weights };

/// @brief One device as the partitioner sees it.
struct partition_device {
  std::size_t free_bytes{0};
  std::size_t reserve_bytes{0};   ///< kept free (a safety margin)
  std::size_t overhead_bytes{0};  ///< needed once, whatever the count (a model replica, a context)
  double throughput{1.0};         ///< items per second, relative
  std::size_t min_items{0};
  std::size_t max_items{std::numeric_limits<std::size_t>::max()};
  double weight{1.0};             ///< for `partition_policy::weights`
};

struct partition_request {
  std::size_t items{0};
  std::size_t bytes_per_item{0};
  std::size_t granularity{1};
  partition_policy policy{partition_policy::memory};
  std::vector<partition_device> devices;
};

struct partition_plan {
  std::vector<std::size_t> counts;                         ///< per device, by index
  std::vector<std::size_t> capacity;                       ///< per device
  std::vector<std::size_t> order;                          ///< the devices in layout order
  std::vector<std::pair<std::size_t, std::size_t>> ranges;  ///< per device: [begin, end) of the items
  double makespan{0.0};
  [[nodiscard]] std::string to_string() const;
};

/// @brief An infeasible request: what each device lacks, in items (0 where it is not the cause).
class partition_error : public logic_error {
 public:
  partition_error(const std::string& what, std::vector<std::size_t> shortfall_items)
      : logic_error{what}, shortfall_{std::move(shortfall_items)} {}
  [[nodiscard]] const std::vector<std::size_t>& shortfall_items() const noexcept { return shortfall_; }

 private:
  std::vector<std::size_t> shortfall_;
};

/// @brief A device's capacity, in items: `min(max_items, (free - reserve - overhead) /
/// bytes_per_item)`, 0 when reserve and overhead exceed free memory; unbounded by memory when
/// `bytes_per_item` is 0.
[[nodiscard]] std::size_t partition_capacity(const partition_device& d, std::size_t bytes_per_item) noexcept;

/// @brief The plan for `r`. `links` (optional, as many GPUs as devices) orders the ranges.
/// @throws mgm::partition_error when the devices cannot hold the items (or their minimums exceed
/// them), naming the shortfall; mgm::logic_error for a zero granularity, a non-positive
/// throughput or weight, or no devices.
[[nodiscard]] partition_plan partition(const partition_request& r, const topology* links = nullptr);

/// @brief One move of items between devices.
struct partition_move {
  std::size_t from{0};
  std::size_t to{0};
  std::size_t items{0};
  std::string path;  ///< nvidia-smi's label of the route ("NV12", "SYS"), "NET" to another node, "" without a topology
  bool via_host{false};   ///< no peer path: the copy is staged through host memory
  bool from_lost{false};  ///< the sender is gone: the items are rebuilt on `to`, not copied
};

struct rebalance_plan {
  partition_plan plan;                 ///< the plan to run now (the previous one if kept)
  std::vector<partition_move> moves;   ///< empty when the previous plan is kept
  bool kept{true};
  std::string reason;                  ///< why it moved, or why it did not
};

/// @brief From `previous` and the devices as they are now: keep the previous plan unless a device
/// overflows its new capacity or the new plan's makespan is better by more than `hysteresis`
/// (a fraction); otherwise the fewest items moved (Σ of the surpluses), routed at the least cost
/// over the links (`route_moves`, <mgm/partition/rebalancer.hpp>). For a job that runs, with
/// readings at a period, see `rebalancer`.
[[nodiscard]] rebalance_plan rebalance(const partition_plan& previous, const partition_request& now,
                                       const topology* links = nullptr, double hysteresis = 0.05);

}  // namespace mgm
