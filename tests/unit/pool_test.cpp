// The caching pool over the simulated machine: the same pool code, its seams on the sim.
#include "conformance.hpp"

#include <mgm/bytes.hpp>
#include <mgm/log.hpp>

#include "log_capture.hpp"
#include "pool_test_support.hpp"
#include <mgm/pool/caching_pool.hpp>
#include <mgm/pool/detail/pool_mutex.hpp>
#include <mgm/pool/multi_device_pool.hpp>
#include <mgm/sim/judged.hpp>
#include <mgm/sim/machine.hpp>
#include <mgm/tag.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

using mgm::device_id;
using namespace std::chrono_literals;

using namespace pool_test;

namespace {

using sim_pool_nostats = mgm::caching_pool<mgm::sim::device_allocator, false>;

struct plain_options {
  mgm::pool_options operator()() const { return plain(); }
};
struct expandable_options {
  mgm::pool_options operator()() const { return {}; }
};

template <class Pool, class Options>
struct pool_fixture {
  using allocator_type = mgm::sim::judged<Pool>;
  static constexpr bool exact_oom = true;
  static constexpr bool stream_ordered = true;
  std::unique_ptr<mgm::sim::machine> m = std::make_unique<mgm::sim::machine>(mgm::sim::parse_device_list("2x256MiB"));
  std::unique_ptr<Pool> pool = std::make_unique<Pool>(m->allocator(device_id{1}), Options{}());
  allocator_type make() { return allocator_type{*m, *pool}; }
  mgm::stream_ref stream() { return m->create_stream(device_id{1}); }
  void touch(void* p, std::size_t n) {
    REQUIRE(m->owner_of(p) == device_id{1});
    std::memset(p, 0x5C, n);
  }
  ~pool_fixture() {
    CHECK(m->hazards().empty());
    pool->release();
    CHECK(pool->reserved_bytes() == 0);
    pool.reset();
    CHECK(m->memory(device_id{1}).used_bytes == 0);
  }
};
using pool_fixtures = std::tuple<pool_fixture<sim_pool, plain_options>, pool_fixture<sim_pool_nostats, plain_options>,
                                 pool_fixture<sim_pool, expandable_options>>;

using mgm::test::log_capture;

}  // namespace

MGM_CONFORMANCE_SUITE("pool", pool_fixtures)

TEST_CASE("pool: a small request takes a 2 MiB segment, and frees return to the cache", "[pool]") {
  judged_setup s;
  void* a = s.pool.allocate(1000);
  auto st = s.pool->statistics();
  REQUIRE(st.allocated_bytes.current == 1024);
  REQUIRE(st.requested_bytes.current == 1000);
  REQUIRE(st.reserved_bytes.current == 2 * MiB);
  REQUIRE(st.segments.current == 1);
  REQUIRE(st.upstream_allocations == 1);
  REQUIRE(s.device_used() == 2 * MiB);
  void* b = s.pool.allocate(300 * KiB);
  REQUIRE(s.pool->statistics().upstream_allocations == 1);  // carved from the same segment
  REQUIRE(static_cast<char*>(b) == static_cast<char*>(a) + 1024);
  s.pool.deallocate(a, 1000);
  s.pool.deallocate(b, 300 * KiB);
  st = s.pool->statistics();
  REQUIRE(st.allocated_bytes.current == 0);
  REQUIRE(st.reserved_bytes.current == 2 * MiB);   // cached, not returned
  REQUIRE(st.inactive_split_bytes.current == 0);   // merged back into one whole free segment
  REQUIRE(st.upstream_frees == 0);
  REQUIRE(s.pool->release() == 2 * MiB);
  REQUIRE(s.device_used() == 0);
  REQUIRE(s.pool->statistics().upstream_frees == 1);
}

