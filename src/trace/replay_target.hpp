// The allocators a replay drives, behind one small virtual interface (the do-nothing replay pays
// the same virtual call, so the difference is the allocator's own cost). Private to src/trace.
#pragma once

#include <mgm/device.hpp>
#include <mgm/pool/pool_options.hpp>
#include <mgm/sim/machine.hpp>
#include <mgm/stream.hpp>

#include <cstddef>
#include <memory>
#include <string_view>

namespace mgm::detail {

class replay_target {
 public:
  virtual ~replay_target() = default;
  virtual void* allocate(std::size_t bytes, stream_ref s) = 0;
  virtual void deallocate(void* p, std::size_t bytes, stream_ref s) noexcept = 0;
};

/// `pool`, `direct`, `cub`, `pmr` or `null` (fake pointers, no work) on device `d` of `m`.
std::unique_ptr<replay_target> make_replay_target(std::string_view name, sim::machine& m, device_id d,
                                                  const pool_options& options);
/// CUB's CachingDeviceAllocator with its CUDA calls redirected to the simulator (cub_target.cpp).
std::unique_ptr<replay_target> make_cub_target(sim::machine& m, device_id d);

}  // namespace mgm::detail
