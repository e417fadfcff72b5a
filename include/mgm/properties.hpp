/// @file
/// @brief Allocator properties, found through a `get_property` friend as in CCCL's `cuda::mr`.
///
/// A property is a tag type. An allocator declares one with a hidden friend:
/// @code
///   friend void get_property(const my_allocator&, mgm::device_accessible) noexcept {}
///   friend mgm::device_id get_property(const my_allocator& a, mgm::device_affinity) noexcept { return a.device_; }
/// @endcode
/// `interop/cuda_mr.hpp` maps these tags onto CCCL's, so the same allocators satisfy
/// `cuda::mr::async_resource_with<A, cuda::mr::device_accessible>`.
#pragma once

#include <mgm/device.hpp>

#include <concepts>

namespace mgm {

/// @brief Memory a kernel can read and write.
struct device_accessible {};
/// @brief Memory the host can read and write.
struct host_accessible {};
/// @brief The device whose memory (or whose context) an allocator serves; stateful.
/// `device_id::host()` for host memory.
struct device_affinity {
  using value_type = device_id;
};

/// @brief `A` declares property `P`.
template <class A, class P>
concept has_property = requires(const A& a) { get_property(a, P{}); };

/// @brief `A` declares property `P`, and `P` carries a value of type `P::value_type`.
template <class A, class P>
concept has_property_with_value = has_property<A, P> && requires(const A& a) {
  typename P::value_type;
  { get_property(a, P{}) } -> std::convertible_to<typename P::value_type>;
};

/// @brief The device an allocator serves (its `device_affinity`).
template <has_property_with_value<device_affinity> A>
[[nodiscard]] device_id affinity_of(const A& a) noexcept {
  return get_property(a, device_affinity{});
}

}  // namespace mgm