TEST_CASE("pool: the same size comes back from the cache, without upstream calls", "[pool]") {
  judged_setup s;
  std::vector<std::size_t> sizes{256, 4 * KiB, 700 * KiB, 3 * MiB, 17 * MiB, 64 * MiB};
  std::vector<void*> first;
  for (auto n : sizes) first.push_back(s.pool.allocate(n));
  const auto calls = s.pool->statistics().upstream_allocations;
  for (std::size_t i = 0; i < sizes.size(); ++i) s.pool.deallocate(first[i], sizes[i]);
  for (int round = 0; round < 5; ++round) {
    std::vector<void*> again;
    for (auto n : sizes) again.push_back(s.pool.allocate(n));
    for (std::size_t i = 0; i < sizes.size(); ++i) s.pool.deallocate(again[i], sizes[i]);
  }
  const auto st = s.pool->statistics();
  REQUIRE(st.upstream_allocations == calls);
  REQUIRE(st.cache_hits >= 30);
  REQUIRE(s.m.modelled(device_id{0}).count(mgm::sim::driver_call::malloc) == calls);
}

TEST_CASE("pool: segment sizes follow the size policy", "[pool]") {
  judged_setup s;
  void* b = s.pool.allocate(12 * MiB + 1);  // 10 MiB and up: its own size rounded to 2 MiB
  REQUIRE(s.pool->statistics().reserved_bytes.current == 14 * MiB);
  void* a = s.pool.allocate(3 * MiB);  // large, below 10 MiB: a 20 MiB segment
  REQUIRE(s.pool->statistics().reserved_bytes.current == 14 * MiB + 20 * MiB);
  void* c = s.pool.allocate(1 * MiB);  // small: a 2 MiB segment, not the free 17 MiB of the large one
  REQUIRE(s.pool->statistics().reserved_bytes.current == 36 * MiB);
  void* d = s.pool.allocate(5 * MiB);  // from the rest of the 20 MiB segment
  REQUIRE(s.pool->statistics().reserved_bytes.current == 36 * MiB);
  const auto snap = s.pool->snapshot();
  REQUIRE(snap.segments.size() == 3);
  std::size_t small = 0;
  for (const auto& seg : snap.segments) small += seg.small ? 1 : 0;
  REQUIRE(small == 1);
  s.pool.deallocate(a, 3 * MiB);
  s.pool.deallocate(b, 12 * MiB + 1);
  s.pool.deallocate(c, 1 * MiB);
  s.pool.deallocate(d, 5 * MiB);
  REQUIRE(s.pool->statistics().inactive_split_bytes.current == 0);
}

TEST_CASE("pool: small segments are twice as large on a large device, unless near full", "[pool]") {
  {
    judged_setup s{"16GiB"};
    void* a = s.pool.allocate(1000);
    REQUIRE(s.device_used() == 4 * MiB);
    s.pool.deallocate(a, 1000);
  }
  {
    judged_setup s{"16GiB"};
    s.raw.set_limits(mgm::pool_limits{1 * GiB, 0});  // the pool may hold 1 GiB: a small pool
    void* a = s.pool.allocate(1000);
    REQUIRE(s.device_used() == 2 * MiB);
    s.pool.deallocate(a, 1000);
  }
  {
    judged_setup s{"16GiB"};
    void* big = s.pool.allocate(16 * GiB - 100 * MiB);  // near full: less than 1/32 would stay free
    void* a = s.pool.allocate(1000);
    REQUIRE(s.device_used() == 16 * GiB - 98 * MiB);
    s.pool.deallocate(a, 1000);
    s.pool.deallocate(big, 16 * GiB - 100 * MiB);
  }
}

