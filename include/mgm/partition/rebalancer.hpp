/// @file
/// @brief `rebalancer`: a plan kept in step with the GPUs' free memory as a job runs; and
/// `route_moves`, which sends items between GPUs over the fastest links.
///
/// Pure logic, no CUDA and no clock: each `step` takes one reading per GPU and answers "stay" or
/// the moves to make, with the reason. Glossary:
/// - *reading*: a GPU's free memory now (and its throughput where it is measured), or its absence
///   (the GPU is gone);
/// - *usable memory* of a GPU for the job: its free memory plus what the job's own items and
///   overhead there take (`readings_include_items`), that is the memory the job would have if it
///   held nothing there; the plan's capacities come from it (`partition_capacity`);
/// - *change*: the plan `partition` makes from this step's readings differs from the current one
///   by at least `min_change` of the items (by `min_change` of the makespan too, for the
///   throughput policy);
/// - *overflow*: a GPU holds more items than its capacity now (another tenant took memory);
/// - *hysteresis*: a change or an overflow moves items only once it has lasted `hold_steps`
///   readings in a row (each asking for nearly the same plan: within `min_change` of the one
///   before), so noise and one-reading spikes move nothing;
/// - *cooldown*: for `cooldown_steps` after items went from GPU a to GPU b, none go back from b
///   to a, unless an overflow or a lost GPU forces it;
/// - *lost*: a GPU whose reading says it is gone: its items are re-placed at once (no hold) and
///   their moves are marked `from_lost` (the data must be rebuilt: there is nothing to copy). When
///   no plan can take them they stay counted on it, and if it comes back they are rebuilt there:
///   a move from the GPU to itself, `from_lost`, before anything else.
///
/// What a move never does: make a GPU go over its memory. A GPU either sends or receives in one
/// decision, never both, and what it receives fits in its free memory above its reserve while the
/// senders still hold their copies (the buffers in flight). The caller carries out a decision's
/// moves before the next `step` (the `rebalance_driver` runs them in its callback).
#pragma once

#include <mgm/partition/partitioner.hpp>
#include <mgm/topology/topology.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace mgm {

/// @brief One GPU at one step.
struct gpu_reading {
  bool present{true};                     ///< false: the GPU is gone (lost, removed, not in the sample)
  std::optional<std::size_t> free_bytes;  ///< empty: no memory reading this time (its last one is used)
  std::optional<double> throughput;       ///< items per second where measured; else the request's figure
};

/// @brief How large and how lasting a change must be, and how long moved items stay.
struct rebalancer_options {
  /// A change moves items only when the new plan moves at least this fraction of them (and, under
  /// the throughput policy, its makespan is better by this fraction). In [0, 1).
  double min_change{0.05};
  /// Readings in a row a change or an overflow must last before anything moves (>= 1).
  std::size_t hold_steps{2};
  /// Steps after a move during which no item goes back the way it came.
  std::size_t cooldown_steps{6};
  /// The readings' free memory counts the job's own items as used (true for NVML's and
  /// `cudaMemGetInfo`'s readings of the GPUs the job runs on): their bytes are added back.
  bool readings_include_items{true};
};

/// @brief What one step decided.
struct rebalance_decision {
  std::uint64_t step{0};             ///< 1 for the first step
  rebalance_plan plan;               ///< the plan to run now, its moves (empty when it stays) and reason
  std::vector<std::size_t> lost;     ///< GPUs gone at this step (items on them are re-placed)
  std::vector<std::string> notes;    ///< what else the step saw: readings missing, a plan that fits nowhere
  /// @brief Whether the step made moves (the plan was not kept).
  [[nodiscard]] bool moved() const noexcept { return !plan.kept; }
};

/// @brief The cost of moving one byte from `from` to `to`, in seconds per GB: NVLink and PCIe
/// peers at their bandwidth (`topology::bandwidth`), through host memory (no peer path: a board
/// that forbids PCIe peers, or across sockets) at two PCIe hops, and to another node (`NET`,
/// `cluster_links`) at two PCIe hops and the network's bandwidth.
[[nodiscard]] double move_cost(const topology& links, std::size_t from, std::size_t to);
/// @brief Whether `from` and `to` can copy peer to peer (NVLink, or PCIe below the CPU on boards
/// that allow it), as CUDA's peer access rules say.
[[nodiscard]] bool has_peer_path(const topology& links, std::size_t from, std::size_t to);

/// @brief Sends every `surplus[i]` item to GPUs with `room[j]` at the least total cost (a
/// min-cost flow; `room` bounds what each GPU takes; a sender's own room is not used). Without `links` every route costs the same
/// and the sends follow GPU order. Moves carry nvidia-smi's label of their route, and `via host`
/// where the route has no peer path. @throws mgm::logic_error when the room is short of the surplus.
[[nodiscard]] std::vector<partition_move> route_moves(const std::vector<std::size_t>& surplus,
                                                      const std::vector<std::size_t>& room, const topology* links);

/// @brief A plan kept in step with the GPUs, one reading at a time (see the file comment).
/// A value type: copy it to try a reading without committing to it. **Thread safety:** none.
class rebalancer {
 public:
  /// @param request the job: items, bytes per item, granularity, policy and each GPU's reserve,
  ///   overhead, bounds and throughput; its `free_bytes` are the readings at the start.
  /// @param links the machine's topology (as many GPUs as the request has devices), or none.
  /// @throws mgm::partition_error when the items do not fit at the start; mgm::logic_error for
  ///   bad options or a topology of another size.
  rebalancer(partition_request request, rebalancer_options options = {}, std::optional<topology> links = {});

  /// @brief One reading per GPU, in the request's order: stay, or the moves to make now.
  /// @throws mgm::logic_error when the readings are not one per GPU.
  [[nodiscard]] rebalance_decision step(std::span<const gpu_reading> readings);

  [[nodiscard]] const partition_plan& plan() const noexcept { return plan_; }
  [[nodiscard]] const partition_request& request() const noexcept { return request_; }
  [[nodiscard]] const rebalancer_options& options() const noexcept { return options_; }
  [[nodiscard]] std::uint64_t steps() const noexcept { return step_; }
  /// @brief GPUs seen gone (they get no items until they are present again).
  [[nodiscard]] const std::vector<bool>& gone() const noexcept { return gone_; }

 private:
  partition_request request_;
  rebalancer_options options_;
  std::optional<topology> links_;
  partition_plan plan_;
  std::uint64_t step_{0};
  std::size_t pending_{0};                                     // readings in a row that asked for a move
  std::vector<std::size_t> pending_target_;                    // the plan they asked for
  std::vector<bool> gone_;
  std::vector<bool> lost_data_;  // gone while it held items, which no plan has placed elsewhere yet
  std::map<std::pair<std::size_t, std::size_t>, std::uint64_t> moved_at_;  // (from, to) -> step

  // The items of GPUs that came back without their data: rebuilt there within the memory each has
  // now (`candidate`'s capacities), the rest on the others.
  void carry_into_readings(const std::vector<std::size_t>& target);
  rebalance_decision rebuild_lost(rebalance_decision out, const std::vector<std::size_t>& rebuild,
                                  const partition_request& now, const partition_plan& candidate, const topology* links);
};

}  // namespace mgm
