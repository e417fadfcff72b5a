// The caching pool out of memory: idle segments released and the request retried, the handler
// asked, and a fragmented cache named with the option that helps.
#include <mgm/pool/caching_pool.hpp>
#include <mgm/pool/oom_info.hpp>
#include <mgm/sim/judged.hpp>
#include <mgm/sim/machine.hpp>

#include "pool_test_support.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using mgm::device_id;
using namespace pool_test;

TEST_CASE("pool: out of memory releases idle segments and retries", "[pool][oom]") {
  judged_setup s{"64MiB"};
  void* a = s.pool.allocate(30 * MiB);
  void* b = s.pool.allocate(30 * MiB);
  s.pool.deallocate(a, 30 * MiB);  // cached: the device has 4 MiB free
  void* c = s.pool.allocate(32 * MiB);  // needs a's segment back from the cache
  REQUIRE(c != nullptr);
  auto st = s.pool->statistics();
  REQUIRE(st.oom_retries == 1);
  REQUIRE(st.upstream_frees == 1);
  REQUIRE(st.ooms == 0);

  SECTION("the handler may free memory and ask for one more try") {
    int calls = 0;
    s.pool->set_oom_handler([&](const mgm::oom_info& info) {
      ++calls;
      REQUIRE(info.requested_bytes == 40 * MiB);
      REQUIRE(info.allocated_bytes == 62 * MiB);
      REQUIRE(info.device_free_bytes == 2 * MiB);
      s.pool.deallocate(c, 32 * MiB);
      s.pool.deallocate(b, 30 * MiB);
      b = nullptr;
      return true;
    });
    void* d = s.pool.allocate(40 * MiB);
    REQUIRE(calls == 1);
    REQUIRE(s.pool->statistics().ooms == 0);
    s.pool.deallocate(d, 40 * MiB);
  }
  SECTION("otherwise out_of_memory carries the figures, and the pool stays usable") {
    try {
      (void)s.pool.allocate(40 * MiB);
      FAIL("no exception");
    } catch (const mgm::out_of_memory& e) {
      const std::string what = e.what();
      INFO(what);
      REQUIRE(e.requested_bytes() == 40 * MiB);
      REQUIRE(what.find("device 0") != std::string::npos);
      REQUIRE(what.find("40.00 MiB (41943040 bytes)") != std::string::npos);
      REQUIRE(what.find("62.00 MiB allocated") != std::string::npos);
      REQUIRE(what.find("62.00 MiB reserved") != std::string::npos);
      REQUIRE(what.find("the device has 2.00 MiB free") != std::string::npos);
    }
    REQUIRE(s.pool->statistics().ooms == 1);
    s.pool.deallocate(c, 32 * MiB);
  }
  void* small = s.pool.allocate(1 * MiB);
  s.pool.deallocate(small, 1 * MiB);
  if (b != nullptr) s.pool.deallocate(b, 30 * MiB);
  s.pool->release();
  REQUIRE(s.device_used() == 0);
}

TEST_CASE("pool: a fragmented cache is named, with max_split_bytes suggested", "[pool][oom]") {
  judged_setup s{"48MiB"};
  void* whole = s.pool.allocate(40 * MiB);
  s.pool.deallocate(whole, 40 * MiB);
  std::vector<void*> pieces;
  for (int i = 0; i < 20; ++i) pieces.push_back(s.pool.allocate(2 * MiB));  // carve the 40 MiB
  for (std::size_t i = 0; i < pieces.size(); i += 2) s.pool.deallocate(pieces[i], 2 * MiB);
  REQUIRE(s.pool->statistics().inactive_split_bytes.current == 20 * MiB);
  REQUIRE_THROWS_WITH(s.pool.allocate(12 * MiB),
                      Catch::Contains("fragmented") && Catch::Contains("max_split_size_mb:6") &&
                          Catch::Contains("largest free block 2.00 MiB"));
  for (std::size_t i = 1; i < pieces.size(); i += 2) s.pool.deallocate(pieces[i], 2 * MiB);
  REQUIRE(s.pool->statistics().inactive_split_bytes.current == 0);
  void* fits = s.pool.allocate(12 * MiB);  // coalesced again
  s.pool.deallocate(fits, 12 * MiB);
}

TEST_CASE("pool: a fragmented expandable cache is named, with a smaller map_chunk suggested", "[pool][oom]") {
  mgm::pool_options o;  // expandable segments (the simulator has virtual memory)
  judged_setup s{"16GiB", o};  // chunks of at most 1/512 of the device: 32 MiB
  REQUIRE(s.pool->expandable());
  void* whole = s.pool.allocate(40 * MiB);  // one growth: chunks of 32 and 8 MiB
  REQUIRE(s.pool->reserved_bytes() == 40 * MiB);
  s.pool->set_limits({40 * MiB, 0});  // and no more
  s.pool.deallocate(whole, 40 * MiB);
  std::vector<void*> pieces;
  for (int i = 0; i < 20; ++i) pieces.push_back(s.pool.allocate(2 * MiB));  // carve the 40 MiB
  for (std::size_t i = 0; i < pieces.size(); i += 2) s.pool.deallocate(pieces[i], 2 * MiB);
  // 20 MiB idle, but in granules of chunks that live pieces share: nothing can be unmapped.
  REQUIRE_THROWS_WITH(s.pool.allocate(12 * MiB), Catch::Contains("fragmented") && Catch::Contains("map_chunk:2MiB") &&
                                                     !Catch::Contains("max_split") &&
                                                     Catch::Contains("reserve at most 40.00 MiB"));
  for (std::size_t i = 1; i < pieces.size(); i += 2) s.pool.deallocate(pieces[i], 2 * MiB);
  void* fits = s.pool.allocate(12 * MiB);  // coalesced again
  s.pool.deallocate(fits, 12 * MiB);
}

TEST_CASE("pool: a request larger than the whole device is refused without a driver call", "[pool][oom]") {
  mgm::pool_options o;  // expandable segments: without this check, a terabyte of address space reserved to find out
  judged_setup s{"1GiB", o};
  REQUIRE(s.pool->expandable());
  const auto driver_calls = [&] {
    using mgm::sim::driver_call;
    const auto c = s.m.modelled(device_id{0});
    return c.count(driver_call::reserve) + c.count(driver_call::create) + c.count(driver_call::malloc);
  };
  const auto before = driver_calls();
  REQUIRE_THROWS_MATCHES(s.pool.allocate(1024 * GiB), mgm::out_of_memory,
                         Catch::Predicate<mgm::out_of_memory>([](const mgm::out_of_memory& e) {
                           return std::string{e.what()}.rfind("caching_pool on device 0: out of memory allocating 1.00 TiB", 0) == 0 &&
                                  e.requested_bytes() == 1024 * GiB;
                         }));
  REQUIRE(driver_calls() == before);
  REQUIRE(s.pool->reserved_bytes() == 0);
  void* fits = s.pool.allocate(512 * MiB);  // the pool is unharmed
  s.pool.deallocate(fits, 512 * MiB);
}
