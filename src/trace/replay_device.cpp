// Replays on a real GPU: the same loop and the same do-nothing baseline as on the simulator,
// through the CUDA leaf allocators and the pool over cudaMalloc.
#include <mgm/allocators/cuda_allocator.hpp>
#include <mgm/allocators/cuda_async_allocator.hpp>
#include <mgm/device.hpp>
#include <mgm/error.hpp>
#include <mgm/pool/caching_pool.hpp>
#include <mgm/trace/replay.hpp>

#include "replay_target.hpp"

#include <cuda_runtime_api.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace mgm {
namespace {

using clock_type = std::chrono::steady_clock;

using detail::replay_target;

// The leaves time their own calls: all of it is the driver's (cudaMalloc / cudaMallocAsync).
class device_target : public replay_target {
 public:
  std::chrono::nanoseconds upstream_time{0};
};

template <class A>
class leaf_target final : public device_target {
 public:
  explicit leaf_target(A a) : a_{std::move(a)} {}
  void* allocate(std::size_t bytes, stream_ref s) override {
    const auto t0 = clock_type::now();
    void* p = a_.allocate_async(bytes, 256, s);
    upstream_time += clock_type::now() - t0;
    return p;
  }
  void deallocate(void* p, std::size_t bytes, stream_ref s) noexcept override {
    const auto t0 = clock_type::now();
    a_.deallocate_async(p, bytes, 256, s);
    upstream_time += clock_type::now() - t0;
  }

 private:
  A a_;
};

class pool_target final : public device_target {
 public:
  pool_target(device_id d, const pool_options& o) : pool_{cuda_allocator{d}, o} {}
  void* allocate(std::size_t bytes, stream_ref s) override { return pool_.allocate_async(bytes, 256, s); }
  void deallocate(void* p, std::size_t bytes, stream_ref s) noexcept override { pool_.deallocate_async(p, bytes, 256, s); }
  [[nodiscard]] pool_statistics statistics() const { return pool_.statistics(); }

 private:
  caching_pool<cuda_allocator> pool_;
};

std::chrono::nanoseconds run_on_device(const compiled_trace& t, replay_target& target, const std::vector<stream_ref>& streams,
                             int iterations, const std::function<void()>& after_first) {
  const auto elapsed = detail::replay_ops(t, target, streams, iterations, after_first);
  const auto t0 = clock_type::now();
  MGM_CUDA_TRY(cudaDeviceSynchronize());  // the work the replay enqueued belongs to it
  return elapsed + (clock_type::now() - t0);
}

}  // namespace

replay_result replay_on_device(const compiled_trace& t, std::string_view allocator, const replay_options& o,
                               device_id device) {
  MGM_EXPECTS(o.iterations >= 1, "a replay needs at least one iteration");
  MGM_EXPECTS(allocator == "pool" || allocator == "direct" || allocator == "async" || allocator == "cub",
              "unknown allocator '" + std::string{allocator} + "' for a replay on a GPU; the allocators are pool, "
              "direct, async, cub");
  if (device_count() == 0) throw cuda_error{cudaErrorNoDevice, "replay_on_device: no CUDA device or driver here"};
  const scoped_device on{device};
  std::vector<cudaStream_t> owned;
  std::vector<stream_ref> streams;
  for (const auto s : t.streams) {
    if (s == 0) {
      streams.emplace_back();
    } else {
      cudaStream_t made{};
      MGM_CUDA_TRY(cudaStreamCreateWithFlags(&made, cudaStreamNonBlocking));
      owned.push_back(made);
      streams.emplace_back(made);
    }
  }
  replay_result r;
  r.trace = t.name;
  r.allocator = std::string{allocator};
  r.device = device.value();
  r.iterations = o.iterations;
  r.events = t.ops.size();
  r.peak_live_bytes = t.peak_live_bytes;
  try {
    const auto null = detail::make_null_target();
    const auto baseline = run_on_device(t, *null, streams, o.iterations, [] {});
    detail::upstream_counters cub;  // before the target, which writes to it until destroyed
    std::unique_ptr<replay_target> target;
    if (allocator == "pool") target = std::make_unique<pool_target>(device, o.pool);
    if (allocator == "direct") target = std::make_unique<leaf_target<cuda_allocator>>(cuda_allocator{device});
    if (allocator == "async") target = std::make_unique<leaf_target<cuda_async_allocator>>(cuda_async_allocator{device});
    if (allocator == "cub") target = detail::make_cub_device_target(device, cub);
    auto* pool = dynamic_cast<pool_target*>(target.get());
    std::uint64_t first_calls = 0;
    const auto elapsed = run_on_device(t, *target, streams, o.iterations, [&] {
      if (pool != nullptr) {
        const auto st = pool->statistics();
        first_calls = st.upstream_allocations + st.upstream_frees;
      }
      first_calls += cub.mallocs + cub.frees;
    });
    const double events = static_cast<double>(r.events) * o.iterations;
    detail::set_host_times(r, elapsed, baseline, events);
    if (pool != nullptr) {
      const auto st = pool->statistics();
      r.upstream_allocations = st.upstream_allocations;
      r.upstream_frees = st.upstream_frees;
      r.upstream_calls_after_first_iteration = st.upstream_allocations + st.upstream_frees - first_calls;
      r.peak_reserved_bytes = static_cast<std::size_t>(st.reserved_bytes.peak);
    } else if (allocator == "cub") {
      // CUB frees its cached blocks at teardown, after these figures: not counted, as on the simulator.
      r.upstream_allocations = cub.mallocs;
      r.upstream_frees = cub.frees;
      r.upstream_calls_after_first_iteration = cub.mallocs + cub.frees - first_calls;
      r.measured_upstream_seconds = std::chrono::duration<double>(cub.time).count();
      r.peak_reserved_bytes = cub.peak_bytes;
    } else {
      r.upstream_allocations = t.allocations * static_cast<std::size_t>(o.iterations);
      r.upstream_frees = r.upstream_allocations;
      r.upstream_calls_after_first_iteration = 2 * t.allocations * static_cast<std::size_t>(o.iterations - 1);
      r.measured_upstream_seconds =
          std::chrono::duration<double>(static_cast<device_target&>(*target).upstream_time).count();
      r.peak_reserved_bytes = t.peak_live_bytes;  // what the driver was asked for at the peak
    }
    r.reserved_over_live =
        r.peak_live_bytes == 0 ? 0.0 : static_cast<double>(r.peak_reserved_bytes) / static_cast<double>(r.peak_live_bytes);
  } catch (...) {
    for (auto s : owned) (void)cudaStreamDestroy(s);
    throw;
  }
  for (auto s : owned) (void)cudaStreamDestroy(s);
  return r;
}

}  // namespace mgm
