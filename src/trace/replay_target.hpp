// The allocators a replay drives, behind one small virtual interface (the do-nothing replay pays
// the same virtual call, so the difference is the allocator's own cost). Private to src/trace.
#pragma once

#include <mgm/device.hpp>
#include <mgm/pool/pool_options.hpp>
#include <mgm/sim/machine.hpp>
#include <mgm/stream.hpp>

#include <mgm/trace/replay.hpp>
#include <mgm/trace/trace.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace mgm::detail {

class replay_target {
 public:
  virtual ~replay_target() = default;
  virtual void* allocate(std::size_t bytes, stream_ref s) = 0;
  virtual void deallocate(void* p, std::size_t bytes, stream_ref s) noexcept = 0;
};

/// `pool`, `direct`, `cub`, `pmr` or `null` (fake pointers, no work) on device `d` of `m`;
/// with `judge`, wrapped in `sim::judged` so that the machine's judge sees every hand-out.
std::unique_ptr<replay_target> make_replay_target(std::string_view name, sim::machine& m, device_id d,
                                                  const pool_options& options, bool judge);
/// Fake pointers, no work: the loop's own cost, subtracted from every replay's host time.
std::unique_ptr<replay_target> make_null_target();

/// A replay's host-time figures: it took `spent` (the allocator's work and the loop's), the
/// do-nothing replay took `loop`, over `events` events in all.
inline void set_host_times(replay_result& r, std::chrono::nanoseconds spent, std::chrono::nanoseconds loop,
                           double events) {
  const auto net = std::max<std::int64_t>(0, (spent - loop).count());
  r.host_ns_per_event = static_cast<double>(net) / events;
  r.loop_ns_per_event = static_cast<double>(loop.count()) / events;
  r.events_per_second = net == 0 ? 0.0 : events * 1e9 / static_cast<double>(net);
}

/// Replays `t` `iterations` times through `target` (one clock read per batch: a clock read costs
/// more than an event's budget); `after_first()` runs after the first iteration.
template <class AfterFirst>
std::chrono::nanoseconds replay_ops(const compiled_trace& t, replay_target& target, const std::vector<stream_ref>& streams,
                                    int iterations, AfterFirst&& after_first) {
  std::vector<void*> ptrs(t.slots);
  const auto start = std::chrono::steady_clock::now();
  for (int it = 0; it < iterations; ++it) {
    for (const replay_op& op : t.ops) {
      if (op.is_free) {
        target.deallocate(ptrs[op.slot], op.bytes, streams[op.stream]);
      } else {
        ptrs[op.slot] = target.allocate(op.bytes, streams[op.stream]);
      }
    }
    if (it == 0) after_first();
  }
  return std::chrono::steady_clock::now() - start;
}

/// CUB's CachingDeviceAllocator with its CUDA calls redirected to the simulator (cub_target.cpp).
std::unique_ptr<replay_target> make_cub_target(sim::machine& m, device_id d);

/// `p` when CUB's `DeviceAllocate` returned `status` == cudaSuccess; else mgm::out_of_memory (for
/// cudaErrorMemoryAllocation, naming `bytes`) or mgm::cuda_error. Shared by both CUB targets.
void* cub_allocation(cudaError_t status, void* p, std::size_t bytes);

/// What CUB's allocator asked the real driver for, on a GPU.
struct upstream_counters {
  std::uint64_t mallocs{0};
  std::uint64_t frees{0};
  std::chrono::nanoseconds time{0};  ///< inside cudaMalloc and cudaFree
  std::size_t live_bytes{0};
  std::size_t peak_bytes{0};
};

/// CUB's CachingDeviceAllocator on the real device `d` (same bins as the simulator's), with its
/// cudaMalloc and cudaFree counted and timed into `counters` (which must outlive the target).
std::unique_ptr<replay_target> make_cub_device_target(device_id d, upstream_counters& counters);

}  // namespace mgm::detail