TEST_CASE("pool: under pressure a small request takes a large segment's free block", "[pool][oom]") {
  judged_setup s{"24MiB"};
  const device_id d{0};
  void* a = s.pool.allocate(3 * MiB);  // a 20 MiB segment: 17 MiB of it stay free
  REQUIRE(s.device_used() == 20 * MiB);
  std::vector<void*> small;
  small.push_back(s.pool.allocate(1 * MiB));  // a 2 MiB small segment
  REQUIRE(s.device_used() == 22 * MiB);
  for (int i = 0; i < 3; ++i) small.push_back(s.pool.allocate(1 * MiB));  // one more 2 MiB segment
  REQUIRE(s.device_used() == 24 * MiB);
  REQUIRE(s.pool->statistics().upstream_allocations == 3);
  // The small segments are full and the device refuses a third: the large segment's free block
  // serves the request, split to what it needs, and nothing is given back to make room.
  void* p = s.pool.allocate(1 * MiB);
  const auto base = reinterpret_cast<std::uintptr_t>(a);
  REQUIRE(reinterpret_cast<std::uintptr_t>(p) >= base + 3 * MiB);
  REQUIRE(reinterpret_cast<std::uintptr_t>(p) < base + 20 * MiB);
  auto st = s.pool->statistics();
  REQUIRE(st.upstream_allocations == 3);
  REQUIRE(st.upstream_frees == 0);
  REQUIRE(st.allocated_bytes.current == static_cast<std::int64_t>(3 * MiB + 5 * MiB));
  // Under pressure now, the next miss looks there first: not even a refused driver call.
  const auto calls = s.m.modelled(d).count(mgm::sim::driver_call::malloc);
  void* q = s.pool.allocate(512 * KiB);
  REQUIRE(reinterpret_cast<std::uintptr_t>(q) >= base + 3 * MiB);
  REQUIRE(reinterpret_cast<std::uintptr_t>(q) < base + 20 * MiB);
  REQUIRE(s.m.modelled(d).count(mgm::sim::driver_call::malloc) == calls);
  s.pool.deallocate(q, 512 * KiB);
  s.pool.deallocate(p, 1 * MiB);
  for (void* b : small) s.pool.deallocate(b, 1 * MiB);
  s.pool.deallocate(a, 3 * MiB);
  st = s.pool->statistics();
  REQUIRE(st.inactive_split_bytes.current == 0);  // the large block merged back whole
  REQUIRE(s.pool->release() == 24 * MiB);
  REQUIRE(s.device_used() == 0);
}

TEST_CASE("pool: under pressure a large request takes an idle small segment, with nothing given back", "[pool][oom]") {
  judged_setup s{"22MiB"};
  void* x = s.pool.allocate(1000);  // a 2 MiB small segment
  REQUIRE(s.device_used() == 2 * MiB);
  s.pool.deallocate(x, 1000);  // idle, cached
  void* a = s.pool.allocate(3 * MiB);  // a 20 MiB segment
  void* b = s.pool.allocate(17 * MiB);  // its rest
  REQUIRE(s.device_used() == 22 * MiB);
  // No large block is free and the device refuses a new segment: the idle small segment serves,
  // where giving it back and asking for 2 MiB would cost a free and a malloc.
  void* c = s.pool.allocate(2 * MiB);
  REQUIRE(c == x);
  const auto st = s.pool->statistics();
  REQUIRE(st.upstream_allocations == 2);
  REQUIRE(st.upstream_frees == 0);
  REQUIRE(s.device_used() == 22 * MiB);
  s.pool.deallocate(c, 2 * MiB);
  s.pool.deallocate(b, 17 * MiB);
  s.pool.deallocate(a, 3 * MiB);
  REQUIRE(s.pool->release() == 22 * MiB);
  REQUIRE(s.device_used() == 0);
}

TEST_CASE("pool: max_split_bytes keeps oversize blocks whole", "[pool]") {
  mgm::pool_options o = plain();
  o.max_split_bytes = 8 * MiB;
  judged_setup s{"1GiB", o};
  void* big = s.pool.allocate(12 * MiB);
  s.pool.deallocate(big, 12 * MiB);
  void* small_request = s.pool.allocate(2 * MiB);  // must not eat the 12 MiB block
  REQUIRE(small_request != big);
  REQUIRE(s.pool->statistics().upstream_allocations == 2);
  void* again = s.pool.allocate(11 * MiB);  // close enough in size: the oversize block, unsplit
  REQUIRE(again == big);
  REQUIRE(s.pool->statistics().allocated_bytes.current == 2 * MiB + 12 * MiB);
  s.pool.deallocate(small_request, 2 * MiB);
  s.pool.deallocate(again, 11 * MiB);
}

