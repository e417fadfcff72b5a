// A caching pool in a few lines: allocate and free on a stream, reuse from the cache, read the
// statistics, and see what running out of memory says. On a simulated 16 GiB GPU, and on the real
// GPU 0 as well when there is one.
// Usage: mgm_example_basic_pool
#include <mgm/mgm.hpp>

#include <cuda_runtime_api.h>

#include <cstdio>
#include <exception>
#include <vector>

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

template <class Pool>
void tour(Pool& pool, mgm::stream_ref stream, std::size_t device_bytes) {
  // A training step's worth of buffers, allocated and freed on one stream.
  const std::vector<std::size_t> sizes{64 * MiB, 3 * MiB, 512 * 1024, 256 * MiB, 1000};
  for (int step = 0; step < 3; ++step) {
    std::vector<void*> live;
    for (const std::size_t bytes : sizes) live.push_back(pool.allocate_async(bytes, 256, stream));
    for (std::size_t i = 0; i < sizes.size(); ++i) pool.deallocate_async(live[i], sizes[i], 256, stream);
  }
  const mgm::pool_statistics s = pool.statistics();
  std::printf("  3 steps of %zu buffers: %llu allocations, %llu served from the cache, %llu needed new memory\n",
              sizes.size(), static_cast<unsigned long long>(s.allocations.total),
              static_cast<unsigned long long>(s.cache_hits), static_cast<unsigned long long>(s.cache_misses));
  std::printf("  reserved %s in %lld segments; allocated now %s, at the peak %s\n",
              mgm::format_bytes(static_cast<std::size_t>(s.reserved_bytes.current)).c_str(),
              static_cast<long long>(s.segments.current),
              mgm::format_bytes(static_cast<std::size_t>(s.allocated_bytes.current)).c_str(),
              mgm::format_bytes(static_cast<std::size_t>(s.allocated_bytes.peak)).c_str());

  // The cache stays reserved until released (or until an allocation would otherwise fail).
  std::printf("  release() gave %s back to the device\n", mgm::format_bytes(pool.release()).c_str());

  // More than the device holds: the pool first gives back what it caches, then says why it failed.
  void* held = pool.allocate_async(100 * MiB, 256, stream);
  try {
    void* p = pool.allocate_async(device_bytes, 256, stream);
    pool.deallocate_async(p, device_bytes, 256, stream);
  } catch (const mgm::out_of_memory& e) {
    std::printf("  asking for the whole device while 100 MiB is in use:\n    mgm::out_of_memory: %s\n", e.what());
  }
  pool.deallocate_async(held, 100 * MiB, 256, stream);
}

}  // namespace

int main() try {
  std::printf("A caching pool on a simulated 16 GiB GPU:\n");
  mgm::sim::machine m{mgm::sim::parse_device_list("1x16GiB")};
  const mgm::device_id gpu{0};
  {
    mgm::caching_pool pool{m.allocator(gpu)};
    tour(pool, m.create_stream(gpu), m.memory(gpu).total_bytes);
  }

  const int devices = mgm::device_count();
  if (devices == 0) {
    std::printf("\nNo GPU here: the same pool over cudaMalloc is skipped.\n");
    return 0;
  }
  std::printf("\nThe same pool over cudaMalloc on GPU 0:\n");
  cudaStream_t stream = nullptr;
  {
    const mgm::scoped_device on{gpu};
    MGM_CUDA_TRY(cudaStreamCreate(&stream));
  }
  {
    mgm::caching_pool pool{mgm::cuda_allocator{gpu}};
    tour(pool, stream, mgm::memory_info(gpu).total_bytes);
  }
  MGM_CUDA_TRY(cudaStreamDestroy(stream));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "mgm_example_basic_pool: %s\n", e.what());
  return 1;
}
