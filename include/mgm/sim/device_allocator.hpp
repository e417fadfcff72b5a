/// @file
/// @brief `sim::device_allocator`: `cudaMalloc` / `cudaFree` on one simulated device.
#pragma once

#include <mgm/concepts.hpp>
#include <mgm/device.hpp>
#include <mgm/properties.hpp>
#include <mgm/sim/stream_ops.hpp>
#include <mgm/sim/vmm_ops.hpp>
#include <mgm/stream.hpp>

#include <cstddef>

namespace mgm::sim {

namespace detail {
class machine_state;
}

/// @brief The simulated device's own allocator: the sim's `cudaMalloc` and `cudaFree`.
///
/// Memory comes from the device's `MAP_NORESERVE` range, so it is real, readable and writable
/// host memory that costs RAM only where touched. Requests are rounded up to 256 bytes and
/// charged to the device exactly; any power-of-two alignment up to 2 MiB is honoured.
/// Every call adds its modelled cost (`cost_model`); a free synchronises the device's clock.
/// Stream-ordered calls behave like the synchronous ones (as `cudaMalloc`/`cudaFree` would),
/// after checking that `stream` belongs to this device and is not capturing a graph.
/// @throws mgm::out_of_memory naming the device and sizes when the device is full;
/// mgm::logic_error for a bad alignment or a foreign stream; mgm::cuda_error for a lost device
/// or a call during graph capture.
/// `deallocate` of a pointer this device does not hold (never allocated, already freed, or
/// another device's) changes nothing and is reported through `mgm::log` at `error` level and in
/// `machine::invalid_frees`.
/// A handle: copies are equal. **Thread safety:** safe (the device's lock).
/// **Device affinity:** its device.
class device_allocator {
 public:
  using stream_ops_type = sim::stream_ops;
  using vmm_ops_type = sim::vmm_ops;

  device_allocator(detail::machine_state* machine, device_id device,
                   vmm_sharing sharing = vmm_sharing::process_local) noexcept
      : machine_{machine}, device_{device}, sharing_{sharing} {}

  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = cuda_allocation_alignment);
  void deallocate(void* p, std::size_t bytes, std::size_t alignment = cuda_allocation_alignment) noexcept;
  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream);
  void deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept;

  [[nodiscard]] device_id device() const noexcept { return device_; }
  /// @brief The device's free memory (`cudaMemGetInfo`'s first figure).
  [[nodiscard]] std::size_t free_bytes() const;
  /// @brief The device's capacity (`cudaMemGetInfo`'s second figure).
  [[nodiscard]] std::size_t total_bytes() const;
  [[nodiscard]] stream_ops_type stream_ops() const noexcept { return stream_ops_type{machine_}; }
  /// @brief The machine's virtual-memory seam (for a pool's expandable segments).
  [[nodiscard]] vmm_ops_type vmm_ops() const noexcept { return vmm_ops_type{machine_, sharing_}; }

  friend bool operator==(const device_allocator&, const device_allocator&) = default;
  friend void get_property(const device_allocator&, device_accessible) noexcept {}
  friend device_id get_property(const device_allocator& a, device_affinity) noexcept { return a.device_; }

 private:
  detail::machine_state* machine_;
  device_id device_;
  vmm_sharing sharing_{vmm_sharing::process_local};
};
static_assert(platform_allocator<device_allocator>);

}  // namespace mgm::sim
