// Thrust on a caching pool: a device_vector whose memory comes from the pool, and thrust::sort
// whose scratch memory does too, all stream-ordered on one stream. Sorting ten times costs one
// cudaMalloc for the vectors and one for the scratch; the rest are cache hits.
// Needs a GPU: exits 77 (CTest's "skipped") without one.
// Usage: mgm_example_thrust_pool [N]   (default: 4,000,000 floats)
#include <mgm/allocators/cuda_allocator.hpp>
#include <mgm/bytes.hpp>
#include <mgm/device.hpp>
#include <mgm/error.hpp>
#include <mgm/interop/thrust_allocator.hpp>
#include <mgm/pool/caching_pool.hpp>

#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>
#include <thrust/transform.h>

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

namespace {

// A fixed permutation of 0..n-1 as floats (n below 2^24 stays exact): i * 7919 mod n, for n not
// a multiple of 7919.
struct scramble {
  unsigned n;
  __host__ __device__ float operator()(unsigned i) const {
    return static_cast<float>((static_cast<unsigned long long>(i) * 7919ULL) % n);
  }
};

}  // namespace

int main(int argc, char** argv) try {
  if (mgm::device_count() == 0) {
    std::fprintf(stderr, "mgm_example_thrust_pool: no CUDA device or driver here; skipping\n");
    return 77;
  }
  const unsigned n = argc > 1 ? static_cast<unsigned>(std::strtoul(argv[1], nullptr, 10)) : 4000000U;
  const mgm::device_id gpu{0};
  const mgm::scoped_device on{gpu};
  cudaStream_t stream = nullptr;
  // A blocking stream: device_vector's constructor fills on the default stream, which then orders
  // with it.
  MGM_CUDA_TRY(cudaStreamCreate(&stream));
  bool ok = true;
  {
    mgm::caching_pool pool{mgm::cuda_allocator{gpu}};
    using pooled_vector = thrust::device_vector<float, mgm::thrust_allocator<float>>;
    const mgm::thrust_allocator<float> alloc{pool, stream};
    mgm::thrust_temporary_allocator scratch{pool, stream};
    const auto policy = thrust::cuda::par(scratch).on(stream);

    for (int round = 0; round < 10 && ok; ++round) {
      pooled_vector keys(n, alloc);
      thrust::counting_iterator<unsigned> first{0};
      thrust::transform(policy, first, first + n, keys.begin(), scramble{n});
      thrust::sort(policy, keys.begin(), keys.end());
      ok = thrust::is_sorted(policy, keys.begin(), keys.end()) && keys.front() == 0.0f &&
           keys.back() == static_cast<float>(n - 1);
    }
    MGM_CUDA_TRY(cudaStreamSynchronize(stream));

    const mgm::pool_statistics s = pool.statistics();
    std::printf("10 rounds of: a pooled device_vector of %u floats, transform, sort, is_sorted (scratch from the pool)\n",
                n);
    std::printf("  sorted correctly: %s\n", ok ? "yes" : "NO");
    std::printf("  pool: %llu allocations, %llu cache hits, %llu cudaMalloc calls; reserved %s, peak allocated %s\n",
                static_cast<unsigned long long>(s.allocations.total), static_cast<unsigned long long>(s.cache_hits),
                static_cast<unsigned long long>(s.upstream_allocations),
                mgm::format_bytes(static_cast<std::size_t>(s.reserved_bytes.current)).c_str(),
                mgm::format_bytes(static_cast<std::size_t>(s.allocated_bytes.peak)).c_str());
    ok = ok && s.allocated_bytes.current == 0 && s.cache_hits > 0;
  }
  MGM_CUDA_TRY(cudaStreamDestroy(stream));
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "mgm_example_thrust_pool: %s\n", e.what());
  return 1;
}
