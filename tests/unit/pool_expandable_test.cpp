// The caching pool's expandable segments over the simulated machine's virtual memory: mapped
// memory within the device, release, stream-ordered unmapping, peer access and growth.
#include "pool_test_support.hpp"
#include "sizes.hpp"

#include <mgm/pool/caching_pool.hpp>
#include <mgm/pool/detail/mapping_policy.hpp>
#include <mgm/sim/judged.hpp>
#include <mgm/sim/machine.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

using mgm::device_id;
using namespace std::chrono_literals;

namespace {
using sim_pool = mgm::caching_pool<mgm::sim::device_allocator>;
// The large range's policy alone: requests of 512 MiB and more would grow the huge range.
mgm::pool_options large_range_only() { return mgm::pool_options::parse("huge_request:unlimited"); }
}  // namespace

// ---- expandable segments (requests of large_direct_bytes and more, by default) ----------------

TEST_CASE("expandable: mapped memory never exceeds the device", "[pool][expandable]") {
  mgm::sim::machine m{mgm::sim::parse_device_list("64MiB")};
  sim_pool raw_pool{m.allocator(device_id{0}), mgm::pool_options{}};
  mgm::sim::judged pool{m, raw_pool};
  REQUIRE(pool->expandable());
  auto vmm = m.vmm();
  std::vector<void*> blocks;
  try {
    while (true) {
      blocks.push_back(pool.allocate(12 * MiB));
      REQUIRE(vmm.mapped_bytes(device_id{0}) <= 64 * MiB);
      REQUIRE(m.memory(device_id{0}).used_bytes <= 64 * MiB);
    }
  } catch (const mgm::out_of_memory& e) {
    REQUIRE(std::string{e.what()}.find("out of memory allocating 12.00 MiB") != std::string::npos);
  }
  REQUIRE(blocks.size() == 5);  // 5 x 12 MiB in 60 MiB of granules; a sixth would need 72
  REQUIRE(pool->reserved_bytes() == 60 * MiB);
  for (void* p : blocks) pool.deallocate(p, 12 * MiB);
}

TEST_CASE("expandable: release unmaps every idle granule, and live blocks never move", "[pool][expandable]") {
  mgm::sim::machine m{mgm::sim::parse_device_list("1GiB")};
  sim_pool raw_pool{m.allocator(device_id{0}), mgm::pool_options{}};
  mgm::sim::judged pool{m, raw_pool};
  auto vmm = m.vmm();
  std::vector<void*> blocks;
  for (int i = 0; i < 6; ++i) {
    blocks.push_back(pool.allocate(11 * MiB));
    std::memset(blocks.back(), i + 1, 11 * MiB);
  }
  // Contiguous in one range: each block starts where the previous ended.
  for (int i = 1; i < 6; ++i) REQUIRE(static_cast<char*>(blocks[i]) == static_cast<char*>(blocks[i - 1]) + 11 * MiB);
  // The 66 MiB, and what the growths mapped ahead: at most 1/32 of the mapped bytes stay free.
  const std::size_t grown = vmm.mapped_bytes(device_id{0});
  REQUIRE(grown >= 66 * MiB);
  REQUIRE((grown - 66 * MiB) * 32 <= grown);
  for (int i = 1; i < 6; i += 2) pool.deallocate(blocks[static_cast<std::size_t>(i)], 11 * MiB);
  pool->release();
  // What stays mapped: the live blocks and the granules they share with a freed neighbour.
  const std::size_t mapped = vmm.mapped_bytes(device_id{0});
  REQUIRE(mapped < grown);
  REQUIRE(mapped <= 3 * 14 * MiB);
  for (int i = 0; i < 6; i += 2) {  // live blocks kept their place and their contents
    const auto* p = static_cast<const unsigned char*>(blocks[static_cast<std::size_t>(i)]);
    REQUIRE(p[0] == i + 1);
    REQUIRE(p[11 * MiB - 1] == i + 1);
  }
  const auto snap = pool->snapshot();
  REQUIRE(snap.bytes_in(mgm::block_snapshot::state_type::unmapped) > 0);
  void* again = pool.allocate(11 * MiB);  // maps granules again where needed
  std::memset(again, 9, 11 * MiB);
  pool.deallocate(again, 11 * MiB);
  for (int i = 0; i < 6; i += 2) pool.deallocate(blocks[static_cast<std::size_t>(i)], 11 * MiB);
  pool->release();
  REQUIRE(vmm.mapped_bytes(device_id{0}) == 0);  // every idle granule unmapped
  REQUIRE(m.memory(device_id{0}).used_bytes == 0);
  REQUIRE(pool->reserved_bytes() == 0);
}

