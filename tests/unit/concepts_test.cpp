// Compile-time checks of the concepts, positive and negative (as CCCL's concept tests are).
#include <mgm/allocators/cuda_allocator.hpp>
#include <mgm/allocators/cuda_async_allocator.hpp>
#include <mgm/allocators/host_allocator.hpp>
#include <mgm/allocators/managed_allocator.hpp>
#include <mgm/allocators/pinned_host_allocator.hpp>
#include <mgm/concepts.hpp>
#include <mgm/platform/cuda_peer_ops.hpp>
#include <mgm/platform/cuda_stream_ops.hpp>
#include <mgm/platform/cuda_vmm_ops.hpp>
#include <mgm/properties.hpp>
#include <mgm/sim/machine.hpp>

#include <catch2/catch.hpp>

#include <cstddef>

namespace {

struct no_dealloc {
  void* allocate(std::size_t, std::size_t);
  friend bool operator==(const no_dealloc&, const no_dealloc&) = default;
};
struct throwing_dealloc {
  void* allocate(std::size_t, std::size_t);
  void deallocate(void*, std::size_t, std::size_t);  // not noexcept
  friend bool operator==(const throwing_dealloc&, const throwing_dealloc&) = default;
};
struct no_equality {
  void* allocate(std::size_t, std::size_t);
  void deallocate(void*, std::size_t, std::size_t) noexcept;
};
struct wrong_return {
  int* allocate(std::size_t, std::size_t);
  void deallocate(void*, std::size_t, std::size_t) noexcept;
  friend bool operator==(const wrong_return&, const wrong_return&) = default;
};
struct sync_only {
  void* allocate(std::size_t, std::size_t);
  void deallocate(void*, std::size_t, std::size_t) noexcept;
  friend bool operator==(const sync_only&, const sync_only&) = default;
};
struct async_without_platform : sync_only {
  void* allocate_async(std::size_t, std::size_t, mgm::stream_ref);
  void deallocate_async(void*, std::size_t, std::size_t, mgm::stream_ref) noexcept;
  friend bool operator==(const async_without_platform&, const async_without_platform&) = default;
};
struct event_ops_missing_capture {
  using event = int;
  event create_event(mgm::device_id);
  void record(event, mgm::stream_ref);
  bool query(event);
  void wait(mgm::stream_ref, event);
  void synchronize(event);
  void destroy_event(event) noexcept;
};

// Positive.
static_assert(mgm::allocator<sync_only>);
static_assert(mgm::stream_allocator<async_without_platform>);
static_assert(mgm::allocator<mgm::host_allocator>);
static_assert(mgm::platform_allocator<mgm::cuda_allocator>);
static_assert(mgm::platform_allocator<mgm::cuda_async_allocator>);
static_assert(mgm::platform_allocator<mgm::pinned_host_allocator>);
static_assert(mgm::platform_allocator<mgm::managed_allocator>);
static_assert(mgm::platform_allocator<mgm::sim::device_allocator>);
static_assert(mgm::stream_ops<mgm::cuda_stream_ops> && mgm::stream_ops<mgm::sim::stream_ops>);
static_assert(mgm::vmm_ops<mgm::cuda_vmm_ops> && mgm::vmm_ops<mgm::sim::vmm_ops>);
static_assert(mgm::peer_ops<mgm::cuda_peer_ops> && mgm::peer_ops<mgm::sim::peer_ops>);
// Each Upstream names its platform, so a pool over the sim can never reach CUDA's seam.
static_assert(std::same_as<mgm::sim::device_allocator::stream_ops_type, mgm::sim::stream_ops>);
static_assert(std::same_as<mgm::cuda_allocator::stream_ops_type, mgm::cuda_stream_ops>);

// Negative.
static_assert(!mgm::allocator<no_dealloc>);
static_assert(!mgm::allocator<throwing_dealloc>);
static_assert(!mgm::allocator<no_equality>);
static_assert(!mgm::allocator<wrong_return>);
static_assert(!mgm::stream_allocator<sync_only>);
static_assert(!mgm::stream_allocator<mgm::host_allocator>);
static_assert(!mgm::platform_allocator<async_without_platform>);
static_assert(!mgm::stream_ops<event_ops_missing_capture>);
static_assert(!mgm::allocator<int>);

// Properties.
static_assert(mgm::has_property<mgm::cuda_allocator, mgm::device_accessible>);
static_assert(!mgm::has_property<mgm::cuda_allocator, mgm::host_accessible>);
static_assert(mgm::has_property<mgm::managed_allocator, mgm::host_accessible>);
static_assert(mgm::has_property_with_value<mgm::sim::device_allocator, mgm::device_affinity>);
static_assert(!mgm::has_property<sync_only, mgm::device_accessible>);

}  // namespace

TEST_CASE("device_affinity names the allocator's device", "[concepts]") {
  REQUIRE(mgm::affinity_of(mgm::cuda_allocator{mgm::device_id{3}}) == mgm::device_id{3});
  REQUIRE(mgm::affinity_of(mgm::managed_allocator{mgm::device_id::host()}).is_host());
  REQUIRE(mgm::affinity_of(mgm::host_allocator{}) == mgm::device_id::host());
  auto m = mgm::sim::machine::preset("dgx-h100");
  REQUIRE(mgm::affinity_of(m.allocator(mgm::device_id{5})) == mgm::device_id{5});
  REQUIRE(m.allocator(mgm::device_id{5}) != m.allocator(mgm::device_id{4}));
}
