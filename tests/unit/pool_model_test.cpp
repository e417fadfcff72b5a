// A model-based property test of the caching pool with RapidCheck: random programs of
// allocations, frees (on the allocating stream and on others), record_stream, graph captures,
// launches and destruction, releases and trims, forgotten streams, and injected upstream and host
// out-of-memory, over 4 streams, single-threaded so that shrinking is deterministic.
//
// The model is the test's record of live blocks; after every step the simulator's judge must have
// found no hazard, `check_invariants()` must hold, the pool's live count must be the model's, and
// an allocation right after a free of the same size on the same stream must make no upstream call.
// A failure is shrunk to a minimal program, printed with RapidCheck's seed (RC_PARAMS="seed=..."
// reproduces it). At least 10^5 operations run; MGM_MODEL_OPS=n runs more.
#include <mgm/pool/caching_pool.hpp>
#include <mgm/sim/machine.hpp>

#include <catch2/catch.hpp>
#include <rapidcheck.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "counting_new.hpp"
#include "sizes.hpp"

namespace model_test {

enum class kind : int {
  allocate,
  free_same,
  free_other,
  free_then_allocate,
  record_stream,
  begin_capture,
  end_capture,
  launch,
  destroy_graph,
  release,
  trim,
  forget_stream,
  upstream_oom,
  host_oom,
  enqueue,
  advance,
};
constexpr std::array names{"allocate",    "free_same",   "free_other", "free_then_allocate", "record_stream",
                           "begin_capture", "end_capture", "launch",     "destroy_graph",      "release",
                           "trim",        "forget_stream", "upstream_oom", "host_oom",        "enqueue",
                           "advance"};

struct op {
  kind what{kind::allocate};
  std::uint32_t a{0};  // a stream, a live block, a graph: taken modulo what exists
  std::uint32_t b{0};
  std::uint32_t bytes{0};
};

void showValue(const op& o, std::ostream& os) {
  os << names[static_cast<std::size_t>(o.what)] << "(" << o.a << ", " << o.b << ", " << o.bytes << ")";
}

std::uint64_t operations_run = 0;

using mgm::device_id;
using namespace std::chrono_literals;
using sim_pool = mgm::caching_pool<mgm::sim::device_allocator>;

struct live_block {
  void* p;
  std::size_t bytes;
  int stream;  // -1: the default stream
  std::uint64_t canary;
  bool in_capture;  // allocated inside a capture (a private pool's)
  bool recorded;
};

struct graph_entry {
  mgm::sim::graph g;
  mgm::capture_pool_id pool;
  bool destroyed{false};
};

// The system under test and the model side by side.
struct world {
  mgm::sim::machine m{mgm::sim::parse_device_list("2GiB"), {mgm::sim::oracle_mode::record}};
  const device_id d{0};
  sim_pool raw;
  mgm::sim::oracle judge = m.oracle();  // told of each call unarmed: only the pool's allocations fail
  std::array<mgm::stream_ref, 4> streams{};
  std::array<std::optional<mgm::capture_pool_id>, 4> capturing{};
  std::vector<live_block> live;
  std::vector<graph_entry> graphs;
  mgm::sim::stream_ops ops = m.streams();
  mgm::sim::event order;
  std::uint64_t canary{1};

  explicit world(bool expandable) : raw{m.allocator(d), options(expandable)}, order{ops.create_event(d)} {
    for (auto& s : streams) s = m.create_stream(d);
  }
  ~world() { ops.destroy_event(order); }
  world(const world&) = delete;
  world& operator=(const world&) = delete;

  static mgm::pool_options options(bool expandable) {
    mgm::pool_options o;
    o.expandable_segments = expandable;
    return o;
  }
  mgm::stream_ref stream(int i) const { return i < 0 ? mgm::stream_ref{} : streams[static_cast<std::size_t>(i)]; }
  bool captures(int i) const { return i >= 0 && capturing[static_cast<std::size_t>(i)].has_value(); }
  std::size_t mallocs() { return m.modelled(d).count(mgm::sim::driver_call::malloc) + m.modelled(d).count(mgm::sim::driver_call::create); }

  // The pool's calls run armed: an injected host out-of-memory hits the pool, never the test.
  template <class Fn>
  bool pool_call(Fn&& fn) {
    try {
      const mgm_test::arm_guard armed;
      fn();
      return true;
    } catch (const std::bad_alloc&) {  // host bad_alloc or out_of_memory: injected
      return false;
    }
  }