TEST_CASE("expandable: unmapping waits for the stream that freed the block", "[pool][expandable]") {
  mgm::sim::machine m{mgm::sim::parse_device_list("1GiB")};
  sim_pool raw_pool{m.allocator(device_id{0}), mgm::pool_options{}};
  mgm::sim::judged pool{m, raw_pool};
  const auto s = m.create_stream(device_id{0});
  void* p = pool.allocate_async(16 * MiB, 256, s);
  m.enqueue(s, std::chrono::microseconds{500});  // a kernel still uses p
  pool.deallocate_async(p, 16 * MiB, 256, s);
  pool->release();
  REQUIRE(m.now(device_id{0}) == std::chrono::microseconds{500});  // the host waited before unmapping
  REQUIRE(m.vmm().mapped_bytes(device_id{0}) == 0);
}

TEST_CASE("expandable: peers get access to every granule, now and later", "[pool][expandable]") {
  auto m = mgm::sim::machine::preset("dgx1-v100");
  sim_pool raw_pool{m.allocator(device_id{0}), mgm::pool_options{}};
  mgm::sim::judged pool{m, raw_pool};
  auto vmm = m.vmm();
  void* before = pool.allocate(12 * MiB);
  REQUIRE(vmm.access(before) == std::vector<device_id>{device_id{0}});
  pool->grant_access(device_id{3});  // an NV2 peer
  REQUIRE(vmm.access(before) == std::vector<device_id>{device_id{0}, device_id{3}});
  void* after = pool.allocate(30 * MiB);
  REQUIRE(vmm.access(static_cast<char*>(after) + 29 * MiB) == std::vector<device_id>{device_id{0}, device_id{3}});
  REQUIRE_THROWS_AS(pool->grant_access(device_id{5}), mgm::cuda_error);  // SYS: no peer access
  REQUIRE(vmm.access(after) == std::vector<device_id>{device_id{0}, device_id{3}});  // unchanged
  pool.deallocate(before, 12 * MiB);
  pool.deallocate(after, 30 * MiB);
}

TEST_CASE("expandable: max_split holds back no block of an expandable segment, and every block is split to its request",
          "[pool][expandable]") {
  mgm::sim::machine m{mgm::sim::parse_device_list("2x256MiB")};
  mgm::pool_options o;
  o.max_split_bytes = 32 * MiB;
  sim_pool raw_pool{m.allocator(device_id{0}), o};
  mgm::sim::judged pool{m, raw_pool};
  void* big = pool.allocate(100 * MiB);  // and one granule ahead: 102 MiB, of which 2 MiB (1/51) stay free
  REQUIRE(pool->reserved_bytes() == 102 * MiB);
  pool.deallocate(big, 100 * MiB);
  // The cached 100 MiB block is oversize for max_split, but its rest merges back: it serves.
  void* p = pool.allocate(20 * MiB);
  REQUIRE(p == big);
  REQUIRE(pool->statistics().allocated_bytes.current == 20 * MiB);  // split to the request
  void* q = pool.allocate(60 * MiB);  // a request above max_split is split off the rest too
  REQUIRE(q == static_cast<char*>(big) + 20 * MiB);
  REQUIRE(pool->statistics().allocated_bytes.current == 80 * MiB);
  REQUIRE(pool->reserved_bytes() == 102 * MiB);  // no growth
  // 22 MiB cached at the top: the growth extends it by the 28 MiB the request lacks, and maps
  // ahead as much as keeps the free bytes at most 1/32 of the mapped: (102 + 32 x 28) / 31 MiB,
  // 32 MiB in whole granules (4 MiB ahead, free 4 of 134 MiB).
  void* r = pool.allocate(50 * MiB);
  REQUIRE(r == static_cast<char*>(big) + 80 * MiB);
  REQUIRE(pool->statistics().allocated_bytes.current == 130 * MiB);
  REQUIRE(pool->reserved_bytes() == 134 * MiB);
  pool.deallocate(p, 20 * MiB);
  pool.deallocate(q, 60 * MiB);
  pool.deallocate(r, 50 * MiB);
  REQUIRE(m.hazards().empty());
}