TEST_CASE("pool: a block freed on one stream is reused on another only after that stream's work", "[pool][streams]") {
  judged_setup s;
  const device_id d{0};
  auto ops = s.m.streams();
  const auto s1 = s.m.create_stream(d);
  const auto s2 = s.m.create_stream(d);
  const auto s3 = s.m.create_stream(d);

  // Immediate reuse on the freeing stream.
  void* p = s.pool.allocate_async(64 * KiB, 256, s1);
  s.m.enqueue(s1, 100us);  // a kernel reads p
  s.pool.deallocate_async(p, 64 * KiB, 256, s1);
  void* again = s.pool.allocate_async(64 * KiB, 256, s1);
  REQUIRE(again == p);
  s.pool.deallocate_async(again, 64 * KiB, 256, s1);

  // Another stream: it gets the block but is made to wait for s1's work on the device.
  const auto calls = s.pool->statistics().upstream_allocations;
  void* q = s.pool.allocate_async(64 * KiB, 256, s2);
  REQUIRE(q == p);                                                  // reused...
  REQUIRE(s.pool->statistics().upstream_allocations == calls);       // ...with no upstream call
  REQUIRE(s.pool->statistics().stream_steals == 1);
  auto after = ops.create_event(d);
  ops.record(after, s2);  // whatever s2 runs next starts after s1's 100 µs
  REQUIRE_FALSE(ops.query(after));
  s.m.advance(d, 99us);
  REQUIRE_FALSE(ops.query(after));
  s.m.advance(d, 1us);
  REQUIRE(ops.query(after));
  REQUIRE(s.m.now(d) == 100us);  // the host never waited: the clock moved only by advance

  // Once the event has completed, the next stream takes a block without waiting at all.
  s.pool.deallocate_async(q, 64 * KiB, 256, s2);
  s.m.enqueue(s2, 10us);
  s.m.advance(d, 10us);  // s2 is idle again
  void* r = s.pool.allocate_async(64 * KiB, 256, s3);
  REQUIRE(r == p);
  auto e3 = ops.create_event(d);
  ops.record(e3, s3);
  REQUIRE(ops.query(e3));  // s3 was not held back
  s.pool.deallocate_async(r, 64 * KiB, 256, s3);
  ops.destroy_event(after);
  ops.destroy_event(e3);
}

TEST_CASE("pool: release merges a segment cached by several streams", "[pool][streams]") {
  judged_setup s;
  const device_id d{0};
  const auto s1 = s.m.create_stream(d);
  const auto s2 = s.m.create_stream(d);
  void* a = s.pool.allocate_async(64 * KiB, 256, s1);
  void* b = s.pool.allocate_async(64 * KiB, 256, s1);
  s.m.enqueue(s2, 30us);
  s.pool.deallocate_async(a, 64 * KiB, 256, s1);
  s.pool.deallocate_async(b, 64 * KiB, 256, s2);  // b now sits in s2's cache, between s1's blocks
  REQUIRE(s.pool->snapshot().segments.at(0).blocks.size() == 3);
  REQUIRE(s.pool->release() == 2 * MiB);  // merged for s1 (which waits for s2 on the device), then freed
  REQUIRE(s.device_used() == 0);
}

TEST_CASE("pool: record_stream holds a block until the other stream's work is done", "[pool][streams]") {
  judged_setup s;
  const device_id d{0};
  const auto s1 = s.m.create_stream(d);
  const auto s2 = s.m.create_stream(d);
  void* p = s.pool.allocate_async(128 * KiB, 256, s1);
  s.pool.record_stream(p, s2);
  s.m.enqueue(s2, 50us);  // s2 still reads p
  s.pool.deallocate_async(p, 128 * KiB, 256, s1);
  auto st = s.pool->statistics();
  REQUIRE(st.allocated_bytes.current == 0);
  REQUIRE(st.active_bytes.current == 128 * 1024);  // freed but not idle
  void* q = s.pool.allocate_async(128 * KiB, 256, s1);
  REQUIRE(q != p);
  s.m.advance(d, 50us);
  void* r = s.pool.allocate_async(128 * KiB, 256, s1);  // p's events completed: it is free again
  REQUIRE(r == p);
  REQUIRE_THROWS_AS(s.pool.record_stream(static_cast<char*>(r) + 256, s2), mgm::logic_error);
  s.pool.deallocate_async(q, 128 * KiB, 256, s1);
  s.pool.deallocate_async(r, 128 * KiB, 256, s1);
  REQUIRE(s.pool->statistics().active_bytes.current == 0);
}

