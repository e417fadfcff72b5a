// Every public header compiled by nvcc (the cuda::mr bridge included), with the templates
// instantiated for the CUDA allocators, and the one kernel the GPU tests use.
#define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#include <mgm/mgm.hpp>
// The interop headers the umbrella leaves out (Thrust is slow to parse; the CUB helper is its companion).
#include <mgm/interop/cub_temp_storage.hpp>
#include <mgm/interop/thrust_allocator.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>

namespace {

__global__ void fill_kernel(unsigned char* p, std::size_t n, unsigned char value) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    p[i] = value;
  }
}

template <mgm::platform_allocator A>
constexpr bool instantiate() {
  return mgm::has_property<A, mgm::device_accessible> && mgm::stream_ops<typename A::stream_ops_type>;
}

static_assert(instantiate<mgm::cuda_allocator>());
static_assert(instantiate<mgm::cuda_async_allocator>());
static_assert(instantiate<mgm::pinned_host_allocator>());
static_assert(instantiate<mgm::managed_allocator>());
static_assert(instantiate<mgm::sim::device_allocator>());
static_assert(mgm::allocator<mgm::host_allocator>);
static_assert(mgm::cuda_mr_device_resource<mgm::cuda_allocator>);
static_assert(mgm::cuda_mr_device_resource<mgm::cuda_async_allocator>);
static_assert(mgm::cuda_mr_device_resource<mgm::sim::device_allocator>);

}  // namespace

// The Thrust allocators over a pool of the CUDA leaf, and the CUB helper's instantiation.
void mgm_test_instantiate_interop(mgm::caching_pool<mgm::cuda_allocator>& pool, mgm::stream_ref s) {
  mgm::thrust_allocator<float> floats{pool, s};
  const mgm::thrust_allocator<double> doubles{floats};
  floats.deallocate(floats.allocate(1), 1);
  mgm::thrust_temporary_allocator scratch{pool, s};
  scratch.deallocate(scratch.allocate(1), 1);
  (void)(floats == doubles);
  (void)mgm::cub_with_temp_storage(pool, s, [](void*, std::size_t&) { return cudaSuccess; });
}

void mgm_test_fill_on_device(void* p, std::size_t n, unsigned char value) {
  fill_kernel<<<64, 256>>>(static_cast<unsigned char*>(p), n, value);
  MGM_CUDA_TRY(cudaGetLastError());
  MGM_CUDA_TRY(cudaDeviceSynchronize());
}
