// The simulator as a judge: an allocator that reuses memory unsafely is caught on its first
// unsafe reuse; safe reuse is never flagged; graphs, capture modes and dead streams follow CUDA.
#include <mgm/error.hpp>
#include <mgm/sim/judged.hpp>
#include <mgm/sim/machine.hpp>

#include "log_capture.hpp"
#include "sizes.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstddef>
#include <map>
#include <thread>
#include <vector>

using mgm::device_id;
using mgm::sim::hazard_kind;
using namespace std::chrono_literals;

namespace {

// Test-only and unsafe on purpose: a freed block is reused at once by the next request of its
// size, whatever stream freed it and whatever work may still use it. No event, no wait.
class unsafe_allocator {
 public:
  using stream_ops_type = mgm::sim::stream_ops;
  explicit unsafe_allocator(mgm::sim::device_allocator upstream) : upstream_{upstream} {}
  ~unsafe_allocator() {
    for (auto& [bytes, ps] : cache_) {
      for (void* p : ps) upstream_.deallocate(p, bytes);
    }
  }
  unsafe_allocator(const unsafe_allocator&) = delete;
  unsafe_allocator& operator=(const unsafe_allocator&) = delete;

  void* allocate(std::size_t bytes, std::size_t alignment = 256) { return allocate_async(bytes, alignment, {}); }
  void deallocate(void* p, std::size_t bytes, std::size_t alignment = 256) noexcept {
    deallocate_async(p, bytes, alignment, {});
  }
  void* allocate_async(std::size_t bytes, std::size_t alignment, mgm::stream_ref s) {
    auto& ps = cache_[bytes];
    if (!ps.empty()) {
      void* p = ps.back();
      ps.pop_back();
      return p;
    }
    return upstream_.allocate_async(bytes, alignment, s);
  }
  void deallocate_async(void* p, std::size_t bytes, std::size_t, mgm::stream_ref) noexcept {
    cache_[bytes].push_back(p);
  }
  [[nodiscard]] stream_ops_type stream_ops() const noexcept { return upstream_.stream_ops(); }
  friend bool operator==(const unsafe_allocator& a, const unsafe_allocator& b) noexcept { return &a == &b; }
  friend device_id get_property(const unsafe_allocator& a, mgm::device_affinity) noexcept {
    return a.upstream_.device();
  }

 private:
  mgm::sim::device_allocator upstream_;
  std::map<std::size_t, std::vector<void*>> cache_;
};

struct setup {
  mgm::sim::machine m{mgm::sim::parse_device_list("2x1GiB")};
  unsafe_allocator unsafe{m.allocator(device_id{0})};
  mgm::sim::judged<unsafe_allocator> judged{m, unsafe};
  mgm::stream_ref s1 = m.create_stream(device_id{0});
  mgm::stream_ref s2 = m.create_stream(device_id{0});

  // A block used by 1 ms of work on `s`, then freed in `s`'s order: the work is still pending.
  void* busy_block(mgm::stream_ref s, std::size_t bytes = 64 * KiB) {
    void* p = judged.allocate_async(bytes, 256, s);
    m.enqueue(s, 1ms);
    judged.deallocate_async(p, bytes, 256, s);
    return p;
  }
};

}  // namespace

static_assert(mgm::stream_allocator<mgm::sim::judged<unsafe_allocator>>);
static_assert(mgm::platform_allocator<mgm::sim::judged<mgm::sim::device_allocator>>);
static_assert(mgm::has_property_with_value<mgm::sim::judged<mgm::sim::device_allocator>, mgm::device_affinity>);
static_assert(!mgm::vmm_allocator<mgm::sim::judged<mgm::sim::device_allocator>>);  // mapping past it would escape

