// Thrust allocators and the CUB temp-storage helper over a simulated pool, from plain C++: what
// can be checked without a GPU (the kernels themselves run in examples/thrust_pool.cu and
// examples/cub_sort.cu). Also the NVTX hooks, which are no-ops here unless built with MGM_NVTX=ON
// and a tool is attached.
#include "pool_test_support.hpp"

#include <mgm/allocator_ref.hpp>
#include <mgm/interop/cub_temp_storage.hpp>
#include <mgm/interop/thrust_allocator.hpp>
#include <mgm/pool/caching_pool.hpp>
#include <mgm/pool/detail/nvtx.hpp>
#include <mgm/sim/machine.hpp>

#include <catch2/catch.hpp>

#include <thrust/detail/allocator/allocator_traits.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <vector>

using mgm::device_id;

using namespace pool_test;

namespace {

struct sim_setup {
  mgm::sim::machine m{mgm::sim::parse_device_list("2x64MiB")};
  sim_pool pool{m.allocator(device_id{0}), plain()};
  mgm::stream_ref s = m.create_stream(device_id{0});
  std::int64_t allocated() const { return pool.statistics().allocated_bytes.current; }
  std::uint64_t allocations_total() const { return pool.statistics().allocations.total; }
};

// One call of the fake CUB function: the pointer and size it was given.
struct seen_call {
  void* temp;
  std::size_t bytes;
};

}  // namespace

// ---- thrust_allocator ----------------------------------------------------------------------------

static_assert(std::is_same_v<mgm::thrust_allocator<float>::pointer, thrust::device_ptr<float>>);
static_assert(std::is_same_v<mgm::thrust_allocator<float>::value_type, float>);
static_assert(std::is_same_v<mgm::thrust_allocator<float>::rebind<int>::other, mgm::thrust_allocator<int>>);
static_assert(std::is_same_v<std::allocator_traits<mgm::thrust_allocator<float>>::rebind_alloc<double>,
                             mgm::thrust_allocator<double>>);
static_assert(std::is_same_v<thrust::detail::allocator_traits<mgm::thrust_allocator<float>>::rebind_alloc<int>,
                             mgm::thrust_allocator<int>>);
static_assert(std::is_nothrow_copy_constructible_v<mgm::thrust_allocator<float>>);
static_assert(!std::is_default_constructible_v<mgm::thrust_allocator<float>>);  // a pool is required
static_assert(std::is_same_v<mgm::thrust_temporary_allocator::value_type, char>);

TEST_CASE("thrust_allocator: allocate and deallocate through a simulated pool on its stream", "[interop]") {
  sim_setup t;
  mgm::thrust_allocator<float> a{t.pool, t.s};
  REQUIRE(a.stream() == t.s);
  const thrust::device_ptr<float> p = a.allocate(1000);
  float* raw = thrust::raw_pointer_cast(p);
  REQUIRE(raw != nullptr);
  REQUIRE(t.m.owner_of(raw) == device_id{0});
  REQUIRE(reinterpret_cast<std::uintptr_t>(raw) % 256 == 0);
  std::memset(raw, 0, 1000 * sizeof(float));  // sim memory is real host memory
  REQUIRE(t.pool.statistics().requested_bytes.current == 4000);
  REQUIRE(t.allocated() == 4096);  // rounded to 256
  // The block belongs to the allocator's stream: the snapshot names it.
  bool found = false;
  for (const auto& seg : t.pool.snapshot().segments) {
    for (const auto& b : seg.blocks) {
      if (b.address == reinterpret_cast<std::uintptr_t>(raw)) {
        found = true;
        REQUIRE(b.stream == t.s.id());
      }
    }
  }
  REQUIRE(found);
  a.deallocate(p, 1000);
  REQUIRE(t.allocated() == 0);
  REQUIRE(t.pool.statistics().requested_bytes.current == 0);
  // A second allocation of the same size is a cache hit: no new upstream allocation.
  const auto upstream = t.pool.statistics().upstream_allocations;
  a.deallocate(a.allocate(1000), 1000);
  REQUIRE(t.pool.statistics().upstream_allocations == upstream);
  REQUIRE(t.pool.statistics().cache_hits == 1);
}

