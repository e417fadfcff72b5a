// Micro-benchmarks of the caching pool (over the simulated device's allocator, so they run
// anywhere; the upstream's cost is modelled, never slept):
// - an alloc + free pair on a cache hit, 256 B to 64 MiB, statistics on and off, and through
//   `sim::judged` with the judge enforcing and with it off (its cost when not asked for);
// - RMM's RANDOM_ALLOCATIONS grid: N allocations of random sizes up to a maximum, freed in random
//   order, through the pool and straight through the upstream ("direct");
// - 1 and 2 threads, each on a device of its own, wall time with CPU time beside it.
#include <mgm/pool/caching_pool.hpp>
#include <mgm/sim/judged.hpp>
#include <mgm/sim/machine.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

namespace {

using mgm::device_id;
constexpr std::size_t MiB = std::size_t{1} << 20;

template <bool Statistics>
void bm_pool_hit(benchmark::State& state) {
  mgm::sim::machine m{mgm::sim::parse_device_list("8GiB")};
  mgm::caching_pool<mgm::sim::device_allocator, Statistics> pool{m.allocator(device_id{0}), mgm::pool_options{}};
  const auto bytes = static_cast<std::size_t>(state.range(0));
  pool.deallocate(pool.allocate(bytes), bytes);  // warm: the block is cached
  for (auto _ : state) {
    void* p = pool.allocate(bytes);
    benchmark::DoNotOptimize(p);
    pool.deallocate(p, bytes);
  }
  state.SetItemsProcessed(state.iterations() * 2);  // events: one allocation and one free
}
BENCHMARK_TEMPLATE(bm_pool_hit, true)->Name("pool_hit_pair/stats")->RangeMultiplier(16)->Range(256, 64 << 20);
BENCHMARK_TEMPLATE(bm_pool_hit, false)->Name("pool_hit_pair/nostats")->RangeMultiplier(16)->Range(256, 64 << 20);

// The same pair through the judge (statistics on): every hand-out checked against the machine's
// record of uses, and with the machine's judge off (one load per call).
template <mgm::sim::oracle_mode Mode>
void bm_pool_hit_judged(benchmark::State& state) {
  mgm::sim::machine m{mgm::sim::parse_device_list("8GiB"), {Mode}};
  mgm::caching_pool<mgm::sim::device_allocator> pool{m.allocator(device_id{0}), mgm::pool_options{}};
  mgm::sim::judged judged{m, pool};
  const auto bytes = static_cast<std::size_t>(state.range(0));
  judged.deallocate(judged.allocate(bytes), bytes);
  for (auto _ : state) {
    void* p = judged.allocate(bytes);
    benchmark::DoNotOptimize(p);
    judged.deallocate(p, bytes);
  }
  state.SetItemsProcessed(state.iterations() * 2);
  if (!m.hazards().empty()) state.SkipWithError("the judge found a hazard");
}
BENCHMARK_TEMPLATE(bm_pool_hit_judged, mgm::sim::oracle_mode::enforce)->Name("pool_hit_pair/judged")->Arg(4096)->Arg(64 << 20);
BENCHMARK_TEMPLATE(bm_pool_hit_judged, mgm::sim::oracle_mode::off)->Name("pool_hit_pair/judge_off")->Arg(4096)->Arg(64 << 20);

// A hit pair with 200 live segments, with a release threshold below what they reserve (every
// free is "above the threshold") and without one: the threshold's cost per free (issue 14 asks
// for at most 1.5x).
template <bool Threshold>
void bm_pool_hit_segments(benchmark::State& state) {
  mgm::sim::machine m{mgm::sim::parse_device_list("8GiB")};
  mgm::pool_options o;
  o.expandable_segments = false;  // 200 plain segments
  if (Threshold) o.release_threshold_bytes = std::size_t{1} << 30;
  mgm::caching_pool<mgm::sim::device_allocator> pool{m.allocator(device_id{0}), o};
  std::vector<void*> live;
  for (int i = 0; i < 200; ++i) live.push_back(pool.allocate(12 * MiB));  // a segment each: 2.3 GiB
  void* keep = pool.allocate(4096);  // its small segment is never idle
  pool.deallocate(pool.allocate(4096), 4096);
  for (auto _ : state) {
    void* p = pool.allocate(4096);
    benchmark::DoNotOptimize(p);
    pool.deallocate(p, 4096);
  }
  state.SetItemsProcessed(state.iterations() * 2);
  pool.deallocate(keep, 4096);
  for (void* p : live) pool.deallocate(p, 12 * MiB);
}
BENCHMARK_TEMPLATE(bm_pool_hit_segments, true)->Name("pool_hit_pair/threshold_200_segments");
BENCHMARK_TEMPLATE(bm_pool_hit_segments, false)->Name("pool_hit_pair/200_segments");

// RMM's RANDOM_ALLOCATIONS_BENCH shape: allocate `count` blocks of uniform random size up to
// `max_mib` MiB, free them in random order; items are allocations + frees.
template <class Alloc>
void random_allocations(benchmark::State& state, Alloc& alloc) {
  const auto count = static_cast<std::size_t>(state.range(0));
  const auto max_bytes = static_cast<std::size_t>(state.range(1)) * MiB;
  std::mt19937_64 rng{42};
  std::vector<std::size_t> sizes(count);
  for (auto& s : sizes) s = 1 + rng() % max_bytes;
  std::vector<std::size_t> order(count);
  for (std::size_t i = 0; i < count; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<void*> ptrs(count);
  for (auto _ : state) {
    for (std::size_t i = 0; i < count; ++i) ptrs[i] = alloc.allocate(sizes[i], 256);
    for (const std::size_t i : order) alloc.deallocate(ptrs[i], sizes[i], 256);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(2 * count));
}

void bm_random_pool(benchmark::State& state) {
  mgm::sim::machine m{mgm::sim::parse_device_list("80GiB")};
  mgm::caching_pool<mgm::sim::device_allocator> pool{m.allocator(device_id{0}), mgm::pool_options{}};
  random_allocations(state, pool);
  state.counters["modelled_upstream_us_per_iteration"] =
      m.modelled(device_id{0}).total_seconds() * 1e6 / static_cast<double>(state.iterations());
}
void bm_random_direct(benchmark::State& state) {
  mgm::sim::machine m{mgm::sim::parse_device_list("80GiB")};
  auto direct = m.allocator(device_id{0});
  random_allocations(state, direct);
  state.counters["modelled_upstream_us_per_iteration"] =
      m.modelled(device_id{0}).total_seconds() * 1e6 / static_cast<double>(state.iterations());
}
// All blocks are live at once, so count x max / 2 must fit the simulated 80 GiB.
void random_grid(benchmark::internal::Benchmark* b) {
  for (const int count : {1000, 10000}) {
    for (const int max_mib : {1, 4}) b->Args({count, max_mib});
  }
  b->Args({1000, 64});
}
BENCHMARK(bm_random_pool)->Apply(random_grid)->Unit(benchmark::kMicrosecond);
BENCHMARK(bm_random_direct)->Apply(random_grid)->Unit(benchmark::kMicrosecond);

// Threads on separate devices: each thread a pool of its own, as a data-parallel job has.
struct per_device_pools {
  std::unique_ptr<mgm::sim::machine> m;
  std::vector<std::unique_ptr<mgm::caching_pool<mgm::sim::device_allocator>>> pools;
};
per_device_pools& shared_pools() {
  static per_device_pools p = [] {
    per_device_pools x;
    x.m = std::make_unique<mgm::sim::machine>(mgm::sim::machine::preset("dgx-h100"));
    for (int d = 0; d < 8; ++d) {
      x.pools.push_back(std::make_unique<mgm::caching_pool<mgm::sim::device_allocator>>(x.m->allocator(device_id{d}),
                                                                                         mgm::pool_options{}));
    }
    return x;
  }();
  return p;
}
// Thread i uses the pool of device `first + i` (the benchmark's argument). One thread is run on
// device 0 and on device 1 apart, and two threads on both: the two-thread figure is set against
// the pools it uses. Where each pool's records lie in the heap moves one thread's time by up to
// 30 % on this VM (3.2 to 4.2 us per pass between processes, the same build and work): measured
// against device 0 alone, the scaling was mostly where device 1's records happened to lie.
void bm_threads_separate_devices(benchmark::State& state) {
  const auto device = static_cast<std::size_t>(state.range(0) + state.thread_index());
  auto& pool = *shared_pools().pools[device];
  std::mt19937_64 rng{7};  // the same work in every thread: only the thread count differs
  std::vector<std::size_t> sizes(64);
  for (auto& s : sizes) s = 256 + rng() % (1 * MiB);
  std::vector<void*> ptrs(sizes.size());
  for (auto _ : state) {
    for (std::size_t i = 0; i < sizes.size(); ++i) ptrs[i] = pool.allocate(sizes[i]);
    for (std::size_t i = 0; i < sizes.size(); ++i) pool.deallocate(ptrs[i], sizes[i]);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(2 * sizes.size()));
}
BENCHMARK(bm_threads_separate_devices)->Arg(0)->Arg(1)->Threads(1)->UseRealTime();
BENCHMARK(bm_threads_separate_devices)->Arg(0)->Threads(2)->UseRealTime();

// The baseline for the thread scaling above: a loop that touches no shared memory at all (a
// 64-bit LCG and a shift per item, on the thread's own state). What two threads reach over one
// here is what this machine allows; the pools' scaling is reported against it (issue 17: at
// least 0.95 of it).
void bm_threads_compute(benchmark::State& state) {
  std::uint64_t x = 7 + static_cast<std::uint64_t>(state.thread_index());
  constexpr int items = 128;
  for (auto _ : state) {
    for (int i = 0; i < items; ++i) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      x ^= x >> 29;
    }
    benchmark::DoNotOptimize(x);
  }
  state.SetItemsProcessed(state.iterations() * items);
}
BENCHMARK(bm_threads_compute)->Threads(1)->Threads(2)->UseRealTime();

}  // namespace
