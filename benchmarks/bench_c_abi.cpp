// The C ABI's cost on a cache hit: mgm_alloc_async + mgm_free_async found with dlsym (as PyTorch
// and ctypes call them), against the same pool reached directly in the same run. Both on the
// simulator without its judge (MGM_C_SIM_JUDGE=off), so the ratio is what the C layer adds: its
// state check, the device check, the memory-fraction load, one virtual call, the PLT.
#include <mgm/pool/caching_pool.hpp>
#include <mgm/sim/judged.hpp>
#include <mgm/sim/machine.hpp>

#include <benchmark/benchmark.h>

#include <dlfcn.h>

#include <cstdlib>

namespace {

using alloc_fn = void* (*)(std::size_t, int, void*);
using free_fn = void (*)(void*, std::size_t, int, void*);

void bm_pool_direct(benchmark::State& state) {
  mgm::sim::machine m{mgm::sim::parse_device_list("8GiB"), {mgm::sim::oracle_mode::off}};
  mgm::caching_pool<mgm::sim::device_allocator> pool{m.allocator(mgm::device_id{0}), mgm::pool_options{}};
  mgm::sim::judged judged{m, pool};
  const auto bytes = static_cast<std::size_t>(state.range(0));
  judged.deallocate_async(judged.allocate_async(bytes, 256, {}), bytes, 256, {});
  for (auto _ : state) {
    void* p = judged.allocate_async(bytes, 256, {});
    benchmark::DoNotOptimize(p);
    judged.deallocate_async(p, bytes, 256, {});
  }
  state.SetItemsProcessed(state.iterations() * 2);
}
BENCHMARK(bm_pool_direct)->Name("hit_pair/pool")->Arg(4096)->Arg(1 << 20);

void bm_c_abi(benchmark::State& state) {
  ::setenv("MGM_C_SIM", "8GiB", 1);
  ::setenv("MGM_C_SIM_JUDGE", "off", 1);
  void* lib = dlopen(MGM_C_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    state.SkipWithError(dlerror());
    return;
  }
  const auto alloc = reinterpret_cast<alloc_fn>(dlsym(lib, "mgm_alloc_async"));
  const auto release = reinterpret_cast<free_fn>(dlsym(lib, "mgm_free_async"));
  const auto bytes = static_cast<std::size_t>(state.range(0));
  release(alloc(bytes, 0, nullptr), bytes, 0, nullptr);
  for (auto _ : state) {
    void* p = alloc(bytes, 0, nullptr);
    benchmark::DoNotOptimize(p);
    release(p, bytes, 0, nullptr);
  }
  state.SetItemsProcessed(state.iterations() * 2);
}
BENCHMARK(bm_c_abi)->Name("hit_pair/c_abi")->Arg(4096)->Arg(1 << 20);

}  // namespace