TEST_CASE("judge: another stream's unsafe reuse is caught on the first reuse", "[judge]") {
  setup t;
  void* p = t.busy_block(t.s1);
  try {
    (void)t.judged.allocate_async(64 * KiB, 256, t.s2);
    FAIL("no hazard");
  } catch (const mgm::sim::stream_hazard& h) {
    REQUIRE(h.details().kind == hazard_kind::reuse);
    REQUIRE(h.details().address == reinterpret_cast<std::uintptr_t>(p));
    REQUIRE(h.details().bytes == 64 * KiB);
    REQUIRE(h.details().earlier_user == "stream 1 of sim device 0");
    REQUIRE(h.details().new_user == "stream 2 of sim device 0");
    REQUIRE(h.details().earlier_until == 1ms);
    REQUIRE(h.details().new_from == 0ns);
  }
  // stream_hazard is a logic_error, never a bad_alloc that an out-of-memory retry would swallow.
  static_assert(std::is_base_of_v<mgm::logic_error, mgm::sim::stream_hazard>);
  static_assert(!std::is_base_of_v<std::bad_alloc, mgm::sim::stream_hazard>);
  REQUIRE(t.m.hazards().size() == 1);
  // The block went back to the allocator unjudged; the judge recorded nothing for it.
  REQUIRE(t.m.oracle().tracked_ranges() == 1);  // the freed range, still in use until 1 ms
}

// A synchronous allocate of device memory is in the default stream's order (as RMM's): it may
// not take memory another stream still uses either.
TEST_CASE("judge: a synchronous allocation of a block still in use is caught", "[judge]") {
  setup t;
  (void)t.busy_block(t.s1);
  REQUIRE_THROWS_AS(t.judged.allocate(64 * KiB), mgm::sim::stream_hazard);
  REQUIRE(t.m.hazards().at(0).new_user == "the default stream of sim device 0");
  // After the host synchronised, the same reuse is safe.
  t.m.synchronize(device_id{0});
  void* p = t.judged.allocate(64 * KiB);
  t.judged.deallocate(p, 64 * KiB);
  REQUIRE(t.m.hazards().size() == 1);
}

TEST_CASE("judge: safe reuse is never flagged", "[judge]") {
  setup t;
  auto ops = t.m.streams();
  SECTION("the same stream: program order") {
    void* p = t.busy_block(t.s1);
    REQUIRE(t.judged.allocate_async(64 * KiB, 256, t.s1) == p);
    t.judged.deallocate_async(p, 64 * KiB, 256, t.s1);
  }
  SECTION("another stream that waited on an event recorded after the free") {
    void* p = t.busy_block(t.s1);
    auto e = ops.create_event(device_id{0});
    ops.record(e, t.s1);
    ops.wait(t.s2, e);
    REQUIRE(t.judged.allocate_async(64 * KiB, 256, t.s2) == p);
    t.judged.deallocate_async(p, 64 * KiB, 256, t.s2);
    ops.destroy_event(e);
  }
  SECTION("a wait passed on through a third stream") {
    const auto s3 = t.m.create_stream(device_id{0});
    void* p = t.busy_block(t.s1);
    auto e1 = ops.create_event(device_id{0});
    auto e3 = ops.create_event(device_id{0});
    ops.record(e1, t.s1);
    ops.wait(s3, e1);
    ops.record(e3, s3);
    ops.wait(t.s2, e3);
    REQUIRE(t.judged.allocate_async(64 * KiB, 256, t.s2) == p);
    t.judged.deallocate_async(p, 64 * KiB, 256, t.s2);
    ops.destroy_event(e1);
    ops.destroy_event(e3);
  }
  SECTION("another stream once the work is complete") {
    void* p = t.busy_block(t.s1);
    t.m.advance(device_id{0}, 1ms);
    REQUIRE(t.judged.allocate_async(64 * KiB, 256, t.s2) == p);
    t.judged.deallocate_async(p, 64 * KiB, 256, t.s2);
  }
  REQUIRE(t.m.hazards().empty());
}