TEST_CASE("pool: during graph capture, a private pool, no event query, segments under the relaxed mode",
          "[pool][capture]") {
  judged_setup s;
  const device_id d{0};
  const auto st = s.m.create_stream(d);
  const auto other = s.m.create_stream(d);
  void* warm = s.pool.allocate_async(256 * KiB, 256, st);
  s.pool.deallocate_async(warm, 256 * KiB, 256, st);
  void* elsewhere = s.pool.allocate_async(4 * MiB, 256, other);  // cached on another stream
  s.pool.deallocate_async(elsewhere, 4 * MiB, 256, other);
  const auto mallocs = s.m.modelled(d).count(mgm::sim::driver_call::malloc);

  s.m.begin_capture(st);  // global mode: a cudaMalloc or an event query would invalidate it
  void* p = s.pool.allocate_async(256 * KiB, 256, st);
  REQUIRE(p != warm);  // the capture's own memory, not the shared cache's
  void* q = s.pool.allocate_async(4 * MiB, 256, st);
  REQUIRE(q != elsewhere);  // and no event on `other` to take its block
  REQUIRE(s.m.modelled(d).count(mgm::sim::driver_call::malloc) == mallocs + 2);
  s.pool.deallocate_async(p, 256 * KiB, 256, st);
  s.pool.deallocate_async(q, 4 * MiB, 256, st);
  const mgm::capture_pool_id id = s.pool->capture_pool_of(st);
  const auto graph = s.m.end_capture(st);  // throws if the capture was invalidated
  void* after = s.pool.allocate_async(4 * MiB, 256, st);  // now it may take other's block
  REQUIRE(after == elsewhere);
  s.pool.deallocate_async(after, 4 * MiB, 256, st);
  s.m.destroy(graph);
  s.pool->release_capture_pool(id);
  s.pool->check_invariants();
}

TEST_CASE("pool: captures share a named private pool", "[pool][capture]") {
  judged_setup s;
  const device_id d{0};
  const auto st = s.m.create_stream(d);
  const auto shared = mgm::capture_pool_id::make();
  REQUIRE_THROWS_AS(s.pool->begin_capture_pool(st, shared), mgm::logic_error);  // not capturing
  s.m.begin_capture(st);
  s.pool->begin_capture_pool(st, shared);
  REQUIRE_THROWS_AS(s.pool->begin_capture_pool(st, shared), mgm::logic_error);  // bound already
  REQUIRE(s.pool->capture_pool_of(st) == shared);
  void* a = s.pool.allocate_async(MiB, 256, st);
  s.pool.deallocate_async(a, MiB, 256, st);
  const auto first = s.m.end_capture(st);
  s.m.begin_capture(st);
  s.pool->begin_capture_pool(st, shared);
  void* b = s.pool.allocate_async(MiB, 256, st);  // the first graph's memory: they replay in turn
  REQUIRE(b == a);
  s.pool.deallocate_async(b, MiB, 256, st);
  const auto second = s.m.end_capture(st);
  s.m.enqueue(st, 1ms);
  s.m.launch(first, st);
  s.m.launch(second, st);  // in turn, on one stream: they may share memory
  const auto elsewhere = s.m.create_stream(d);
  s.m.launch(first, st);
  REQUIRE(s.m.hazards().empty());
  REQUIRE_THROWS_AS(s.m.launch(second, elsewhere), mgm::sim::stream_hazard);  // at the same time: caught
  REQUIRE(s.m.hazards().at(0).kind == mgm::sim::hazard_kind::graph_replay);
  s.m.clear_hazards();
  s.m.destroy(first);
  s.m.destroy(second);
  s.m.synchronize(d);
  s.pool->release_capture_pool(shared);
  REQUIRE(s.pool->reserved_bytes() != 0);  // one capture still uses it
  s.pool->release_capture_pool(shared);
  REQUIRE(s.pool->reserved_bytes() == 0);  // its segment went back
  REQUIRE_THROWS_AS(s.pool->release_capture_pool(shared), mgm::logic_error);
  s.pool->check_invariants();
}

