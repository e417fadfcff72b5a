// Every public header compiled by nvcc (the cuda::mr bridge included), with the templates
// instantiated for the CUDA allocators, and the one kernel the GPU tests use.
#define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#include <mgm/mgm.hpp>

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

void mgm_test_fill_on_device(void* p, std::size_t n, unsigned char value) {
  fill_kernel<<<64, 256>>>(static_cast<unsigned char*>(p), n, value);
  MGM_CUDA_TRY(cudaGetLastError());
  MGM_CUDA_TRY(cudaDeviceSynchronize());
}