TEST_CASE("judge: an event recorded before the free does not cover it", "[judge]") {
  setup t;
  auto ops = t.m.streams();
  auto e = ops.create_event(device_id{0});
  void* p = t.judged.allocate_async(64 * KiB, 256, t.s1);
  ops.record(e, t.s1);  // before the work that uses p
  t.m.enqueue(t.s1, 1ms);
  t.judged.deallocate_async(p, 64 * KiB, 256, t.s1);
  ops.wait(t.s2, e);
  REQUIRE_THROWS_AS(t.judged.allocate_async(64 * KiB, 256, t.s2), mgm::sim::stream_hazard);
  ops.destroy_event(e);
}

TEST_CASE("judge: record_stream users are waited for too", "[judge]") {
  mgm::sim::machine m{mgm::sim::parse_device_list("1GiB")};
  unsafe_allocator unsafe{m.allocator(device_id{0})};
  mgm::sim::judged judged{m, unsafe};
  const auto s1 = m.create_stream(device_id{0});
  const auto s2 = m.create_stream(device_id{0});
  void* p = judged.allocate_async(KiB, 256, s1);
  m.oracle().used_on(p, s2);  // what judged.record_stream reports, for allocators that have it
  m.enqueue(s2, 1ms);         // s2's work uses p
  judged.deallocate_async(p, KiB, 256, s1);
  REQUIRE_THROWS_AS(judged.allocate_async(KiB, 256, s1), mgm::sim::stream_hazard);  // s1 never waited on s2
  REQUIRE(m.hazards().at(0).earlier_user == "stream 2 of sim device 0");
}

TEST_CASE("judge: a graph's buffer reused after the capture is caught", "[judge][graph]") {
  setup t;
  const auto cap = t.m.create_stream(device_id{0});
  void* warm = t.judged.allocate_async(MiB, 256, cap);  // cached before the capture: no cudaMalloc in it
  t.judged.deallocate_async(warm, MiB, 256, cap);

  t.m.begin_capture(cap);
  void* g = t.judged.allocate_async(MiB, 256, cap);
  REQUIRE(g == warm);
  t.m.enqueue(cap, 2ms);  // recorded into the graph, not run
  t.judged.deallocate_async(g, MiB, 256, cap);
  REQUIRE(t.m.now(device_id{0}) == 0ns);
  const mgm::sim::graph graph = t.m.end_capture(cap);

  SECTION("by an ordinary allocation after the capture") {
    try {
      (void)t.judged.allocate_async(MiB, 256, t.s1);
      FAIL("no hazard");
    } catch (const mgm::sim::stream_hazard& h) {
      REQUIRE(h.details().kind == hazard_kind::reuse);
      REQUIRE(h.details().earlier_user == "graph " + std::to_string(graph.id));
      REQUIRE(h.details().earlier_until == std::chrono::nanoseconds::max());
    }
    // Even on the capturing stream, and even after the clock moved: the graph may run again.
    t.m.advance(device_id{0}, 10ms);
    REQUIRE_THROWS_AS(t.judged.allocate_async(MiB, 256, cap), mgm::sim::stream_hazard);
  }
  SECTION("safe once the graph is destroyed and its last launch ended") {
    t.m.launch(graph, t.s2);  // runs 2 ms on s2
    t.m.destroy(graph);
    REQUIRE_THROWS_AS(t.judged.allocate_async(MiB, 256, t.s1), mgm::sim::stream_hazard);  // the launch runs
    t.m.advance(device_id{0}, 2ms);
    void* p = t.judged.allocate_async(MiB, 256, t.s1);
    REQUIRE(p == warm);
    t.judged.deallocate_async(p, MiB, 256, t.s1);
    REQUIRE(t.m.hazards().size() == 1);
  }
  SECTION("a replay over memory someone else holds now is a hazard of its own") {
    mgm::sim::machine m{mgm::sim::parse_device_list("1GiB"), {mgm::sim::oracle_mode::record}};
    unsafe_allocator u{m.allocator(device_id{0})};
    mgm::sim::judged j{m, u};
    const auto c = m.create_stream(device_id{0});
    const auto other = m.create_stream(device_id{0});
    j.deallocate_async(j.allocate_async(MiB, 256, c), MiB, 256, c);
    m.begin_capture(c);
    void* q = j.allocate_async(MiB, 256, c);
    j.deallocate_async(q, MiB, 256, c);
    const auto gr = m.end_capture(c);
    void* stolen = j.allocate_async(MiB, 256, other);  // recorded, not thrown
    REQUIRE(stolen == q);
    m.launch(gr, c);
    const auto hz = m.hazards();
    REQUIRE(hz.size() == 2);
    REQUIRE(hz[0].kind == hazard_kind::reuse);
    REQUIRE(hz[1].kind == hazard_kind::graph_replay);
    j.deallocate_async(stolen, MiB, 256, other);
    m.destroy(gr);
  }
}