TEST_CASE("pool: bad input is reported and changes nothing", "[pool]") {
  judged_setup s;
  log_capture log;
  void* p = s.pool.allocate(4096);
  int local = 0;
  const std::uint64_t refused = mgm::refused_deallocations();
  s.pool.deallocate(&local, 4);
  REQUIRE(mgm::refused_deallocations() == refused + 1);  // counted, for a caller that must know
  s.pool.deallocate(p, 4096);
  REQUIRE(mgm::refused_deallocations() == refused + 1);  // a good free is not
  s.pool.deallocate(p, 4096);  // a double free
  REQUIRE(mgm::refused_deallocations() == refused + 2);
  REQUIRE(std::string{mgm::last_refused_deallocation()}.find("not a live allocation of this pool") != std::string::npos);
  REQUIRE(log.messages.size() == 2);
  REQUIRE(log.messages[1].find("not a live allocation of this pool") != std::string::npos);
  REQUIRE(s.pool->statistics().allocated_bytes.current == 0);
  REQUIRE_THROWS_AS(s.pool.allocate(100, 512), mgm::logic_error);  // above 256: not honoured
  REQUIRE_THROWS_AS(s.pool.allocate(100, 7), mgm::logic_error);
  void* q = s.pool.allocate(4096);
  REQUIRE(q == p);
  s.pool.deallocate(q, 4096);
}

TEST_CASE("pool: a release threshold bounds reserved memory", "[pool]") {
  mgm::pool_options o = plain();
  o.release_threshold_bytes = 24 * MiB;
  judged_setup s{"1GiB", o};
  void* a = s.pool.allocate(20 * MiB);
  void* b = s.pool.allocate(20 * MiB);
  s.pool.deallocate(a, 20 * MiB);
  REQUIRE(s.pool->reserved_bytes() == 20 * MiB);  // 40 reserved > 24: the idle one went back
  s.pool.deallocate(b, 20 * MiB);
  REQUIRE(s.pool->reserved_bytes() == 20 * MiB);
  REQUIRE(s.device_used() == 20 * MiB);
}

TEST_CASE("pool: the destructor returns everything, even leaked blocks", "[pool]") {
  mgm::sim::machine m{mgm::sim::parse_device_list("1GiB")};
  log_capture log;
  {
    sim_pool raw_pool{m.allocator(device_id{0}), plain()};
    mgm::sim::judged pool{m, raw_pool};
    (void)pool.allocate(5 * MiB);
    (void)pool.allocate(100);
  }
  REQUIRE(m.memory(device_id{0}).used_bytes == 0);
  REQUIRE(log.messages.size() == 1);
  REQUIRE(log.messages[0].find("2 blocks still allocated") != std::string::npos);
}

TEST_CASE("pool: snapshots list every segment and block, with tags", "[pool][snapshot]") {
  judged_setup s;
  void* a = nullptr;
  {
    mgm::tag_scope tag{"layer3.fc"};
    a = s.pool.allocate(1000);
  }
  void* b = s.pool.allocate(3 * MiB);
  const auto snap = s.pool->snapshot();
  REQUIRE(snap.segments.size() == 2);
  std::size_t blocks = 0;
  for (const auto& seg : snap.segments) {
    std::size_t covered = 0;
    for (const auto& blk : seg.blocks) covered += blk.size;
    REQUIRE(covered == seg.size);  // blocks tile their segment
    blocks += seg.blocks.size();
  }
  REQUIRE(blocks == 4);
  REQUIRE(snap.bytes_in(mgm::block_snapshot::state_type::allocated) == 1024 + 3 * MiB);
  const std::string json = snap.to_json();
  REQUIRE(json.find("\"tag\":\"layer3.fc\"") != std::string::npos);
  REQUIRE(json.find("\"requested\":1000") != std::string::npos);
  REQUIRE(json.find("\"pool\":\"small\"") != std::string::npos);
  const std::string trace = snap.to_chrome_trace();
  REQUIRE(trace.find("\"traceEvents\"") != std::string::npos);
  REQUIRE(trace.find("\"name\":\"allocated layer3.fc\"") != std::string::npos);
  s.pool.deallocate(a, 1000);
  s.pool.deallocate(b, 3 * MiB);
}