TEST_CASE("thrust_allocator: rebinding keeps the pool and the stream, equality is the pool's", "[interop]") {
  sim_setup t;
  sim_pool other{t.m.allocator(device_id{1}), plain()};
  const mgm::thrust_allocator<float> f{t.pool, t.s};
  const mgm::thrust_allocator<double> d{f};  // rebinding
  REQUIRE(d.stream() == t.s);
  REQUIRE(d.pool() == f.pool());
  REQUIRE(d.pool() == static_cast<const void*>(&t.pool));
  REQUIRE(f == d);
  REQUIRE(d == f);
  // Another stream, the same pool: memory from one can be freed through the other.
  const mgm::thrust_allocator<float> f2{t.pool, t.m.create_stream(device_id{0})};
  REQUIRE(f == f2);
  REQUIRE_FALSE(f.stream() == f2.stream());
  // Another pool: not equal.
  const mgm::thrust_allocator<float> g{other, t.s};
  REQUIRE_FALSE(f == g);
  REQUIRE(f != g);
  // Through an allocator_ref (an lvalue or a temporary): the pool it refers to, not the ref.
  mgm::allocator_ref<sim_pool> ref{t.pool};
  const mgm::thrust_allocator<float> via_ref{ref, t.s};
  const mgm::thrust_allocator<float> via_temp_ref{mgm::allocator_ref<sim_pool>{t.pool}, t.s};
  REQUIRE(via_ref == f);
  REQUIRE(via_temp_ref == f);
  // Rebound allocators free each other's memory: the same pool.
  mgm::thrust_allocator<double> dd{f};
  auto p = dd.allocate(10);
  REQUIRE(t.allocated() == 256);
  mgm::thrust_allocator<double>{mgm::thrust_allocator<char>{f}}.deallocate(p, 10);
  REQUIRE(t.allocated() == 0);
}

TEST_CASE("thrust_allocator over a leaf allocator, and the pool's errors", "[interop]") {
  sim_setup t;
  auto leaf = t.m.allocator(device_id{1});
  mgm::thrust_allocator<int> a{leaf, t.m.create_stream(device_id{1})};
  auto p = a.allocate(1024);
  REQUIRE(t.m.memory(device_id{1}).used_bytes == 4096);
  a.deallocate(p, 1024);
  REQUIRE(t.m.memory(device_id{1}).used_bytes == 0);

  mgm::thrust_allocator<int> pooled{t.pool, t.s};
  REQUIRE_THROWS_AS(pooled.allocate(std::size_t{65} * MiB / sizeof(int)), mgm::out_of_memory);  // a 64 MiB device
  REQUIRE_THROWS_AS(pooled.allocate(pooled.max_size() + 1), std::bad_alloc);
  REQUIRE(t.allocated() == 0);
  // An over-aligned type is refused by the pool, with a clear error, not misaligned memory.
  struct alignas(512) wide {
    char bytes[512];
  };
  mgm::thrust_allocator<wide> w{t.pool, t.s};
  REQUIRE_THROWS_AS(w.allocate(1), mgm::logic_error);
}

TEST_CASE("thrust_temporary_allocator: scratch from the pool on its stream", "[interop]") {
  sim_setup t;
  mgm::thrust_temporary_allocator a{t.pool, t.s};
  char* p = a.allocate(1000);
  REQUIRE(p != nullptr);
  REQUIRE(t.m.owner_of(p) == device_id{0});
  REQUIRE(t.allocated() == 1024);
  a.deallocate(p, 1000);
  REQUIRE(t.allocated() == 0);
  REQUIRE_THROWS_AS(a.allocate(-1), mgm::logic_error);
  REQUIRE(t.allocations_total() == 1);
  const mgm::thrust_temporary_allocator b{mgm::allocator_ref<sim_pool>{t.pool}};
  REQUIRE(a == b);
  REQUIRE(b.stream() == mgm::stream_ref{});
  sim_pool other{t.m.allocator(device_id{1}), plain()};
  REQUIRE_FALSE(a == mgm::thrust_temporary_allocator{other, t.s});
}