TEST_CASE("judge: a destroyed stream is dead, a new stream with its handle is another stream", "[judge][streams]") {
  setup t;
  auto ops = t.m.streams();
  const auto doomed = t.m.create_stream(device_id{0});
  void* p = t.busy_block(doomed);
  t.m.destroy_stream(doomed);
  auto e = ops.create_event(device_id{0});
  REQUIRE_THROWS_AS(ops.record(e, doomed), mgm::sim::stream_hazard);
  REQUIRE_THROWS_AS(ops.wait(doomed, e), mgm::sim::stream_hazard);
  REQUIRE_THROWS_AS(t.m.enqueue(doomed, 1us), mgm::sim::stream_hazard);
  REQUIRE_THROWS_AS((void)t.m.allocator(device_id{0}).allocate_async(KiB, 256, doomed), mgm::sim::stream_hazard);
  for (const auto& h : t.m.hazards()) REQUIRE(h.kind == hazard_kind::dead_stream);
  t.m.clear_hazards();

  const auto reborn = t.m.create_stream(device_id{0});
  REQUIRE(reborn == doomed);  // the handle value is reused, as CUDA may
  try {
    (void)t.judged.allocate_async(64 * KiB, 256, reborn);  // the old stream's block, work pending
    FAIL("no hazard");
  } catch (const mgm::sim::stream_hazard& h) {
    REQUIRE(h.details().kind == hazard_kind::reuse);
    REQUIRE(h.details().address == reinterpret_cast<std::uintptr_t>(p));
  }
  ops.record(e, reborn);  // the new stream is alive
  ops.destroy_event(e);
  REQUIRE_THROWS_AS(t.m.destroy_stream(t.m.default_stream(device_id{0})), mgm::logic_error);
}