TEST_CASE("pool: snapshot JSON is valid whatever the tag holds", "[pool][snapshot]") {
  judged_setup s;
  void* a = nullptr;
  {
    mgm::tag_scope tag{"say \"hi\"\n\tback\\slash \xff"};  // quotes, controls, a byte that is not UTF-8
    a = s.pool.allocate(4096);
  }
  const auto snap = s.pool->snapshot();
  const auto json = nlohmann::json::parse(snap.to_json());
  const auto& block = json["segments"][0]["blocks"][0];
  REQUIRE(block["tag"] == "say \"hi\"\n\tback\\slash \xef\xbf\xbd");  // U+FFFD for the stray byte
  REQUIRE(block["state"] == "allocated");
  REQUIRE(block["address"].get<std::string>().starts_with("0x"));
  const auto trace = nlohmann::json::parse(snap.to_chrome_trace());
  REQUIRE(trace["displayTimeUnit"] == "ns");
  REQUIRE(trace["traceEvents"].size() == 2 + snap.segments[0].blocks.size());
  s.pool.deallocate(a, 4096);
}

TEST_CASE("pool options: MGM_ALLOC_CONF", "[pool][options]") {
  const auto o = mgm::pool_options::parse("max_split_size_mb:128, release_threshold:4GiB,round:512");
  REQUIRE(o.max_split_bytes == 128 * MiB);
  REQUIRE(o.release_threshold_bytes == (std::size_t{4} << 30));
  REQUIRE(o.round_bytes == 512);
  REQUIRE(o.small_segment_bytes == 2 * MiB);
  REQUIRE(mgm::pool_options::parse("") == mgm::pool_options{});
  REQUIRE(mgm::pool_options::parse(mgm::pool_options{}.to_string()) == mgm::pool_options{});
  REQUIRE(mgm::pool_options::parse("max_split_size:unlimited").max_split_bytes == mgm::pool_options::unlimited);
  REQUIRE(mgm::pool_options{}.huge_request_bytes == 512 * MiB);
  REQUIRE(mgm::pool_options::parse("huge_request:1GiB").huge_request_bytes == 1024 * MiB);
  REQUIRE(mgm::pool_options::parse("huge_request:unlimited").huge_request_bytes == mgm::pool_options::unlimited);
  REQUIRE(mgm::pool_options{}.to_string().find("huge_request:536870912") != std::string::npos);
  const auto column_of = [](const char* text) -> std::size_t {
    try {
      (void)mgm::pool_options::parse(text);
    } catch (const mgm::parse_error& e) {
      return e.column();
    }
    return 0;
  };
  REQUIRE(column_of("round:256,colour:blue") == 11);
  REQUIRE(column_of("round") == 1);
  REQUIRE(column_of("small_segment:2XB") == 16);
  REQUIRE_THROWS_WITH(mgm::pool_options::parse("round:300"), Catch::Contains("power of two"));
  REQUIRE_THROWS_WITH(mgm::pool_options::parse("small_request:4MiB"), Catch::Contains("small_segment"));
  REQUIRE_THROWS_WITH(mgm::pool_options::parse("large_segment:1000"), Catch::Contains("multiple of round"));
}

TEST_CASE("pool options: every PYTORCH_CUDA_ALLOC_CONF key not honoured is refused by name, with a reason", "[pool][options]") {
  for (const char* key : {"garbage_collection_threshold", "roundup_power2_divisions", "roundup_bypass_threshold_mb",
                          "max_non_split_rounding_mb", "release_lock_on_cudamalloc", "release_lock_on_hipmalloc",
                          "pinned_use_cuda_host_register", "pinned_num_register_threads", "pinned_use_background_threads",
                          "pinned_reserve_segment_size_mb", "backend",
                          "per_process_memory_fraction", "graph_capture_record_stream_reuse"}) {
    INFO(key);
    // As pasted from PyTorch: the refused key among honoured ones, never half-applied.
    const std::string conf = std::string{"max_split_size_mb:128,"} + key + ":1,expandable_segments:True";
    try {
      (void)mgm::pool_options::parse(conf);
      FAIL("accepted");
    } catch (const mgm::parse_error& e) {
      const std::string what = e.what();
      const std::string lead = std::string{key} + " (a PYTORCH_CUDA_ALLOC_CONF key) is not honoured: ";
      const auto at = what.find(lead);
      REQUIRE(at != std::string::npos);
      CHECK(what.size() >= at + lead.size() + 40);  // a reason, a sentence long, follows
      CHECK(e.column() == 23);
    }
  }
  // The keys it honours, in PyTorch's spelling.
  const auto o = mgm::pool_options::parse("max_split_size_mb:64,expandable_segments:False");
  CHECK(o.max_split_bytes == 64 * MiB);
}

