// CUB's radix sort with its temporary storage from a caching pool: mgm::cub_with_temp_storage
// makes the sizing call, takes the block from the pool on the stream, runs the sort, and frees the
// block stream-ordered. The keys and the result live in the pool too; the result is checked.
// Needs a GPU: exits 77 (CTest's "skipped") without one.
// Usage: mgm_example_cub_sort [N]   (default: 10,000,000 keys)
#include <mgm/allocators/cuda_allocator.hpp>
#include <mgm/bytes.hpp>
#include <mgm/device.hpp>
#include <mgm/error.hpp>
#include <mgm/interop/cub_temp_storage.hpp>
#include <mgm/pool/caching_pool.hpp>

#include <cub/device/device_radix_sort.cuh>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <vector>

int main(int argc, char** argv) try {
  if (mgm::device_count() == 0) {
    std::fprintf(stderr, "mgm_example_cub_sort: no CUDA device or driver here; skipping\n");
    return 77;
  }
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : std::size_t{10000000};
  const std::size_t bytes = n * sizeof(std::uint32_t);
  const mgm::device_id gpu{0};
  const mgm::scoped_device on{gpu};
  cudaStream_t stream = nullptr;
  MGM_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  std::vector<std::uint32_t> host(n);
  std::mt19937 rng{2024};
  for (auto& k : host) k = static_cast<std::uint32_t>(rng());
  std::vector<std::uint32_t> result(n);

  bool ok = true;
  {
    mgm::caching_pool pool{mgm::cuda_allocator{gpu}};
    auto* keys_in = static_cast<std::uint32_t*>(pool.allocate_async(bytes, 256, stream));
    auto* keys_out = static_cast<std::uint32_t*>(pool.allocate_async(bytes, 256, stream));
    MGM_CUDA_TRY(cudaMemcpyAsync(keys_in, host.data(), bytes, cudaMemcpyHostToDevice, stream));

    std::size_t temp_bytes = 0;
    for (int round = 0; round < 5; ++round) {  // the scratch is a cache hit after the first round
      const cudaError_t sorted = mgm::cub_with_temp_storage(pool, stream, [&](void* temp, std::size_t& temp_size) {
        const cudaError_t e = cub::DeviceRadixSort::SortKeys(temp, temp_size, keys_in, keys_out, n, 0, 32, stream);
        temp_bytes = temp_size;
        return e;
      });
      MGM_CUDA_TRY(sorted);
    }
    MGM_CUDA_TRY(cudaMemcpyAsync(result.data(), keys_out, bytes, cudaMemcpyDeviceToHost, stream));
    MGM_CUDA_TRY(cudaStreamSynchronize(stream));
    pool.deallocate_async(keys_out, bytes, 256, stream);
    pool.deallocate_async(keys_in, bytes, 256, stream);

    std::vector<std::uint32_t> expected = host;
    std::sort(expected.begin(), expected.end());
    ok = result == expected;
    const mgm::pool_statistics s = pool.statistics();
    std::printf("cub::DeviceRadixSort::SortKeys of %zu keys, 5 times, with %s of temporary storage from the pool\n", n,
                mgm::format_bytes(temp_bytes).c_str());
    std::printf("  result matches std::sort: %s\n", ok ? "yes" : "NO");
    std::printf("  pool: %llu allocations, %llu cache hits, %llu cudaMalloc calls; %s allocated after the frees\n",
                static_cast<unsigned long long>(s.allocations.total), static_cast<unsigned long long>(s.cache_hits),
                static_cast<unsigned long long>(s.upstream_allocations),
                mgm::format_bytes(static_cast<std::size_t>(s.allocated_bytes.current)).c_str());
    ok = ok && s.allocated_bytes.current == 0 && s.cache_hits >= 4;
  }
  MGM_CUDA_TRY(cudaStreamDestroy(stream));
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "mgm_example_cub_sort: %s\n", e.what());
  return 1;
}
