// What the simulator's judge found in the caching pool (review of 992d924), each finding first
// shown as a failing test and then fixed (issue 14, "The pool, safe under every stream, graph and
// failure"), plus the contracts the pool states where it cannot know (a stream destroyed
// without forget_stream).
#include "pool_test_support.hpp"

#include <mgm/pool/caching_pool.hpp>
#include <mgm/sim/judged.hpp>
#include <mgm/sim/machine.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <vector>

using mgm::device_id;
using namespace std::chrono_literals;

using namespace pool_test;

// Was a hazard: a block allocated and freed inside a graph capture went back to the shared cache,
// so the next ordinary allocation received the graph's buffer, which every replay overwrites.
// Captures now allocate from private pools (as PyTorch's graph pools).
TEST_CASE("pool: a graph's buffer is not handed to ordinary work after the capture", "[pool][graph][hazard]") {
  for (const bool expandable : {false, true}) {
    INFO((expandable ? "expandable segments" : "plain segments"));
    mgm::sim::machine m{mgm::sim::parse_device_list("1GiB"), {mgm::sim::oracle_mode::record}};
    mgm::pool_options o;
    o.expandable_segments = expandable;
    sim_pool raw{m.allocator(device_id{0}), o};
    mgm::sim::judged pool{m, raw};
    const auto cap = m.create_stream(device_id{0});
    void* warm = pool.allocate_async(256 * KiB, 256, cap);
    void* big_warm = pool.allocate_async(64 * MiB, 256, cap);
    pool.deallocate_async(warm, 256 * KiB, 256, cap);
    pool.deallocate_async(big_warm, 64 * MiB, 256, cap);
    m.begin_capture(cap);
    const mgm::capture_pool_id id = raw.capture_pool_of(cap);
    void* g = pool.allocate_async(256 * KiB, 256, cap);
    void* big = pool.allocate_async(64 * MiB, 256, cap);  // a new private segment, under the relaxed mode
    REQUIRE(g != warm);
    REQUIRE(big != big_warm);
    m.enqueue(cap, 1ms);
    pool.deallocate_async(g, 256 * KiB, 256, cap);
    void* again = pool.allocate_async(256 * KiB, 256, cap);  // the capture reuses its own memory
    REQUIRE(again == g);
    pool.deallocate_async(again, 256 * KiB, 256, cap);
    const auto graph = m.end_capture(cap);
    void* ordinary = pool.allocate_async(256 * KiB, 256, cap);  // the shared cache's block, not g
    REQUIRE(ordinary == warm);
    m.launch(graph, cap);  // writes g and big
    pool.deallocate_async(ordinary, 256 * KiB, 256, cap);
    pool.deallocate_async(big, 64 * MiB, 256, cap);  // freed after the capture: still the graph's
    void* other = pool.allocate_async(64 * MiB, 256, cap);
    REQUIRE(other != big);
    pool.deallocate_async(other, 64 * MiB, 256, cap);
    raw.check_invariants();
    // The contract: destroy the graph, let its launches finish, then release its pool.
    m.destroy(graph);
    m.synchronize(device_id{0});
    const auto reserved = raw.reserved_bytes();
    raw.release_capture_pool(id);
    REQUIRE(raw.reserved_bytes() < reserved);  // its idle segments went back to the device
    REQUIRE_THROWS_AS(raw.release_capture_pool(id), mgm::logic_error);
    raw.check_invariants();
    raw.release();
    REQUIRE(raw.reserved_bytes() == 0);
    const auto hazards = m.hazards();
    for (const auto& h : hazards) UNSCOPED_INFO(mgm::sim::name(h.kind) << ": " << h.message);
    REQUIRE(hazards.empty());
  }
}