TEST_CASE("multi_device_pool: a pool per device, made on first use", "[pool][multi]") {
  auto m = mgm::sim::machine::preset("dgx-h100");
  mgm::multi_device_pool<mgm::sim::device_allocator> pools{
      m.device_count(), [&](device_id d) { return m.allocator(d); }, plain()};
  REQUIRE_FALSE(pools.has_pool(device_id{3}));
  void* a = pools.allocate(device_id{3}, 5 * MiB, 256, m.default_stream(device_id{3}));
  void* b = pools.allocate(device_id{5}, 100, 256, m.default_stream(device_id{5}));
  REQUIRE(m.owner_of(a) == device_id{3});
  REQUIRE(m.owner_of(b) == device_id{5});
  REQUIRE(pools.has_pool(device_id{3}));
  REQUIRE_FALSE(pools.has_pool(device_id{4}));
  REQUIRE(pools.statistics(device_id{3}).allocated_bytes.current == 5 * MiB);
  REQUIRE(pools.total_statistics().reserved_bytes.current == 20 * MiB + 4 * MiB);  // a 4 MiB small segment on an 80 GiB device
  REQUIRE_THROWS_AS(pools.pool(device_id{8}), mgm::logic_error);
  pools.deallocate(device_id{3}, a, 5 * MiB, 256, m.default_stream(device_id{3}));
  pools.deallocate(device_id{5}, b, 100, 256, m.default_stream(device_id{5}));
  REQUIRE(pools.release_all() == 24 * MiB);
  for (int d = 0; d < 8; ++d) REQUIRE(m.memory(device_id{d}).used_bytes == 0);
}

TEST_CASE("pool: class template argument deduction, as the README writes it", "[pool]") {
  auto machine = mgm::sim::machine::preset("dgx-h100");
  mgm::caching_pool pool{machine.allocator(device_id{0})};
  mgm::sim::judged judged_pool{machine, pool};
  REQUIRE(pool.expandable());  // the default on the simulator
  STATIC_REQUIRE(std::is_same_v<decltype(pool), mgm::caching_pool<mgm::sim::device_allocator, true>>);
  STATIC_REQUIRE(std::is_same_v<decltype(judged_pool), mgm::sim::judged<decltype(pool)>>);
  void* p = judged_pool.allocate_async(1000, 256, machine.default_stream(device_id{0}));
  judged_pool.deallocate_async(p, 1000, 256, machine.default_stream(device_id{0}));
  REQUIRE(pool.statistics().to_string().find("allocated: 0 B") != std::string::npos);
  REQUIRE(machine.hazards().empty());
}

// ---- the pool's lock ---------------------------------------------------------------------------

TEST_CASE("pool_mutex: mutual exclusion and progress under contention", "[pool][lock]") {
  mgm::detail::pool_mutex mu;
  std::uint64_t counter = 0;  // plain: only the lock orders its updates (tsan checks it)
  std::atomic<int> inside{0};
  std::atomic<bool> overlapped{false};
  constexpr int threads = 4;
  constexpr int rounds = 20000;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&] {
      for (int i = 0; i < rounds; ++i) {
        const std::lock_guard lock{mu};
        if (inside.fetch_add(1) != 0) overlapped = true;
        ++counter;
        inside.fetch_sub(1);
      }
    });
  }
  for (auto& t : ts) t.join();
  REQUIRE_FALSE(overlapped);
  REQUIRE(counter == std::uint64_t{threads} * rounds);
}

TEST_CASE("pool_mutex: a waiter sleeps while the lock is held long, and gets it when it is given back", "[pool][lock]") {
  mgm::detail::pool_mutex mu;
  mu.lock();
  REQUIRE_FALSE(mu.try_lock());
  std::atomic<bool> got{false};
  std::thread waiter{[&] {
    const std::lock_guard lock{mu};
    got = true;
  }};
  std::this_thread::sleep_for(std::chrono::milliseconds{20});  // past its spins: asleep on the word
  REQUIRE_FALSE(got.load());
  mu.unlock();
  waiter.join();
  REQUIRE(got.load());
  REQUIRE(mu.try_lock());
  mu.unlock();
}