TEST_CASE("judge: capture modes decide which calls a capture prohibits", "[judge][graph]") {
  mgm::sim::machine m{mgm::sim::parse_device_list("2x1GiB")};
  auto a = m.allocator(device_id{0});
  auto ops = m.streams();
  const auto s = m.create_stream(device_id{0});
  const auto call_from_other_thread = [&](mgm::capture_mode mode) {
    bool failed = false;
    std::thread other{[&] {
      const auto previous = ops.exchange_capture_mode(mode);
      try {
        a.deallocate(a.allocate(KiB), KiB);
      } catch (const mgm::cuda_error& e) {
        failed = e.code() == cudaErrorStreamCaptureUnsupported;
      }
      (void)ops.exchange_capture_mode(previous);
    }};
    other.join();
    return failed;
  };
  SECTION("global: this thread and other global-mode threads are prohibited") {
    m.begin_capture(s, mgm::capture_mode::global);
    REQUIRE_THROWS_AS(a.allocate(KiB), mgm::cuda_error);
    REQUIRE(call_from_other_thread(mgm::capture_mode::global));
    REQUIRE_FALSE(call_from_other_thread(mgm::capture_mode::local));
    REQUIRE_FALSE(call_from_other_thread(mgm::capture_mode::relaxed));
    REQUIRE_THROWS_AS(m.end_capture(s), mgm::cuda_error);  // invalidated
  }
  SECTION("thread-local: other threads are free") {
    m.begin_capture(s, mgm::capture_mode::local);
    REQUIRE_FALSE(call_from_other_thread(mgm::capture_mode::global));
    REQUIRE_THROWS_AS(a.allocate(KiB), mgm::cuda_error);  // its own thread still is not
    REQUIRE_THROWS_AS(m.end_capture(s), mgm::cuda_error);
  }
  SECTION("relaxed thread mode: cudaMalloc during a capture, as a pool's private segment needs") {
    m.begin_capture(s, mgm::capture_mode::global);
    const auto previous = ops.exchange_capture_mode(mgm::capture_mode::relaxed);
    REQUIRE(previous == mgm::capture_mode::global);
    void* p = a.allocate_async(MiB, 256, s);
    REQUIRE(p != nullptr);
    a.deallocate(p, MiB);
    REQUIRE(ops.exchange_capture_mode(previous) == mgm::capture_mode::relaxed);
    const auto g = m.end_capture(s);  // not invalidated
    m.destroy(g);
  }
  SECTION("a capture begun in relaxed mode prohibits nothing") {
    m.begin_capture(s, mgm::capture_mode::relaxed);
    a.deallocate(a.allocate(KiB), KiB);
    const auto e = ops.create_event(device_id{1});
    REQUIRE_NOTHROW(ops.query(e));
    ops.destroy_event(e);
    m.destroy(m.end_capture(s));
  }
  REQUIRE_FALSE(ops.is_capturing(s));
}

TEST_CASE("judge: work enqueued during a capture runs when the graph is launched", "[judge][graph]") {
  mgm::sim::machine m{mgm::sim::parse_device_list("1GiB")};
  const auto s = m.create_stream(device_id{0});
  m.begin_capture(s);
  m.enqueue(s, 3ms);
  const auto g = m.end_capture(s);
  m.synchronize(device_id{0});
  REQUIRE(m.now(device_id{0}) == 0ns);
  m.launch(g, s);
  m.launch(g, s);
  m.synchronize(device_id{0});
  REQUIRE(m.now(device_id{0}) == 6ms);
  m.destroy(g);
  REQUIRE_THROWS_AS(m.launch(g, s), mgm::logic_error);
  REQUIRE_THROWS_AS(m.destroy(g), mgm::logic_error);
}

TEST_CASE("judge: its state stays bounded over many frees", "[judge]") {
  mgm::sim::machine m{mgm::sim::parse_device_list("1GiB")};
  unsafe_allocator unsafe{m.allocator(device_id{0})};
  mgm::sim::judged judged{m, unsafe};
  const auto s1 = m.create_stream(device_id{0});
  const auto s2 = m.create_stream(device_id{0});
  auto ops = m.streams();
  auto e = ops.create_event(device_id{0});
  for (int i = 0; i < 100'000; ++i) {
    const auto s = i % 2 == 0 ? s1 : s2;
    void* p = judged.allocate_async(KiB, 256, s);
    m.enqueue(s, 1us);
    judged.deallocate_async(p, KiB, 256, s);
    ops.record(e, s);             // the next stream waits for this one's work: reuse is safe
    ops.wait(i % 2 == 0 ? s2 : s1, e);
    if (i % 64 == 0) m.advance(device_id{0}, 64us);
    REQUIRE(m.oracle().tracked_ranges() <= 2);
  }
  ops.destroy_event(e);
  REQUIRE(m.hazards().empty());
}