TEST_CASE("expandable: a growth maps in chunks of map_chunk_bytes, and gives them back whole", "[pool][expandable]") {
  using mgm::sim::driver_call;
  mgm::sim::machine m{mgm::sim::parse_device_list("64GiB")};  // chunks of at most 128 MiB: map_chunk decides
  const device_id d{0};
  mgm::pool_options o;
  o.map_chunk_bytes = 32 * MiB;
  sim_pool raw_pool{m.allocator(d), o};
  mgm::sim::judged pool{m, raw_pool};
  // 100 MiB and one granule ahead, in 32 + 32 + 38 MiB (the last chunk takes the tail, which a
  // chunk of its own would cost one more create): three handles, three maps, one access call
  void* p = pool.allocate(100 * MiB);
  REQUIRE(pool->reserved_bytes() == 102 * MiB);
  REQUIRE(m.modelled(d).count(driver_call::create) == 3);
  REQUIRE(m.modelled(d).count(driver_call::map) == 3);
  REQUIRE(m.modelled(d).count(driver_call::set_access) == 1);
  REQUIRE(pool->statistics().upstream_allocations == 3);
  std::memset(p, 0x7E, 100 * MiB);
  // A block that covers only part of a chunk keeps it: 40 MiB live in the first two chunks.
  pool.deallocate(p, 100 * MiB);
  void* q = pool.allocate(40 * MiB);
  REQUIRE(q == p);
  (void)pool->release();
  REQUIRE(pool->reserved_bytes() == 64 * MiB);  // chunk 3 went back whole; 1 and 2 hold q
  REQUIRE(m.modelled(d).count(driver_call::unmap) == 1);  // one call per chunk
  REQUIRE(m.modelled(d).count(driver_call::release) == 1);
  pool.deallocate(q, 40 * MiB);
  (void)pool->release();
  REQUIRE(pool->reserved_bytes() == 0);
  REQUIRE(m.memory(d).used_bytes == 0);
  REQUIRE(m.hazards().empty());  // the judge saw no partial unmap, no mapping over a mapping
}

TEST_CASE("expandable: chunks are at most 1/512 of the device, and near its end single granules", "[pool][expandable]") {
  using mgm::sim::driver_call;
  mgm::sim::machine m{mgm::sim::parse_device_list("16GiB")};  // chunks of at most 32 MiB
  const device_id d{0};
  sim_pool raw_pool{m.allocator(d), large_range_only()};
  mgm::sim::judged pool{m, raw_pool};
  // Leaves 1 GiB free, more than 1/32 of the device (512 MiB): chunks, and 494 MiB mapped ahead
  // ((32 x 15360) / 31 MiB in whole granules: 15854 MiB), which leaves 530 MiB, still over 1/32.
  void* a = pool.allocate(15360 * MiB);
  REQUIRE(pool->reserved_bytes() == 15854 * MiB);
  REQUIRE(m.modelled(d).count(driver_call::create) == 495);  // 494 of 32 MiB and one of 46 MiB
  REQUIRE(m.modelled(d).count(driver_call::set_access) == 1);
  // The 106 MiB it lacks would leave 424 MiB, under 1/32: granules, and instead of the budget's
  // ahead a pad of 1/32 of the growth (3.3 MiB; 1/64 of the 424 MiB is more): one granule.
  void* b = pool.allocate(600 * MiB);
  REQUIRE(m.modelled(d).count(driver_call::create) == 495 + 53 + 1);
  REQUIRE(pool->reserved_bytes() == 15962 * MiB);
  REQUIRE(m.memory(d).free_bytes == 422 * MiB);
  // So a release under the limit can give back any 2 MiB of that, and every whole chunk.
  pool.deallocate(b, 600 * MiB);
  void* c = pool.allocate(10 * MiB);  // in the chunk after a's last
  REQUIRE(c == static_cast<char*>(a) + 15360 * MiB);
  (void)pool->release();
  REQUIRE(pool->reserved_bytes() == 15392 * MiB);  // a's 480 chunks and c's
  pool.deallocate(c, 10 * MiB);
  pool.deallocate(a, 15360 * MiB);
  (void)pool->release();
  REQUIRE(m.memory(d).used_bytes == 0);
  REQUIRE(m.hazards().empty());
}