// Was a hazard: slots are keyed by the raw stream handle and were never forgotten, so a new
// stream that got a destroyed stream's handle inherited its cache, with the old stream's work
// pending. A stream is now forgotten before it is destroyed (`forget_stream`).
TEST_CASE("pool: a new stream with a forgotten stream's handle starts with an empty cache", "[pool][streams][hazard]") {
  judged_pool t;
  const auto old_stream = t.m.create_stream(device_id{0});
  void* p = t.pool.allocate_async(64 * KiB, 256, old_stream);
  void* live = t.pool.allocate_async(64 * KiB, 256, old_stream);  // still allocated when the stream goes
  t.m.enqueue(old_stream, 1ms);
  t.pool.deallocate_async(p, 64 * KiB, 256, old_stream);
  t.pool->forget_stream(old_stream);
  t.m.destroy_stream(old_stream);
  const auto reborn = t.m.create_stream(device_id{0});
  REQUIRE(reborn == old_stream);
  void* q = t.pool.allocate_async(64 * KiB, 256, reborn);  // not the old stream's block: its work runs
  REQUIRE(q != p);
  t.pool.deallocate_async(q, 64 * KiB, 256, reborn);
  t.m.advance(device_id{0}, 1ms);  // the old stream's work is done: its last event completed
  t.pool.deallocate_async(live, 64 * KiB, 256, reborn);  // so `live` may be freed in the new stream's order
  // Its cached blocks now serve the default stream.
  const auto legacy = t.m.default_stream(device_id{0});
  void* r = t.pool.allocate_async(64 * KiB, 256, legacy);
  t.pool.deallocate_async(r, 64 * KiB, 256, legacy);
  REQUIRE(t.pool->statistics().allocated_bytes.current == 0);
  t.pool->release();
  REQUIRE(t.pool->reserved_bytes() == 0);
  REQUIRE(t.m.memory(device_id{0}).used_bytes == 0);
  REQUIRE_THROWS_AS(t.pool->forget_stream(mgm::stream_ref{}), mgm::logic_error);
  t.require_no_hazard();
}

// The same without forget_stream: the pool cannot tell a destroyed stream from a new one that got
// its handle (CUDA reports no generation), so its header makes forget_stream the contract. The
// judge catches a caller that breaks it.
TEST_CASE("pool contract: a stream destroyed without forget_stream is caught by the judge", "[pool][streams][hazard]") {
  judged_pool t;
  const auto old_stream = t.m.create_stream(device_id{0});
  void* p = t.pool.allocate_async(64 * KiB, 256, old_stream);
  t.m.enqueue(old_stream, 1ms);
  t.pool.deallocate_async(p, 64 * KiB, 256, old_stream);
  t.m.destroy_stream(old_stream);  // without forget_stream: the contract is broken
  const auto reborn = t.m.create_stream(device_id{0});
  void* q = t.pool.allocate_async(64 * KiB, 256, reborn);
  t.pool.deallocate_async(q, 64 * KiB, 256, reborn);
  const auto hazards = t.m.hazards();
  REQUIRE(hazards.size() == 1);
  REQUIRE(hazards[0].kind == mgm::sim::hazard_kind::reuse);
  REQUIRE_THAT(hazards[0].message, Catch::Contains("destroyed stream with this handle"));
}

// Was a hazard: an event was recorded on a stream after it was destroyed (the pool records
// lazily on the freeing stream when another stream first needs its blocks).
TEST_CASE("pool: nothing is recorded on a forgotten stream", "[pool][streams][hazard]") {
  judged_pool t;
  const auto gone = t.m.create_stream(device_id{0});
  const auto other = t.m.create_stream(device_id{0});
  void* p = t.pool.allocate_async(64 * KiB, 256, gone);
  t.pool.deallocate_async(p, 64 * KiB, 256, gone);
  void* used = t.pool.allocate_async(KiB, 256, other);
  t.pool.record_stream(used, gone);
  t.pool->forget_stream(gone);  // waits for `gone`: `used` can no longer have an event recorded there
  t.m.destroy_stream(gone);
  void* q = t.pool.allocate_async(64 * KiB, 256, other);  // from the default stream's cache, or new memory
  t.pool.deallocate_async(q, 64 * KiB, 256, other);
  t.pool.deallocate_async(used, KiB, 256, other);
  t.require_no_hazard();
}

// Was a hazard: a synchronous allocate() was judged as a hand-out to the host while the default
// stream still used the block. Its contract is now the default stream's order (as RMM's), which
// is how the host reaches device memory; a pool of host memory waits for that stream first.
TEST_CASE("pool: a synchronous allocate is in the default stream's order", "[pool][hazard]") {
  judged_pool t;
  const auto legacy = t.m.default_stream(device_id{0});
  void* p = t.pool.allocate_async(MiB, 256, legacy);
  t.m.enqueue(legacy, 1ms);
  t.pool.deallocate_async(p, MiB, 256, legacy);
  void* q = t.pool.allocate(MiB);
  REQUIRE(q == p);
  t.pool.deallocate(q, MiB);
  t.require_no_hazard();
}

