/// @file
/// @brief `sim::pinned_host_allocator`: the simulated machine's pinned host memory.
#pragma once

#include <mgm/concepts.hpp>
#include <mgm/detail/checks.hpp>
#include <mgm/device.hpp>
#include <mgm/error.hpp>
#include <mgm/properties.hpp>
#include <mgm/sim/stream_ops.hpp>
#include <mgm/stream.hpp>

#include <cstddef>
#include <optional>

namespace mgm::sim {

namespace detail {
class machine_state;
}

/// @brief Host memory as the simulator's pinned host tier: ordinary aligned host memory, tagged
/// with a NUMA node, with the machine's stream seam (so a `caching_pool` over it runs on the
/// simulator's clocks). A handle; copies are equal. **Thread safety:** safe.
/// **Device affinity:** the host.
class pinned_host_allocator {
 public:
  using stream_ops_type = sim::stream_ops;

  pinned_host_allocator(detail::machine_state* machine, std::optional<int> numa_node) noexcept
      : machine_{machine}, numa_{numa_node} {}

  /// Pages mapped with `MAP_NORESERVE` (host memory costs only where touched, as device memory
  /// does); alignments up to a page.
  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = cuda_allocation_alignment);
  void deallocate(void* p, std::size_t bytes, std::size_t alignment = cuda_allocation_alignment) noexcept;
  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref) { return allocate(bytes, alignment); }
  void deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref) noexcept { deallocate(p, bytes, alignment); }

  [[nodiscard]] std::optional<int> numa_node() const noexcept { return numa_; }
  [[nodiscard]] stream_ops_type stream_ops() const noexcept { return stream_ops_type{machine_}; }

  friend bool operator==(const pinned_host_allocator&, const pinned_host_allocator&) = default;
  friend void get_property(const pinned_host_allocator&, device_accessible) noexcept {}
  friend void get_property(const pinned_host_allocator&, host_accessible) noexcept {}
  friend device_id get_property(const pinned_host_allocator&, device_affinity) noexcept { return device_id::host(); }

 private:
  detail::machine_state* machine_;
  std::optional<int> numa_;
};
static_assert(platform_allocator<pinned_host_allocator>);

}  // namespace mgm::sim