TEST_CASE("expandable: a growth is one handle and maps ahead at most 1/32 of the range, which the next requests take",
          "[pool][expandable]") {
  using mgm::sim::driver_call;
  mgm::sim::machine m{mgm::sim::parse_device_list("80GiB")};
  const device_id d{0};
  sim_pool raw_pool{m.allocator(d), mgm::pool_options{}};
  mgm::sim::judged pool{m, raw_pool};
  // A forward pass: 48 activations of 64 MiB, each kept.
  std::vector<void*> acts;
  for (int i = 0; i < 48; ++i) {
    acts.push_back(pool.allocate(64 * MiB));
    const std::size_t reserved = pool->reserved_bytes();
    const auto allocated = static_cast<std::size_t>(pool->statistics().allocated_bytes.current);
    INFO("after activation " << i << ": " << reserved / MiB << " MiB reserved");
    REQUIRE((reserved - allocated) * 32 <= reserved);  // the map-ahead budget
  }
  const auto& c = m.modelled(d);
  // One create, one map and one access call per growth; fewer growths than requests, since the
  // memory mapped ahead served some (exact mapping would grow 48 times).
  REQUIRE(c.count(driver_call::create) == c.count(driver_call::set_access));
  REQUIRE(c.count(driver_call::map) == c.count(driver_call::create));
  REQUIRE(c.count(driver_call::create) < 48);
  REQUIRE(c.count(driver_call::create) >= 30);  // the budget keeps the first growths exact
  for (void* p : acts) pool.deallocate(p, 64 * MiB);
  (void)pool->release();
  REQUIRE(m.memory(d).used_bytes == 0);
  REQUIRE(m.hazards().empty());
}

TEST_CASE("expandable: growth, ahead or not, keeps within the pool's limits", "[pool][expandable][oom]") {
  mgm::sim::machine m{mgm::sim::parse_device_list("4GiB")};
  const device_id d{0};
  sim_pool raw_pool{m.allocator(d), mgm::pool_options{}};
  mgm::sim::judged pool{m, raw_pool};
  REQUIRE(pool->limits() == mgm::pool_limits{});
  SECTION("max_reserved_bytes") {
    pool->set_limits({1000 * MiB, 0});
    std::vector<void*> live;
    for (int i = 0; i < 9; ++i) {
      live.push_back(pool.allocate(100 * MiB));
      REQUIRE(pool->reserved_bytes() <= 1000 * MiB);
    }
    // 900 MiB live: a tenth fits the limit exactly, whatever was mapped ahead.
    live.push_back(pool.allocate(100 * MiB));
    REQUIRE(pool->reserved_bytes() == 1000 * MiB);
    REQUIRE_THROWS_WITH(pool.allocate(100 * MiB), Catch::Contains("pool_limits::max_reserved_bytes") &&
                                                     Catch::Contains("at most 1000.00 MiB"));
    REQUIRE(pool->reserved_bytes() == 1000 * MiB);  // the refusal changed nothing
    for (void* p : live) pool.deallocate(p, 100 * MiB);
  }
  SECTION("max_reserved_bytes, with growths at once on two streams") {
    // The second growth starts while the first maps without the lock: it must count those bytes.
    pool->set_limits({1000 * MiB, 0});
    const mgm::stream_ref streams[2] = {m.create_stream(d), m.create_stream(d)};
    for (int round = 0; round < 50; ++round) {
      void* got[2] = {nullptr, nullptr};
      std::atomic<int> ready{0};
      const auto grow = [&](int i) {
        ready.fetch_add(1);
        while (ready.load() < 2) {
        }
        try {
          got[i] = raw_pool.allocate_async(600 * MiB, 256, streams[i]);
        } catch (const mgm::out_of_memory&) {
        }
      };
      std::thread a{grow, 0};
      std::thread b{grow, 1};
      a.join();
      b.join();
      INFO("round " << round);
      REQUIRE(pool->statistics().reserved_bytes.peak <= static_cast<std::int64_t>(1000 * MiB));
      REQUIRE(((got[0] != nullptr) + (got[1] != nullptr)) == 1);
      for (int i = 0; i < 2; ++i) {
        if (got[i] != nullptr) raw_pool.deallocate_async(got[i], 600 * MiB, 256, streams[i]);
      }
      (void)pool->release();
    }
  }
  SECTION("keep_free_bytes") {
    pool->set_limits({mgm::pool_options::unlimited, 1 * std::size_t{1} << 30});
    std::vector<void*> live;
    try {
      while (true) {
        live.push_back(pool.allocate(100 * MiB));
        REQUIRE(m.memory(d).free_bytes >= std::size_t{1} << 30);
      }
    } catch (const mgm::out_of_memory& e) {
      REQUIRE(std::string{e.what()}.find("pool_limits::keep_free_bytes") != std::string::npos);
    }
    REQUIRE(live.size() == 30);  // 3 GiB above what it keeps free
    for (void* p : live) pool.deallocate(p, 100 * MiB);
  }
  (void)pool->release();
  REQUIRE(m.memory(d).used_bytes == 0);
  REQUIRE(m.hazards().empty());
}

