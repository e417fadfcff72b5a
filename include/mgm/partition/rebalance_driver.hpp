/// @file
/// @brief `rebalance_driver`: the rebalancer's loop, a thread that reads the GPUs at a period
/// and calls back when the plan changes; `readings_from`: a telemetry batch (NVML, the CUDA
/// runtime, the simulator, with our pools' figures) as the rebalancer's readings.
///
/// The driver never throws into its thread: a reading that fails, a rebalancer that refuses
/// the readings and a callback that throws are each counted, reported as an event, and the loop
/// goes on with the plan it had.
#pragma once

#include <mgm/partition/rebalancer.hpp>
#include <mgm/telemetry/sample.hpp>
#include <mgm/telemetry/source.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace mgm {

/// @brief How a telemetry batch becomes readings.
struct reading_options {
  /// What a GPU's MultiGpuMem pools hold cached (reserved minus allocated) counts as free: they
  /// give it back when asked (`release`), so it is room for the job.
  bool pool_cache_is_free{true};
  /// `from_source` only: readings in a row a GPU must be missing from before it counts as lost;
  /// until then it has no reading (its last one stands). 1: lost at once; 3 for a cluster's
  /// Prometheus, where one failed scrape is not a loss. A GPU the source reports lost (NVML's
  /// GPU_IS_LOST) is lost at once, and stays lost while it is missing.
  unsigned misses_before_lost{1};
};

/// @brief One reading per GPU of the rebalancer, from one batch. `keys` names each GPU as
/// `device_sample::key()` does (the UUID, else the PCI bus id); without keys the GPUs are the
/// batch's CUDA ordinals (else its indices) 0..gpus-1. A GPU that is not in the batch, or that
/// the batch says is lost, reads `present = false`; MIG instances are skipped unless a key names
/// one.
[[nodiscard]] std::vector<gpu_reading> readings_from(const std::vector<telemetry::device_sample>& batch,
                                                     std::size_t gpus, const std::vector<std::string>& keys = {},
                                                     reading_options options = {});

/// @brief What one turn of the loop did.
struct rebalance_event {
  enum class kind {
    stayed,           ///< the plan stays (the decision's reason says why)
    moved,            ///< the plan changed and the callback carried out the moves
    reading_failed,   ///< the readings could not be taken: nothing changed
    callback_failed,  ///< the callback threw: the plan is the one from before the step
  };
  kind what{kind::stayed};
  std::uint64_t turn{0};          ///< 1 for the first turn
  telemetry::clock::time_point time{};
  rebalance_decision decision;    ///< for `stayed`, `moved`; empty otherwise
  std::string message;            ///< one line: the decision's reason, or the error
};

[[nodiscard]] std::string_view kind_name(rebalance_event::kind k) noexcept;

/// @brief The loop: read, step, call back on a change. The thread starts in the constructor
/// (`start = false` leaves it to `turn()` calls, for tests and single-threaded tools).
/// **Thread safety:** the accessors are safe from any thread; callbacks run on the driver's thread.
class rebalance_driver {
 public:
  using reading_function = std::function<std::vector<gpu_reading>()>;
  /// Carries out a decision's moves, before the next reading is taken. Throwing means the moves
  /// did not happen: the plan stays the one before, so the callback must undo what it did of
  /// them (all or nothing). `plan()` shows the new plan only once it returns.
  using change_callback = std::function<void(const rebalance_decision&)>;
  /// Every turn, moved or not (logs, `mgm plan --watch`). Its exceptions are caught and ignored.
  using event_callback = std::function<void(const rebalance_event&)>;

  rebalance_driver(rebalancer r, reading_function read, std::chrono::milliseconds period, change_callback on_change,
                   event_callback on_event = {}, bool start = true);
  ~rebalance_driver();
  rebalance_driver(const rebalance_driver&) = delete;
  rebalance_driver& operator=(const rebalance_driver&) = delete;

  /// @brief Readings from a telemetry source (see `readings_from`); the source is shared with the
  /// function, which may be called from the driver's thread only.
  [[nodiscard]] static reading_function from_source(std::shared_ptr<telemetry::source> source, std::size_t gpus,
                                                    std::vector<std::string> keys = {}, reading_options options = {});

  /// @brief One turn now, on the caller's thread (not while the thread runs).
  rebalance_event turn();
  /// @brief Stops the thread after its current turn (idempotent; from a callback it returns at
  /// once, and the loop ends after that turn).
  void stop() noexcept;

  [[nodiscard]] partition_plan plan() const;
  [[nodiscard]] std::uint64_t turns() const noexcept;
  [[nodiscard]] std::uint64_t changes() const noexcept;
  [[nodiscard]] std::uint64_t errors() const noexcept;
  [[nodiscard]] std::string last_error() const;

  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

}  // namespace mgm