// ---- cub_with_temp_storage -----------------------------------------------------------------------

TEST_CASE("cub_with_temp_storage: sizes, runs with a pooled block, frees it on the stream", "[interop]") {
  sim_setup t;
  std::vector<seen_call> calls;
  std::int64_t allocated_during = -1;
  const cudaError_t e = mgm::cub_with_temp_storage(t.pool, t.s, [&](void* temp, std::size_t& bytes) {
    calls.push_back({temp, bytes});
    if (temp == nullptr) {
      bytes = 12345;
    } else {
      std::memset(temp, 0xA5, bytes);  // the whole block is usable
      allocated_during = t.allocated();
    }
    return cudaSuccess;
  });
  REQUIRE(e == cudaSuccess);
  REQUIRE(calls.size() == 2);
  REQUIRE(calls[0].temp == nullptr);
  REQUIRE(calls[0].bytes == 0);
  REQUIRE(calls[1].temp != nullptr);
  REQUIRE(calls[1].bytes == 12345);
  REQUIRE(t.m.owner_of(calls[1].temp) == device_id{0});
  REQUIRE(reinterpret_cast<std::uintptr_t>(calls[1].temp) % 256 == 0);
  REQUIRE(allocated_during == 12544);  // 12345 rounded to 256
  REQUIRE(t.allocated() == 0);
  REQUIRE(t.allocations_total() == 1);
  // Freed on the call's stream: the free block is cached by that stream.
  bool found = false;
  for (const auto& seg : t.pool.snapshot().segments) {
    for (const auto& b : seg.blocks) {
      if (b.address == reinterpret_cast<std::uintptr_t>(calls[1].temp)) {
        found = true;
        REQUIRE(b.state == mgm::block_snapshot::state_type::free);
        REQUIRE(b.stream == t.s.id());
      }
    }
  }
  REQUIRE(found);
}

TEST_CASE("cub_with_temp_storage: errors and exceptions free the block", "[interop]") {
  sim_setup t;
  SECTION("the sizing call fails: its error, and nothing allocated") {
    int n = 0;
    const cudaError_t e = mgm::cub_with_temp_storage(t.pool, t.s, [&](void*, std::size_t&) {
      ++n;
      return cudaErrorInvalidValue;
    });
    REQUIRE(e == cudaErrorInvalidValue);
    REQUIRE(n == 1);
    REQUIRE(t.allocations_total() == 0);
  }
  SECTION("the second call fails: its error, and the block freed") {
    void* seen = nullptr;
    const cudaError_t e = mgm::cub_with_temp_storage(t.pool, t.s, [&](void* temp, std::size_t& bytes) {
      if (temp == nullptr) {
        bytes = 4096;
        return cudaSuccess;
      }
      seen = temp;
      return cudaErrorLaunchFailure;
    });
    REQUIRE(e == cudaErrorLaunchFailure);
    REQUIRE(seen != nullptr);
    REQUIRE(t.allocations_total() == 1);
    REQUIRE(t.allocated() == 0);
  }
  SECTION("the second call throws: the exception, and the block freed") {
    REQUIRE_THROWS_WITH(mgm::cub_with_temp_storage(t.pool, t.s,
                                                   [&](void* temp, std::size_t& bytes) {
                                                     if (temp == nullptr) {
                                                       bytes = 4096;
                                                       return cudaSuccess;
                                                     }
                                                     throw std::runtime_error{"kernel launch refused"};
                                                   }),
                        "kernel launch refused");
    REQUIRE(t.allocations_total() == 1);
    REQUIRE(t.allocated() == 0);
  }
  SECTION("more than the device holds: out_of_memory, the second call never made") {
    int n = 0;
    REQUIRE_THROWS_AS(mgm::cub_with_temp_storage(t.pool, t.s,
                                                 [&](void*, std::size_t& bytes) {
                                                   ++n;
                                                   bytes = 128 * MiB;
                                                   return cudaSuccess;
                                                 }),
                      mgm::out_of_memory);
    REQUIRE(n == 1);
    REQUIRE(t.allocated() == 0);
  }
  SECTION("zero bytes: still a real block, since CUB reads null as 'size only'") {
    void* seen = nullptr;
    const cudaError_t e = mgm::cub_with_temp_storage(t.pool, t.s, [&](void* temp, std::size_t& bytes) {
      if (temp != nullptr) {
        seen = temp;
        REQUIRE(bytes == 0);
      }
      return cudaSuccess;
    });
    REQUIRE(e == cudaSuccess);
    REQUIRE(seen != nullptr);
    REQUIRE(t.allocated() == 0);
  }
}