TEST_CASE("expandable: what is mapped ahead stops at the near-full margin", "[pool][expandable]") {
  mgm::sim::machine m{mgm::sim::parse_device_list("16GiB")};  // margin: 1/32, 512 MiB
  sim_pool raw_pool{m.allocator(device_id{0}), large_range_only()};
  mgm::sim::judged pool{m, raw_pool};
  // The budget would map (32 x 15700) / 31 MiB (16206); the margin stops it at 15872, 172 MiB ahead.
  void* a = pool.allocate(15700 * MiB);
  REQUIRE(pool->reserved_bytes() == 15872 * MiB);
  REQUIRE(m.memory(device_id{0}).free_bytes == 512 * MiB);
  void* b = pool.allocate(100 * MiB);  // from what was mapped ahead: no growth
  REQUIRE(pool->reserved_bytes() == 15872 * MiB);
  pool.deallocate(b, 100 * MiB);
  pool.deallocate(a, 15700 * MiB);
  (void)pool->release();
  REQUIRE(m.memory(device_id{0}).used_bytes == 0);
  REQUIRE(m.hazards().empty());
}

TEST_CASE("expandable: near full, a growth pads what it maps, so a pass that lacks a little grows no more",
          "[pool][expandable]") {
  using mgm::sim::driver_call;
  mgm::sim::machine m{mgm::sim::parse_device_list("16GiB")};  // margin: 1/32, 512 MiB
  const device_id d{0};
  sim_pool raw_pool{m.allocator(d), large_range_only()};
  mgm::sim::judged pool{m, raw_pool};
  void* a = pool.allocate(15700 * MiB);  // 15872 MiB mapped, 512 MiB free (the previous test)
  // The first pass's peak: 300 MiB more, within the margin: 172 MiB were mapped ahead, 128 grow,
  // and a pad of 4 MiB (1/32 of the growth; 1/64 of the 384 MiB that stay free is 6).
  void* b = pool.allocate(300 * MiB);
  REQUIRE(pool->reserved_bytes() == (15872 + 128 + 4) * MiB);
  const std::size_t creates = m.modelled(d).count(driver_call::create);
  pool.deallocate(b, 300 * MiB);
  // The second pass's peak is 4 MiB larger (its blocks fell elsewhere): the pad serves it.
  b = pool.allocate(304 * MiB);
  REQUIRE(m.modelled(d).count(driver_call::create) == creates);
  pool.deallocate(b, 304 * MiB);
  pool.deallocate(a, 15700 * MiB);
  (void)pool->release();
  REQUIRE(m.memory(d).used_bytes == 0);
  REQUIRE(m.hazards().empty());
}