TEST_CASE("judge: off costs nothing and finds nothing", "[judge]") {
  mgm::sim::machine m{mgm::sim::parse_device_list("1GiB"), {mgm::sim::oracle_mode::off}};
  unsafe_allocator unsafe{m.allocator(device_id{0})};
  mgm::sim::judged judged{m, unsafe};
  const auto s1 = m.create_stream(device_id{0});
  const auto s2 = m.create_stream(device_id{0});
  void* p = judged.allocate_async(KiB, 256, s1);
  m.enqueue(s1, 1ms);
  judged.deallocate_async(p, KiB, 256, s1);
  REQUIRE(judged.allocate_async(KiB, 256, s2) == p);  // unsafe, and not judged
  judged.deallocate_async(p, KiB, 256, s2);
  REQUIRE(m.hazards().empty());
  REQUIRE(m.oracle().tracked_ranges() == 0);
}

TEST_CASE("judge: a destroyed graph's memory waits for its launches on every stream", "[judge][graph]") {
  setup t;
  const auto cap = t.m.create_stream(device_id{0});
  void* warm = t.judged.allocate_async(MiB, 256, cap);
  t.judged.deallocate_async(warm, MiB, 256, cap);
  t.m.begin_capture(cap);
  void* g = t.judged.allocate_async(MiB, 256, cap);
  t.m.enqueue(cap, 1ms);
  t.judged.deallocate_async(g, MiB, 256, cap);
  const auto graph = t.m.end_capture(cap);
  t.m.launch(graph, t.s1);  // runs until 1 ms on s1
  t.m.enqueue(t.s2, 2ms);
  t.m.launch(graph, t.s2);  // until 3 ms on s2
  t.m.destroy(graph);
  // s2's own program order does not cover the launch still running on s1, and the reverse.
  REQUIRE_THROWS_AS(t.judged.allocate_async(MiB, 256, t.s2), mgm::sim::stream_hazard);
  t.m.advance(device_id{0}, 1ms);
  void* p = t.judged.allocate_async(MiB, 256, t.s2);  // s1's launch ended; s2's is in s2's order
  t.judged.deallocate_async(p, MiB, 256, t.s2);
}

TEST_CASE("judge: a device sync waits for a destroyed stream's work", "[judge][streams]") {
  setup t;
  const auto doomed = t.m.create_stream(device_id{0});
  void* p = t.busy_block(doomed);
  t.m.destroy_stream(doomed);
  const auto reborn = t.m.create_stream(device_id{0});
  REQUIRE(reborn == doomed);
  t.m.synchronize(device_id{0});
  REQUIRE(t.m.now(device_id{0}) == 1ms);  // the destroyed stream's work was still waited for
  REQUIRE(t.judged.allocate(64 * KiB) == p);  // so the host may take its block
  t.judged.deallocate(p, 64 * KiB);
  REQUIRE(t.m.hazards().empty());
}

TEST_CASE("judge: a synchronous free is ordered by the default stream's waits", "[judge]") {
  setup t;
  auto ops = t.m.streams();
  void* p = t.judged.allocate_async(64 * KiB, 256, t.s1);
  t.m.enqueue(t.s1, 1ms);
  auto e = ops.create_event(device_id{0});
  ops.record(e, t.s1);
  ops.wait(t.m.default_stream(device_id{0}), e);
  t.judged.deallocate(p, 64 * KiB);  // a free in the default stream's order, after s1's work
  ops.destroy_event(e);
  REQUIRE(t.m.hazards().empty());
}

TEST_CASE("judge: host memory is judged too", "[judge]") {
  mgm::sim::machine m{mgm::sim::parse_device_list("1GiB")};
  auto host = m.host_allocator();
  mgm::sim::judged judged{m, host};
  void* p = judged.allocate(MiB);
  REQUIRE(m.oracle().tracked_ranges() == 1);  // tracked, although no device owns it
  judged.deallocate(p, MiB);
  REQUIRE(m.oracle().tracked_ranges() == 0);  // no work used it: safe at once
  void* q = judged.allocate_async(MiB, 256, m.default_stream(device_id{0}));
  REQUIRE(m.oracle().tracked_ranges() == 1);
  judged.deallocate_async(q, MiB, 256, m.default_stream(device_id{0}));
  REQUIRE(m.hazards().empty());
}