TEST_CASE("cub_with_temp_storage through an allocator_ref reuses the pool's cache", "[interop]") {
  sim_setup t;
  mgm::allocator_ref<sim_pool> ref{t.pool};
  auto sized = [](void* temp, std::size_t& bytes) {
    if (temp == nullptr) bytes = 3 * MiB;
    return cudaSuccess;
  };
  for (int i = 0; i < 5; ++i) REQUIRE(mgm::cub_with_temp_storage(ref, t.s, sized) == cudaSuccess);
  const auto st = t.pool.statistics();
  REQUIRE(st.allocations.total == 5);
  REQUIRE(st.upstream_allocations == 1);  // one segment, then cache hits on the same stream
  REQUIRE(st.cache_hits == 4);
  REQUIRE(st.allocated_bytes.current == 0);
}

// ---- NVTX hooks ------------------------------------------------------------------------------------

TEST_CASE("the pool's NVTX hooks are harmless without a tool", "[interop][nvtx]") {
  // Built with MGM_NVTX=ON the hooks call NVTX, which finds no tool (no NVTX_INJECTION64_PATH)
  // and returns at once; without it they are empty. Either way the pool behaves the same: the
  // same segments, hits and contents as the pool's own accounting says.
  INFO("NVTX annotations compiled in: " << mgm::detail::nvtx::enabled);
  sim_setup t;
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) {
    void* p = t.pool.allocate_async(MiB + static_cast<std::size_t>(i) * 4096, 256, t.s);
    std::memset(p, 0x40 + i, MiB);
    blocks.push_back(p);
  }
  for (int i = 0; i < 8; ++i) {
    const auto* c = static_cast<const unsigned char*>(blocks[static_cast<std::size_t>(i)]);
    REQUIRE(c[0] == 0x40 + i);
    REQUIRE(c[MiB - 1] == 0x40 + i);
  }
  const auto live = t.pool.statistics();
  REQUIRE(live.allocations.total == 8);
  REQUIRE(live.allocated_bytes.current >= static_cast<std::int64_t>(8 * MiB));
  for (int i = 0; i < 8; ++i) t.pool.deallocate_async(blocks[static_cast<std::size_t>(i)], MiB + static_cast<std::size_t>(i) * 4096, 256, t.s);
  // The same sizes again on the same stream are served from the cache: no new segment.
  for (int i = 0; i < 8; ++i) blocks[static_cast<std::size_t>(i)] = t.pool.allocate_async(MiB + static_cast<std::size_t>(i) * 4096, 256, t.s);
  const auto again = t.pool.statistics();
  REQUIRE(again.upstream_allocations == live.upstream_allocations);
  REQUIRE(again.cache_hits == live.cache_hits + 8);
  for (int i = 0; i < 8; ++i) t.pool.deallocate_async(blocks[static_cast<std::size_t>(i)], MiB + static_cast<std::size_t>(i) * 4096, 256, t.s);
  REQUIRE(t.pool.release() > 0);
  REQUIRE(t.pool.reserved_bytes() == 0);
  // The hooks themselves neither read nor write the memory they describe.
  int x[4]{1, 2, 3, 4};
  mgm::detail::nvtx::register_heap(x, sizeof x);
  mgm::detail::nvtx::register_region(x, sizeof(int));
  mgm::detail::nvtx::unregister_region(x);
  mgm::detail::nvtx::unregister_heap(x);
  REQUIRE(x[0] == 1);
  REQUIRE(x[3] == 4);
  REQUIRE(t.m.memory(device_id{0}).used_bytes == 0);
  REQUIRE(t.m.hazards().empty());
}
