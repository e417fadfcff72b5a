// Delayed coalescing (issue 17, the hit path): a small block of a plain segment freed on its own
// stream waits on its slot's deferred list instead of merging, so that the next request of its
// size takes it whole. The merges must still happen where they matter: before a small request
// leaves the hit path, when the list is full, before memory is given back, before the pool is
// observed; and a merged block must carry the later free's epoch, or another stream could take
// it before the work that used its upper half.
#include "pool_test_support.hpp"

#include <mgm/pool/caching_pool.hpp>
#include <mgm/sim/judged.hpp>
#include <mgm/sim/machine.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <vector>

using mgm::device_id;
using namespace std::chrono_literals;

using namespace pool_test;

TEST_CASE("pool: a small block freed beside free memory is found again, observers see it merged", "[pool][deferred]") {
  judged_pool j;
  const auto s = j.m.create_stream(device_id{0});
  void* a = j.pool.allocate_async(4 * KiB, 256, s);
  void* b = j.pool.allocate_async(4 * KiB, 256, s);
  REQUIRE(static_cast<char*>(b) == static_cast<char*>(a) + 4 * KiB);
  j.pool.deallocate_async(b, 4 * KiB, 256, s);
  j.raw.check_invariants();  // b sits unmerged beside the segment's free rest: allowed, it is on the list
  void* again = j.pool.allocate_async(4 * KiB, 256, s);
  REQUIRE(again == b);
  j.pool.deallocate_async(again, 4 * KiB, 256, s);
  // Statistics and snapshots show b merged with the rest: a, and one free block of 2 MiB - 4 KiB.
  auto st = j.raw.statistics();
  REQUIRE(st.inactive_split_bytes.current == static_cast<std::int64_t>(2 * MiB - 4 * KiB));
  auto snap = j.raw.snapshot();
  REQUIRE(snap.segments.size() == 1);
  REQUIRE(snap.segments[0].blocks.size() == 2);
  REQUIRE(snap.segments[0].blocks[1].size == 2 * MiB - 4 * KiB);
  j.pool.deallocate_async(a, 4 * KiB, 256, s);
  j.raw.check_invariants();
  // Nothing used: one whole free segment, no split bytes, all of it given back.
  st = j.raw.statistics();
  REQUIRE(st.inactive_split_bytes.current == 0);
  REQUIRE(st.upstream_allocations == 1);
  snap = j.raw.snapshot();
  REQUIRE(snap.segments.size() == 1);
  REQUIRE(snap.segments[0].blocks.size() == 1);
  REQUIRE(j.raw.release() == 2 * MiB);
  j.require_no_hazard();
}

TEST_CASE("pool: deferred merges are done before a small request goes upstream", "[pool][deferred]") {
  judged_pool j;
  const auto s = j.m.create_stream(device_id{0});
  std::array<void*, 8> k{};
  for (auto& p : k) p = j.pool.allocate_async(256 * KiB, 256, s);  // 8 x 256 KiB: one full 2 MiB segment
  REQUIRE(j.raw.statistics().upstream_allocations == 1);
  for (void* p : k) j.pool.deallocate_async(p, 256 * KiB, 256, s);  // eight unmerged blocks
  j.raw.check_invariants();
  // No 1 MiB block is free until the merges are done: the miss does them, and needs no new segment.
  void* big = j.pool.allocate_async(1 * MiB, 256, s);
  REQUIRE(big == k[0]);
  REQUIRE(j.raw.statistics().upstream_allocations == 1);
  j.raw.check_invariants();
  j.pool.deallocate_async(big, 1 * MiB, 256, s);
  j.require_no_hazard();
}

TEST_CASE("pool: a full deferred list is merged, and release gives back what it held apart", "[pool][deferred]") {
  judged_pool j;
  const auto s = j.m.create_stream(device_id{0});
  std::vector<void*> blocks;
  for (int i = 0; i < 200; ++i) blocks.push_back(j.pool.allocate_async(8 * KiB, 256, s));  // 1.6 MiB of one segment
  REQUIRE(j.raw.statistics().upstream_allocations == 1);
  for (std::size_t i = 0; i < blocks.size(); i += 2) j.pool.deallocate_async(blocks[i], 8 * KiB, 256, s);
  j.raw.check_invariants();  // 100 frees: the list (64) was merged when full, then filled again
  for (std::size_t i = 1; i < blocks.size(); i += 2) {
    j.pool.deallocate_async(blocks[i], 8 * KiB, 256, s);
    j.raw.check_invariants();
  }
  // Nothing allocated: release merges what waits and gives the whole segment back.
  REQUIRE(j.raw.release() == 2 * MiB);
  REQUIRE(j.raw.reserved_bytes() == 0);
  j.require_no_hazard();
}

// Two neighbours freed on S, with another stream's event on S recorded between the frees. When
// they merge, the block must carry the later free's epoch: an event covering only the earlier
// free would let T take the block while S's kernel still uses its other half. Both orders of
// the frees (the list merges them in order: the later free is the block above or below).
TEST_CASE("pool: a deferred merge keeps the later free's epoch for other streams", "[pool][deferred][hazard]") {
  for (const bool lower_first : {true, false}) {
    INFO((lower_first ? "the lower block freed first" : "the upper block freed first"));
    judged_pool j;
    const device_id d{0};
    const auto s = j.m.create_stream(d);
    const auto t = j.m.create_stream(d);
    std::array<void*, 8> k{};
    for (auto& p : k) p = j.pool.allocate_async(256 * KiB, 256, s);  // one full segment
    void* big = j.pool.allocate_async(4 * MiB, 256, s);
    void* first = lower_first ? k[0] : k[1];
    void* second = lower_first ? k[1] : k[0];
    j.pool.deallocate_async(first, 256 * KiB, 256, s);  // deferred
    j.pool.deallocate_async(big, 4 * MiB, 256, s);
    void* big_on_t = j.pool.allocate_async(4 * MiB, 256, t);  // taken from S: an event on S, covering both frees
    REQUIRE(big_on_t == big);
    j.m.enqueue(s, 1ms);  // S's kernel uses `second`
    j.pool.deallocate_async(second, 256 * KiB, 256, s);  // deferred too
    // T's miss merges S's deferred blocks, then takes the merged 512 KiB from S: T must wait for
    // an event that covers the second free, recorded after the kernel.
    void* merged = j.pool.allocate_async(512 * KiB, 256, t);
    REQUIRE(merged == k[0]);
    auto ops = j.m.streams();
    auto after = ops.create_event(d);
    ops.record(after, t);
    REQUIRE_FALSE(ops.query(after));  // T runs after S's 1 ms kernel
    j.m.synchronize(d);
    ops.destroy_event(after);
    j.pool.deallocate_async(merged, 512 * KiB, 256, t);
    j.pool.deallocate_async(big_on_t, 4 * MiB, 256, t);
    for (std::size_t i = 2; i < k.size(); ++i) j.pool.deallocate_async(k[i], 256 * KiB, 256, s);
    j.raw.check_invariants();
    j.require_no_hazard();
  }
}