TEST_CASE("pool: a host pool's synchronous allocate waits for the default stream", "[pool][hazard]") {
  mgm::sim::machine m{mgm::sim::parse_device_list("1GiB"), {mgm::sim::oracle_mode::record}};
  mgm::caching_pool<mgm::sim::pinned_host_allocator> raw{m.host_allocator(), plain()};
  mgm::sim::judged pool{m, raw};
  const auto legacy = m.default_stream(device_id{0});
  void* p = pool.allocate_async(MiB, 256, legacy);
  m.enqueue(legacy, 1ms);  // the device still reads the pinned buffer
  pool.deallocate_async(p, MiB, 256, legacy);
  void* q = pool.allocate(MiB);  // the host may write it at once: the pool waited
  REQUIRE(q == p);
  REQUIRE(m.now(device_id{0}) == 1ms);
  pool.deallocate(q, MiB);
  REQUIRE(m.hazards().empty());
}

// Was a hazard: free epochs were 32 bits and a recorded, completed event was trusted forever:
// after 2^31 frees on stream S, another stream took a block S freed while S's work was pending,
// and was not made to wait. Slots now count in 64 bits, and an event 2^31 or more frees old is
// recorded anew.
//
// T takes a block S freed (an event is recorded on S and found complete); `frees_on` makes 2^31
// and more frees on S; then S frees a block with its work pending and T takes it: T must wait.
template <class Pool, class ManyFrees>
void steal_after_many_frees(ManyFrees&& frees_on) {
  mgm::sim::machine m{mgm::sim::parse_device_list("1GiB"), {mgm::sim::oracle_mode::record}};
  Pool raw{m.allocator(device_id{0}), plain()};
  mgm::sim::judged pool{m, raw};
  const auto s = m.create_stream(device_id{0});
  const auto t = m.create_stream(device_id{0});
  void* first = pool.allocate_async(KiB, 256, s);
  pool.deallocate_async(first, KiB, 256, s);
  void* keep = pool.allocate_async(KiB, 256, t);  // stolen from S; T's own cache stays empty of this size
  frees_on(raw, s);
  void* x = pool.allocate_async(KiB, 256, s);
  m.enqueue(s, 1ms);  // work that uses x
  pool.deallocate_async(x, KiB, 256, s);
  void* y = pool.allocate_async(KiB, 256, t);  // takes x: must wait for S's work
  REQUIRE(y == x);
  if constexpr (Pool::statistics_enabled) REQUIRE(raw.statistics().stream_steals >= 2);
  pool.deallocate_async(y, KiB, 256, t);
  pool.deallocate_async(keep, KiB, 256, t);
  m.synchronize(device_id{0});
  REQUIRE(m.now(device_id{0}) == 1ms);  // T's work was made to wait for S's
  REQUIRE(m.hazards().empty());
}

// The test hook skips the 2^31 frees.
TEST_CASE("pool: a free epoch 2^31 frees past the last event does not trust it", "[pool][hazard]") {
  steal_after_many_frees<sim_pool>([](sim_pool& raw, mgm::stream_ref s) {
    raw.skip_free_epochs_for_testing(s, (std::uint64_t{1} << 31) + 2);
  });
}

// The 2^31 frees made: about two minutes at -O2 and ten in the Debug build, so it is not in the
// default run (CTest leaves [slow] out): `mgm_unit_tests "[slow]"`.
TEST_CASE("pool: 2^31 frees on one stream, then another stream takes its block", "[pool][hazard][.][slow]") {
  using nostats_pool = mgm::caching_pool<mgm::sim::device_allocator, false>;
  steal_after_many_frees<nostats_pool>([](nostats_pool& raw, mgm::stream_ref s) {
    for (std::uint64_t i = 0; i < (std::uint64_t{1} << 31) + 2; ++i) {  // unjudged: the judge would only slow them
      raw.deallocate_async(raw.allocate_async(4 * KiB, 256, s), 4 * KiB, 256, s);
    }
  });
}

