/// @file
/// @brief `sim::fault_plan`: failures the simulated machine injects on one device.
#pragma once

#include <mgm/device.hpp>

#include <cstdint>

namespace mgm::sim {

namespace detail {
class machine_state;
}

/// @brief Injects failures into one simulated device's allocations (`allocate`, `allocate_async`
/// and the virtual-memory seam's `create`). Deterministic: the same plan on the same sequence
/// of calls fails the same calls.
///
/// - `fail_nth(n)`: the n-th allocation from now (1 = the next one) throws `out_of_memory`, once.
/// - `fail_with_probability(p, seed)`: each allocation fails with probability `p`, drawn from a
///   generator seeded with `seed` (splitmix64), so a seed reproduces a run.
/// - `lose_device()`: every later call on the device throws `cuda_error` with
///   `cudaErrorDevicesUnavailable`, as a GPU that fell off the bus; frees are still accepted.
/// - `clear()`: removes all of the above.
/// A handle: copies act on the same device. **Thread safety:** safe (the device's lock).
class fault_plan {
 public:
  fault_plan(detail::machine_state* machine, device_id device) noexcept : machine_{machine}, device_{device} {}

  void fail_nth(std::uint64_t n);
  void fail_with_probability(double p, std::uint64_t seed);
  void lose_device();
  void clear();
  /// @brief How many failures this plan has injected so far.
  [[nodiscard]] std::uint64_t injected() const;

 private:
  detail::machine_state* machine_;
  device_id device_;
};

}  // namespace mgm::sim