TEST_CASE("expandable: the mapping policy's arithmetic", "[pool][expandable]") {
  const mgm::detail::mapping_policy p{2 * MiB};
  const std::size_t cap = 80 * std::size_t{1} << 30;
  REQUIRE(p.largest_chunk(cap, 0, 0) == 160 * MiB);
  REQUIRE(p.largest_chunk(64 * MiB, 0, 0) == 2 * MiB);  // never below a granule
  // While what may be mapped is at least 8 x what is mapped, 1/16 of the mapped bytes when more.
  REQUIRE(p.largest_chunk(cap, 25600 * MiB, 3200 * MiB) == 200 * MiB);
  REQUIRE(p.largest_chunk(cap, 40000 * MiB, 3201 * MiB) == 200 * MiB);  // whole granules
  REQUIRE(p.largest_chunk(cap, 25598 * MiB, 3200 * MiB) == 160 * MiB);  // less than 8 x room
  REQUIRE(p.largest_chunk(cap, 40000 * MiB, 1600 * MiB) == 160 * MiB);  // 100 < 160
  REQUIRE(p.margin(cap) == 2560 * MiB);
  REQUIRE(p.near_full(cap, 3000 * MiB, 500 * MiB));
  REQUIRE_FALSE(p.near_full(cap, 3100 * MiB, 500 * MiB));
  // Ahead: 3100 MiB mapped, none free, a 100 MiB request: (3100 + 32 x 100) / 31 = 203.2 -> 202.
  const std::size_t m = p.ahead_bytes(cap, 40000 * MiB, 3100 * MiB, 0, 100 * MiB);
  REQUIRE(m == 202 * MiB);
  // With more free than the request can use, nothing ahead.
  REQUIRE(p.ahead_bytes(cap, 40000 * MiB, 3100 * MiB, 200 * MiB, 100 * MiB) == 0);
  // Clipped at the margin: 2600 MiB available leaves 40 above it.
  REQUIRE(p.ahead_bytes(cap, 2600 * MiB, 3100 * MiB, 0, 100 * MiB) == 40 * MiB);
  // The pad: the lesser of 1/64 of what stays and 1/32 of the growth, whole granules.
  REQUIRE(p.padded(1000 * MiB, 320 * MiB) == 330 * MiB);  // 680 / 64 = 10.6 against 320 / 32 = 10
  REQUIRE(p.padded(200 * MiB, 100 * MiB) == 100 * MiB);   // 1.5 and 3.1: under a granule
  REQUIRE(p.padded(100 * MiB, 100 * MiB) == 100 * MiB);
}

TEST_CASE("expandable: a growth the device cannot hold is not begun, idle memory goes back first",
          "[pool][expandable][oom]") {
  using mgm::sim::driver_call;
  pool_test::judged_setup s{"4GiB", mgm::pool_options{}};  // chunks of at most 8 MiB; no hazard at the end
  auto& pool = s.pool;
  const device_id d{0};
  void* a = pool.allocate(1536 * MiB);
  void* b = pool.allocate(1536 * MiB);
  pool.deallocate(a, 1536 * MiB);
  REQUIRE(s.m.memory(d).free_bytes < 2048 * MiB);  // c fits neither what is free nor a's place
  const std::size_t idle = pool->reserved_bytes() - 1536 * MiB;  // a's and what was mapped ahead
  const auto before = s.m.modelled(d);
  void* c = pool.allocate(2048 * MiB);
  const auto after = s.m.modelled(d);
  const std::size_t made = after.count(driver_call::create) - before.count(driver_call::create);
  const std::size_t released = after.count(driver_call::release) - before.count(driver_call::release);
  INFO(made << " chunks made, " << released << " released, " << idle / MiB << " MiB idle before");
  // Exactly c's 256 chunks of 8 MiB were made, after the idle chunks went back: none was made only
  // to be undone when the driver refused the next.
  REQUIRE(made == 2048 / 8);
  // Every idle chunk went back: chunks of 8 MiB, a growth's last up to 14 (it takes the tail).
  REQUIRE(released * 14 * MiB >= idle);
  REQUIRE(pool->reserved_bytes() == 1536 * MiB + 2048 * MiB);  // b and c, nothing idle kept
  REQUIRE(pool->reserved_bytes() == s.m.vmm().mapped_bytes(d));
  pool.deallocate(c, 2048 * MiB);
  pool.deallocate(b, 1536 * MiB);
  (void)pool->release();
  REQUIRE(s.device_used() == 0);
}

// ---- the huge range (requests of huge_request_bytes and more, by default 512 MiB) -------------

namespace {
// The expandable segment that holds `p`, by its index in the snapshot (-1: none).
int segment_of(const mgm::pool_snapshot& snap, const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  for (std::size_t i = 0; i < snap.segments.size(); ++i) {
    const auto& seg = snap.segments[i];
    if (a >= seg.address && a < seg.address + seg.size) return static_cast<int>(i);
  }
  return -1;
}
}  // namespace

