// Our allocators satisfy CCCL 3.0's cuda::mr concepts through interop/cuda_mr.hpp.
#define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#include <mgm/allocators/cuda_allocator.hpp>
#include <mgm/allocators/cuda_async_allocator.hpp>
#include <mgm/allocators/host_allocator.hpp>
#include <mgm/allocators/managed_allocator.hpp>
#include <mgm/allocators/pinned_host_allocator.hpp>
#include <mgm/interop/cuda_mr.hpp>
#include <mgm/sim/machine.hpp>

#include <catch2/catch.hpp>

#include <cuda/memory_resource>

static_assert(mgm::cuda_mr_device_resource<mgm::cuda_allocator>);
static_assert(mgm::cuda_mr_device_resource<mgm::cuda_async_allocator>);
static_assert(mgm::cuda_mr_device_resource<mgm::pinned_host_allocator>);
static_assert(mgm::cuda_mr_device_resource<mgm::managed_allocator>);
static_assert(mgm::cuda_mr_device_resource<mgm::sim::device_allocator>);
static_assert(cuda::mr::async_resource_with<mgm::pinned_host_allocator, cuda::mr::device_accessible,
                                            cuda::mr::host_accessible>);
static_assert(cuda::mr::resource_with<mgm::host_allocator, cuda::mr::host_accessible>);
static_assert(!cuda::mr::resource_with<mgm::host_allocator, cuda::mr::device_accessible>);
static_assert(!cuda::mr::resource_with<mgm::cuda_allocator, cuda::mr::host_accessible>);

TEST_CASE("a simulated device allocator works through cuda::mr::async_resource_ref", "[interop]") {
  auto m = mgm::sim::machine::preset("dgx-a100");
  auto a = m.allocator(mgm::device_id{2});
  cuda::mr::async_resource_ref<cuda::mr::device_accessible> ref{a};
  const auto s = m.create_stream(mgm::device_id{2});
  void* p = ref.allocate_async(4096, 256, cuda::stream_ref{s.get()});
  REQUIRE(p != nullptr);
  REQUIRE(m.memory(mgm::device_id{2}).used_bytes == 4096);
  ref.deallocate_async(p, 4096, 256, cuda::stream_ref{s.get()});
  REQUIRE(m.memory(mgm::device_id{2}).used_bytes == 0);
}
