/// @file
/// @brief `host_allocator`: ordinary pageable host memory.
#pragma once

#include <mgm/concepts.hpp>
#include <mgm/detail/checks.hpp>
#include <mgm/device.hpp>
#include <mgm/error.hpp>
#include <mgm/properties.hpp>

#include <cstddef>
#include <new>

namespace mgm {

/// @brief Pageable host memory from aligned `operator new`. Any power-of-two alignment.
///
/// Not stream-ordered: nothing on a device may still use host memory when it is freed.
/// @throws mgm::out_of_memory when the host is out of memory; mgm::logic_error for a bad alignment.
/// **Thread safety:** safe. **Device affinity:** the host.
class host_allocator {
 public:
  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = alignof(std::max_align_t)) {
    detail::check_alignment(alignment, static_cast<std::size_t>(1) << 30, "host_allocator");
    if (bytes == 0) return nullptr;
    // libstdc++'s aligned new rounds the size up to the alignment and can wrap around to a tiny
    // block: a size that cannot be rounded is refused here.
    void* p = bytes <= static_cast<std::size_t>(-1) - alignment
                  ? ::operator new(bytes, std::align_val_t{alignment}, std::nothrow)
                  : nullptr;
    if (p == nullptr) [[unlikely]] {
      throw out_of_memory{"host_allocator: out of host memory allocating " + detail::describe_bytes(bytes), bytes};
    }
    return p;
  }
  void deallocate(void* p, std::size_t /*bytes*/, std::size_t alignment = alignof(std::max_align_t)) noexcept {
    if (p != nullptr) ::operator delete(p, std::align_val_t{alignment});
  }

  friend constexpr bool operator==(const host_allocator&, const host_allocator&) noexcept { return true; }
  friend void get_property(const host_allocator&, host_accessible) noexcept {}
  friend device_id get_property(const host_allocator&, device_affinity) noexcept { return device_id::host(); }
};
static_assert(allocator<host_allocator>);
static_assert(!stream_allocator<host_allocator>);
static_assert(has_property<host_allocator, host_accessible>);
static_assert(!has_property<host_allocator, device_accessible>);

}  // namespace mgm