TEST_CASE("expandable: huge requests grow a range of their own, whose blocks the others do not take",
          "[pool][expandable][huge]") {
  SECTION("by default") {
    pool_test::judged_setup s{"80GiB", mgm::pool_options{}};
    void* h = s.pool.allocate(600 * MiB);
    void* l = s.pool.allocate(100 * MiB);
    auto snap = s.pool->snapshot();
    REQUIRE(snap.segments.size() == 2);
    REQUIRE(segment_of(snap, h) != segment_of(snap, l));
    s.pool.deallocate(h, 600 * MiB);
    void* l2 = s.pool.allocate(100 * MiB);  // the huge range's free block is not for it
    snap = s.pool->snapshot();
    REQUIRE(segment_of(snap, l2) == segment_of(snap, l));
    void* h2 = s.pool.allocate(600 * MiB);  // its own range's free block again
    REQUIRE(h2 == h);
    for (void* p : {l, l2}) s.pool.deallocate(p, 100 * MiB);
    s.pool.deallocate(h2, 600 * MiB);
    REQUIRE(s.pool->release() > 0);
    REQUIRE(s.device_used() == 0);
  }
  SECTION("huge_request:unlimited keeps one range") {
    pool_test::judged_setup s{"80GiB", mgm::pool_options::parse("huge_request:unlimited")};
    void* h = s.pool.allocate(600 * MiB);
    void* l = s.pool.allocate(100 * MiB);
    const auto snap = s.pool->snapshot();
    REQUIRE(snap.segments.size() == 1);
    s.pool.deallocate(h, 600 * MiB);
    s.pool.deallocate(l, 100 * MiB);
  }
}

TEST_CASE("expandable: a huge request with no block in its range takes a free block of the large range before growing",
          "[pool][expandable][huge]") {
  using mgm::sim::driver_call;
  pool_test::judged_setup s{"80GiB", mgm::pool_options{}};
  std::vector<void*> acts;
  for (int i = 0; i < 8; ++i) acts.push_back(s.pool.allocate(100 * MiB));
  for (void* p : acts) s.pool.deallocate(p, 100 * MiB);  // one free block of 800 MiB and more
  const auto creates = s.m.modelled(device_id{0}).count(driver_call::create);
  void* h = s.pool.allocate(600 * MiB);
  REQUIRE(s.m.modelled(device_id{0}).count(driver_call::create) == creates);
  const auto snap = s.pool->snapshot();
  REQUIRE(snap.segments.size() == 1);  // no huge range was reserved
  REQUIRE(segment_of(snap, h) == 0);
  s.pool.deallocate(h, 600 * MiB);
}

TEST_CASE("expandable: a huge block goes to the far end from a live block of its size, so double-buffered logits fit in their peak",
          "[pool][expandable][huge]") {
  using mgm::sim::driver_call;
  // A language model's loss, as the GPT trace generator writes it: the step's logits (L) are made
  // while the previous step's live (`logits, loss = model(...)`), beside the fp32 blocks of the
  // loss (W = 2 L); at most L + 3 W are live at once.
  constexpr std::size_t L = 1024 * MiB;
  constexpr std::size_t W = 2 * L;
  const auto run = [&](const mgm::pool_options& o, std::size_t& creates_after_warmup) {
    pool_test::judged_setup s{"80GiB", o};
    auto& pool = s.pool;
    void* prev = nullptr;
    std::size_t peak = 0;
    for (int step = 0; step < 6; ++step) {
      if (step == 2) creates_after_warmup = s.m.modelled(device_id{0}).count(driver_call::create);
      void* logits = pool.allocate(L);
      void* wide = pool.allocate(W);
      void* logp = pool.allocate(W);
      pool.deallocate(wide, W);
      if (prev != nullptr) pool.deallocate(prev, L);
      void* dlogp = pool.allocate(W);
      void* dlogits = pool.allocate(W);  // the peak: L + 3 W
      peak = std::max(peak, pool->reserved_bytes());
      pool.deallocate(dlogp, W);
      pool.deallocate(logp, W);
      void* narrow = pool.allocate(L);
      pool.deallocate(dlogits, W);
      pool.deallocate(narrow, L);
      prev = logits;
    }
    creates_after_warmup = s.m.modelled(device_id{0}).count(driver_call::create) - creates_after_warmup;
    pool.deallocate(prev, L);
    return peak;
  };
  std::size_t late = 0;
  const std::size_t huge = run(mgm::pool_options{}, late);
  INFO("huge range: " << huge / MiB << " MiB reserved at the peak");
  REQUIRE(huge == L + 3 * W);  // nothing mapped ahead in the huge range, nothing lost to the layout
  REQUIRE(late == 0);          // the layout repeats from the second step on
  std::size_t late_one = 0;
  const std::size_t one = run(mgm::pool_options::parse("huge_request:unlimited"), late_one);
  INFO("one range: " << one / MiB << " MiB reserved at the peak");
  REQUIRE(one >= 2 * L + 3 * W);  // placed beside its predecessor, the logits split the space one W needed
}