  void allocate(int s, std::size_t bytes) {
    void* p = nullptr;
    if (!pool_call([&] { p = raw.allocate_async(bytes, 256, stream(s)); })) return;
    judge.handed_out(p, bytes, stream(s), d);
    std::memcpy(p, &canary, sizeof canary);
    live.push_back({p, bytes, s, canary++, captures(s), false});
  }
  void free(std::size_t i, int s) {
    live_block b = live[i];
    RC_ASSERT(std::memcmp(b.p, &b.canary, sizeof b.canary) == 0);  // nothing was reused early
    if (s != b.stream) {  // the contract: a free on another stream is ordered after the allocating one's work
      ops.record(order, stream(b.stream));
      ops.wait(stream(s), order);
    }
    judge.freed(b.p, stream(s), d);
    (void)pool_call([&] { raw.deallocate_async(b.p, b.bytes, 256, stream(s)); });
    live.erase(live.begin() + static_cast<long>(i));
  }

  void step(const op& o) {
    const int s = static_cast<int>(o.a % 4);
    const int t = static_cast<int>(o.b % 4);
    const std::size_t bytes = o.bytes % 8 == 0 ? (2 + o.bytes % 38) * MiB : (1 + o.bytes % 1024) * KiB;
    switch (o.what) {
      case kind::allocate:
        allocate(s, bytes);
        break;
      case kind::free_same:
        if (!live.empty()) {
          const std::size_t i = o.a % live.size();
          free(i, live[i].stream);
        }
        break;
      case kind::free_other:
        if (!live.empty()) {
          const std::size_t i = o.a % live.size();
          if (!captures(live[i].stream) && !captures(t)) free(i, t);
        }
        break;
      case kind::free_then_allocate:
        // The model's one prediction about the cache: a block just freed on a stream serves the
        // same size on that stream with no upstream call.
        if (!live.empty()) {
          const std::size_t i = o.a % live.size();
          const live_block b = live[i];
          free(i, b.stream);
          if (captures(b.stream) || b.in_capture || b.recorded) break;
          const std::size_t before = mallocs();
          allocate(b.stream, b.bytes);
          RC_ASSERT(mallocs() == before);
        }
        break;
      case kind::record_stream:
        if (!live.empty()) {
          live_block& b = live[o.a % live.size()];
          if (captures(b.stream) || captures(t)) break;
          if (pool_call([&] { raw.record_stream(b.p, stream(t)); })) {
            judge.used_on(b.p, stream(t));
            b.recorded = b.recorded || t != b.stream;
          }
        }
        break;
      case kind::begin_capture:
        if (!captures(s)) {
          m.begin_capture(stream(s), mgm::capture_mode::relaxed);
          mgm::capture_pool_id id;
          if (!pool_call([&] { id = raw.capture_pool_of(stream(s)); })) {
            (void)m.end_capture(stream(s));  // no pool could be made: the capture is abandoned
            break;
          }
          capturing[static_cast<std::size_t>(s)] = id;
          m.enqueue(stream(s), std::chrono::nanoseconds{1000 + o.bytes % 50'000});
        }
        break;
      case kind::end_capture:
        if (captures(s)) {
          graphs.push_back({m.end_capture(stream(s)), *capturing[static_cast<std::size_t>(s)]});
          capturing[static_cast<std::size_t>(s)].reset();
        }
        break;
      case kind::launch:
        if (!graphs.empty()) {
          graph_entry& g = graphs[o.a % graphs.size()];
          if (!g.destroyed && !captures(t)) m.launch(g.g, stream(t));
        }
        break;
      case kind::destroy_graph:
        if (!graphs.empty()) {
          graph_entry& g = graphs[o.a % graphs.size()];
          if (g.destroyed) break;
          m.destroy(g.g);
          g.destroyed = true;
          m.synchronize(d);  // the contract: its launches are done before its pool goes
          (void)pool_call([&] { raw.release_capture_pool(g.pool); });
        }
        break;
      case kind::release:
        (void)pool_call([&] { (void)raw.release(); });
        break;
      case kind::trim:
        (void)pool_call([&] { (void)raw.release(raw.reserved_bytes() / 2); });
        break;
      case kind::forget_stream:
        if (!captures(s)) {
          if (!pool_call([&] { raw.forget_stream(stream(s)); })) break;
          for (auto& b : live) {
            if (b.stream == s) b.stream = -1;  // freed later in the default stream's order
          }
          m.synchronize(d);
          m.destroy_stream(stream(s));
          streams[static_cast<std::size_t>(s)] = m.create_stream(d);
        }
        break;
      case kind::upstream_oom:
        m.faults(d).fail_nth(1);
        break;
      case kind::host_oom:
        mgm_test::fail_allocation = mgm_test::armed_allocations + 1 + o.b % 3;
        break;
      case kind::enqueue:
        m.enqueue(stream(s), std::chrono::nanoseconds{o.bytes % 100'000});
        break;
      case kind::advance:
        m.advance(d, std::chrono::nanoseconds{o.bytes % 200'000});
        break;
    }
    ++operations_run;
    const auto hazards = m.hazards();
    if (!hazards.empty()) RC_FAIL("judge: " + hazards.front().message);
    try {
      raw.check_invariants();
    } catch (const mgm::logic_error& e) {
      RC_FAIL(e.what());
    }
    RC_ASSERT(raw.statistics().allocations.current == static_cast<std::int64_t>(live.size()));
  }

  // The end: captures end, graphs go, every block is freed, and everything goes back.
  void finish() {
    mgm_test::fail_allocation = 0;
    m.faults(d).clear();
    for (int s = 0; s < 4; ++s) {
      if (captures(s)) {
        graphs.push_back({m.end_capture(stream(s)), *capturing[static_cast<std::size_t>(s)]});
        capturing[static_cast<std::size_t>(s)].reset();
      }
    }
    while (!live.empty()) free(live.size() - 1, live.back().stream);
    for (auto& g : graphs) {
      if (g.destroyed) continue;
      m.destroy(g.g);
      g.destroyed = true;
      m.synchronize(d);
      raw.release_capture_pool(g.pool);
    }
    m.synchronize(d);
    m.advance(d, 1s);
    (void)raw.release();
    const auto hazards = m.hazards();
    if (!hazards.empty()) RC_FAIL("judge: " + hazards.front().message);
    raw.check_invariants();
    RC_ASSERT(raw.reserved_bytes() == 0U);
    RC_ASSERT(m.memory(d).used_bytes == 0U);
  }
};

rc::Gen<op> op_gen() {
  return rc::gen::build<op>(rc::gen::set(&op::what, rc::gen::weightedElement<kind>({
                                                        {30, kind::allocate},
                                                        {16, kind::free_same},
                                                        {5, kind::free_other},
                                                        {6, kind::free_then_allocate},
                                                        {3, kind::record_stream},
                                                        {2, kind::begin_capture},
                                                        {2, kind::end_capture},
                                                        {2, kind::launch},
                                                        {2, kind::destroy_graph},
                                                        {1, kind::release},
                                                        {1, kind::trim},
                                                        {1, kind::forget_stream},
                                                        {1, kind::upstream_oom},
                                                        {1, kind::host_oom},
                                                        {6, kind::enqueue},
                                                        {6, kind::advance},
                                                    })),
                            rc::gen::set(&op::a, rc::gen::inRange<std::uint32_t>(0, 1U << 16)),
                            rc::gen::set(&op::b, rc::gen::inRange<std::uint32_t>(0, 1U << 16)),
                            rc::gen::set(&op::bytes, rc::gen::inRange<std::uint32_t>(0, 1U << 20)));
}

std::uint64_t operations_wanted() {
  const char* env = std::getenv("MGM_MODEL_OPS");
  return env != nullptr ? std::strtoull(env, nullptr, 10) : 100'000;
}

}  // namespace model_test

TEST_CASE("pool model: random programs of every operation, judged, with invariants after each step",
          "[pool][model]") {
  using namespace model_test;
  operations_run = 0;
  const std::uint64_t wanted = operations_wanted();
  for (int round = 0; operations_run < wanted; ++round) {
    for (const bool expandable : {false, true}) {
      // rc::check, not rc::prop: no Catch section per round (Catch would rerun the test for each).
      const bool held = rc::check(std::string{"round "} + std::to_string(round) +
                                      (expandable ? ", expandable segments" : ", plain segments"),
                                  [expandable] {
                                    const auto program = *rc::gen::resize(400, rc::gen::container<std::vector<op>>(op_gen()));
                                    world w{expandable};
                                    for (const op& o : program) w.step(o);
                                    w.finish();
                                  });
      REQUIRE(held);
    }
  }
  INFO(operations_run << " operations");
  REQUIRE(operations_run >= wanted);
}
