// Host time of one allocate + deallocate through the leaf allocators that run without a GPU:
// the simulator's cudaMalloc stand-in (the upstream every pool benchmark is measured over) and
// aligned operator new. Later issues add the pool and the replay benchmarks beside these.
#include <mgm/allocators/host_allocator.hpp>
#include <mgm/sim/machine.hpp>

#include <benchmark/benchmark.h>

namespace {

void bm_sim_allocate_free(benchmark::State& state) {
  auto m = mgm::sim::machine::preset("dgx-h100");
  auto a = m.allocator(mgm::device_id{0});
  const auto bytes = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* p = a.allocate(bytes);
    benchmark::DoNotOptimize(p);
    a.deallocate(p, bytes);
  }
  state.SetLabel("modelled cudaMalloc+cudaFree: 108 us per iteration");
}
BENCHMARK(bm_sim_allocate_free)->Arg(256)->Arg(1 << 20)->Arg(64 << 20);

void bm_host_allocate_free(benchmark::State& state) {
  mgm::host_allocator a;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* p = a.allocate(bytes, 256);
    benchmark::DoNotOptimize(p);
    a.deallocate(p, bytes, 256);
  }
}
BENCHMARK(bm_host_allocate_free)->Arg(256)->Arg(1 << 20);

}  // namespace

BENCHMARK_MAIN();
