/// @file
/// @brief Replaying a trace through an allocator: `replay_result` and the fit search
/// (../shared/DESIGN.md §7).
#pragma once

#include <mgm/device.hpp>
#include <mgm/pool/pool_options.hpp>
#include <mgm/sim/cost_model.hpp>
#include <mgm/trace/growth_bound.hpp>
#include <mgm/trace/trace.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mgm {

/// @brief The smallest device capacity (a multiple of 2 MiB) that runs the trace.
struct replay_fit {
  std::size_t capacity_bytes{0};
  double over_peak_live{0.0};             ///< capacity / peak live bytes
  bool confirmed{false};                  ///< a second replay at that capacity ran too
  std::vector<std::size_t> non_monotone;  ///< capacities above the fit that failed
};

/// @brief The modelled driver time of a replay on the simulator, in seconds (`sim::cost_model`).
struct modelled_driver_seconds {
  std::array<double, sim::driver_call_kinds> by_kind{};  ///< indexed by `sim::driver_call`
  double total{0.0};
  double after_first_iteration{0.0};
  /// @brief The model's charge for obtaining the allocator's own peak reserved bytes once, in one
  /// allocation of its kind: one cudaMalloc, or (an allocator that mapped virtual memory)
  /// reserve + create + map + set_access of one handle, on a device that never held memory.
  double floor{0.0};
  /// @brief For an allocator that grew virtual ranges: the least any such allocator could take on
  /// this trace under `replay_options::memory_limit` (`least_growth_driver_time`).
  std::optional<growth_bound> least_under_memory_limit;
};

/// @brief One allocator's replay of one trace on one device (DESIGN.md §7; `mgm replay --json`).
///
/// Host time: the replay's wall time, less a replay of the same trace through a do-nothing
/// target, less the host time the simulator spent in calls whose time is modelled (its mmap,
/// mprotect and table work for cudaMalloc, cudaFree and the virtual-memory calls, measured
/// around each such call: `sim::machine::bookkeeping`). What is left is the allocator's own.
/// With the judge on (`replay_options::judge`), the judge's work is part of it.
struct replay_result {
  std::string trace;
  std::string allocator;
  int device{0};
  int iterations{0};
  std::size_t events{0};                       ///< per iteration
  double host_ns_per_event{0.0};               ///< the replay minus a do-nothing replay, per event
  /// @brief The do-nothing replay itself, per event: the loop's cost that `host_ns_per_event`
  /// leaves out (reading the event, storing the pointer). Against the `bump` target, compare
  /// `host_ns_per_event + loop_ns_per_event`: bump's own share is close to nothing.
  double loop_ns_per_event{0.0};
  double events_per_second{0.0};
  std::uint64_t upstream_allocations{0};      ///< cudaMalloc + cuMemCreate
  std::uint64_t upstream_frees{0};            ///< cudaFree + cuMemRelease
  /// @brief malloc, free, reserve, create, map, set_access, unmap and release after the first
  /// iteration (events are not counted).
  std::uint64_t upstream_calls_after_first_iteration{0};
  std::size_t peak_live_bytes{0};              ///< requested bytes
  std::size_t peak_reserved_bytes{0};          ///< the device's peak use
  double reserved_over_live{0.0};
  std::optional<replay_fit> fit;
  /// @brief Calls per kind (`sim::driver_call`), on the simulator.
  std::optional<std::array<std::uint64_t, sim::driver_call_kinds>> driver_calls;
  std::optional<mgm::modelled_driver_seconds> modelled_driver_seconds;  ///< on the simulator
  /// @brief Deprecated: a copy of `modelled_driver_seconds->total`, kept for one release.
  std::optional<double> modelled_upstream_seconds;
  std::optional<double> measured_upstream_seconds;  ///< on a GPU
  std::optional<std::uint64_t> hazards;             ///< what the judge found (when it was on)

  /// @brief One JSON object with exactly the fields above (`fit` null unless searched).
  [[nodiscard]] std::string to_json() const;
};

/// @brief How to replay.
struct replay_options {
  int iterations{3};
  bool fit{false};
  std::size_t capacity_bytes{std::size_t{80} << 30};  ///< the simulated device's memory
  pool_options pool{};                                 ///< for the `pool` allocator
  sim::cost_model costs{};                             ///< the simulated driver's call costs (`none()`: free)
  /// @brief Wrap the allocator in `sim::judged` (hazards are counted in `replay_result::hazards`,
  /// not thrown). On by default; `mgm replay` and the benchmarks switch it on with `--judge`.
  bool judge{true};
  /// @brief The reserved / live limit of `modelled_driver_seconds::least_under_memory_limit`
  /// (issue 17's hard memory target).
  double memory_limit{1.05};
};

/// @brief The allocators a trace can be replayed through on the simulator: `pool` (our caching
/// pool), `direct` (the upstream for every block), `cub` (CUB's CachingDeviceAllocator, power-of-two
/// bins from 256 B to 256 MiB), `pmr` (`std::pmr::unsynchronized_pool_resource` over the device),
/// `bump` (one arena and a bumped pointer, frees ignored: the floor for host time, never judged,
/// whose memory figures are the whole arena).
[[nodiscard]] std::span<const std::string_view> replay_allocators() noexcept;

/// @brief Replays `t` through `allocator` on a simulated device of `options.capacity_bytes`.
/// @throws mgm::logic_error for an unknown allocator name; mgm::out_of_memory when the trace does
/// not fit the capacity (the result of a fit search says what would).
[[nodiscard]] replay_result replay_on_sim(const compiled_trace& t, std::string_view allocator, const replay_options& options);

/// @brief Replays `t` on a real GPU through `pool` (the caching pool over `cudaMalloc`), `direct`
/// (`cudaMalloc`/`cudaFree` for every block), `async` (`cudaMallocAsync`) or `cub` (CUB's
/// CachingDeviceAllocator, bins as on the simulator), with one CUDA stream per stream of the trace.
/// `measured_upstream_seconds` is the time inside the driver's calls for `direct`, `async` and
/// `cub` (its cudaMalloc/cudaFree); the pool reports its upstream calls from its statistics. No fit search.
/// @throws mgm::cuda_error (`cudaErrorNoDevice`) without a GPU; mgm::logic_error for another name.
[[nodiscard]] replay_result replay_on_device(const compiled_trace& t, std::string_view allocator,
                                             const replay_options& options, device_id device = device_id{0});

/// @brief One trace through one allocator on several devices at once, one thread each, as a
/// data-parallel training job replays the same step on every GPU.
struct data_parallel_result {
  std::vector<replay_result> per_device;  ///< `device` set to 0..K-1
  double wall_seconds{0.0};               ///< from the first thread's start to the last one's end
  double cpu_seconds{0.0};                ///< process CPU time over the same span (all threads)
  double events_per_second{0.0};          ///< every device's events, every iteration, over the wall time
  [[nodiscard]] std::string to_json() const;  ///< the aggregate fields only (not `per_device`)
};

/// @brief Replays `t` through `allocator` on `capacities.size()` devices at once: simulated devices
/// of those capacities, or (`on_gpu`) CUDA devices 0..K-1 (`capacities` then only give the count).
/// @throws what `replay_on_sim` / `replay_on_device` throw, from the first device that failed
/// (the other threads finish first).
[[nodiscard]] data_parallel_result replay_data_parallel(const compiled_trace& t, std::string_view allocator,
                                                        const replay_options& options,
                                                        std::span<const std::size_t> capacities, bool on_gpu = false);

}  // namespace mgm