// Was finding 6: inactive_split_bytes' peak always equalled its current value and its total
// stayed 0 (the update was written to a copy).
TEST_CASE("pool: inactive split bytes keep their peak and total", "[pool][statistics]") {
  judged_pool t;
  void* p = t.pool.allocate(4 * KiB);  // splits a 2 MiB small segment: the rest is inactive
  t.pool.deallocate(p, 4 * KiB);       // merges back: an idle segment, nothing inactive
  const auto st = t.pool->statistics();
  REQUIRE(st.inactive_split_bytes.current == 0);
  REQUIRE(st.inactive_split_bytes.peak == static_cast<std::int64_t>(2 * MiB - 4 * KiB));
  REQUIRE(st.inactive_split_bytes.total >= 2 * MiB - 4 * KiB);
  t.require_no_hazard();
}

// Was finding 7: with a release threshold, every free above it ran a trim that walked every
// segment. Now a trim runs only when reserved passes the threshold by an eighth, over the idle
// segments (indexed), and takes reserved back to the threshold.
TEST_CASE("pool: a release threshold trims only past its margin, back to the threshold", "[pool][threshold]") {
  mgm::sim::machine m{mgm::sim::parse_device_list("8GiB"), {mgm::sim::oracle_mode::record}};
  mgm::pool_options o = plain();
  o.release_threshold_bytes = std::size_t{1} << 30;
  sim_pool raw{m.allocator(device_id{0}), o};
  mgm::sim::judged pool{m, raw};
  std::vector<void*> live;
  for (int i = 0; i < 200; ++i) live.push_back(pool.allocate(12 * MiB));  // 200 segments, 2.4 GiB
  void* keep = pool.allocate(4 * KiB);
  for (int i = 0; i < 1000; ++i) pool.deallocate(pool.allocate(4 * KiB), 4 * KiB);  // nothing idle: no trim
  REQUIRE(raw.statistics().upstream_frees == 0);
  for (int i = 0; i < 150; ++i) {
    pool.deallocate(live.back(), 12 * MiB);
    live.pop_back();
  }
  const std::size_t reserved = raw.reserved_bytes();
  REQUIRE(reserved <= (std::size_t{1} << 30) + (std::size_t{1} << 27));  // at most threshold + margin
  REQUIRE(reserved >= (std::size_t{1} << 30) - 12 * MiB);
  REQUIRE(raw.statistics().upstream_frees > 0);
  raw.check_invariants();
  pool.deallocate(keep, 4 * KiB);
  for (void* p : live) pool.deallocate(p, 12 * MiB);
  REQUIRE(m.hazards().empty());
}

// Was finding 8: while record_stream blocks were pending, every allocation queried every pending
// event. Processing now stops at each stream's first incomplete event (events on a stream
// complete in order), as PyTorch's caching allocator does.
TEST_CASE("pool: pending frees are queried up to each stream's first incomplete event", "[pool][pending]") {
  judged_pool t;
  const device_id d{0};
  const auto s1 = t.m.create_stream(d);
  const auto s2 = t.m.create_stream(d);
  std::vector<void*> blocks;
  for (int i = 0; i < 50; ++i) blocks.push_back(t.pool.allocate_async(64 * KiB, 256, s1));
  for (void* p : blocks) t.pool.record_stream(p, s2);
  t.m.enqueue(s2, 1ms);  // s2's work runs: every event recorded on it at the frees is pending
  for (void* p : blocks) t.pool.deallocate_async(p, 64 * KiB, 256, s1);
  REQUIRE(t.pool->statistics().active_bytes.current == static_cast<std::int64_t>(50 * 64 * KiB));
  const auto queries = [&] { return t.m.modelled(d).count(mgm::sim::driver_call::event_query); };
  const auto before = queries();
  void* q = t.pool.allocate_async(64 * KiB, 256, s1);
  REQUIRE(queries() - before == 1);  // the first of s2's events only
  t.pool.deallocate_async(q, 64 * KiB, 256, s1);
  t.m.advance(d, 1ms);  // s2 is done: every pending block comes back at the next allocation
  void* r = t.pool.allocate_async(64 * KiB, 256, s1);
  REQUIRE(t.pool->statistics().active_bytes.current == static_cast<std::int64_t>(64 * KiB));
  t.pool.deallocate_async(r, 64 * KiB, 256, s1);
  t.pool->check_invariants();
  t.require_no_hazard();
}
