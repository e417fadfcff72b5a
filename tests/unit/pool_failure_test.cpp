// Failure atomicity of the caching pool: over a random trace, every host allocation the pool
// makes fails in turn (a counting global operator new, armed only around the pool's calls), and
// every upstream allocation fails in turn (the fault-injection adaptor). After each failure the
// pool must be as it was: its invariants hold, the live set is the test's record, nothing is
// reused early (canaries), and at the end everything goes back.
//
// Its own executable: the replaced operator new would count Catch's allocations too.
#include <mgm/adaptors/fault_injection_adaptor.hpp>
#include <mgm/pool/caching_pool.hpp>
#include <mgm/sim/machine.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "counting_new.hpp"
#include "sizes.hpp"

using mgm_test::arm_guard;
using mgm_test::armed_allocations;
using mgm_test::fail_allocation;

namespace {

using mgm::device_id;
using namespace std::chrono_literals;
using faulty = mgm::fault_injection_adaptor<mgm::sim::device_allocator>;
using pool_type = mgm::caching_pool<faulty>;

struct live_block {
  std::size_t bytes;
  mgm::stream_ref stream;
  std::uint64_t canary;
};

struct outcome {
  std::string broken;               // empty: every property held
  std::uint64_t host_allocations{0};
  std::uint64_t upstream_allocations{0};
  int failures{0};                  // calls that threw
};

// One trace; `fail_host` / `fail_upstream` name the allocation that fails (0: none). With
// `Expandable`, the pool maps its memory in expandable segments over the simulator's
// virtual-memory seam (whose calls are never made to fail: `fail_upstream` must be 0).
template <bool Expandable = false>
outcome run(std::uint64_t seed, int steps, std::uint64_t fail_host, std::uint64_t fail_upstream) {
  outcome out;
  armed_allocations = 0;
  fail_allocation = fail_host;
  mgm::sim::machine m{mgm::sim::parse_device_list("512MiB"), {mgm::sim::oracle_mode::off}};
  const device_id d{0};
  mgm::fault_injection_plan plan;
  plan.fail_nth = fail_upstream;
  using upstream_type = std::conditional_t<Expandable, mgm::sim::device_allocator, faulty>;
  upstream_type upstream = [&] {
    if constexpr (Expandable) {
      return m.allocator(d);
    } else {
      return faulty{m.allocator(d), plan};
    }
  }();
  mgm::pool_options options;
  options.expandable_segments = Expandable;
  mgm::caching_pool<upstream_type> pool{upstream, options};
  if (pool.expandable() != Expandable) {
    out.broken = "the pool's expandable segments are not as asked";
    return out;
  }
  std::vector<mgm::stream_ref> streams{m.create_stream(d), m.create_stream(d), m.create_stream(d), m.create_stream(d)};
  auto ops = m.streams();
  const auto order = ops.create_event(d);
  std::map<std::uintptr_t, live_block> live;
  std::mt19937_64 rng{seed};
  const auto fail = [&](int step, const std::string& what) {
    out.broken = "seed " + std::to_string(seed) + ", host failure " + std::to_string(fail_host) + ", upstream failure " +
                 std::to_string(fail_upstream) + ", step " + std::to_string(step) + ": " + what;
    return out;
  };
  const auto canary_ok = [](const void* p, std::uint64_t canary) {
    std::uint64_t v = 0;
    std::memcpy(&v, p, sizeof v);
    return v == canary;
  };

  for (int step = 0; step < steps; ++step) {
    const auto choice = rng() % 100;
    try {
      if (choice < 8) {
        m.enqueue(streams[rng() % streams.size()], std::chrono::nanoseconds{static_cast<long>(rng() % 50'000)});
      } else if (choice < 14) {
        m.advance(d, std::chrono::nanoseconds{static_cast<long>(rng() % 60'000)});
      } else if (choice < 18 && !live.empty()) {
        auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
        const arm_guard armed_now;
        pool.record_stream(reinterpret_cast<void*>(it->first), streams[rng() % streams.size()]);
      } else if (choice < 20) {
        const arm_guard armed_now;
        (void)pool.release(rng() % 2 == 0 ? 0 : 64 * MiB);
      } else if (choice < 21) {
        // A stream retires and a new one takes its place (often with the same handle).
        const std::size_t i = rng() % streams.size();
        bool forgotten = false;
        {
          const arm_guard armed_now;
          pool.forget_stream(streams[i]);
          forgotten = true;
        }
        if (forgotten) {
          for (auto& [addr, b] : live) {
            if (b.stream == streams[i]) b.stream = mgm::stream_ref{};  // freed later in the default stream's order
          }
          m.synchronize(d);  // what ran on it is done before it goes
          m.destroy_stream(streams[i]);
          streams[i] = m.create_stream(d);
        }
      } else if (choice < 60 || live.empty()) {
        const std::size_t bytes = rng() % 10 == 0 ? (1 + rng() % 40) * MiB : (1 + rng() % 512) * KiB;
        const auto s = streams[rng() % streams.size()];
        void* p = nullptr;
        {
          const arm_guard armed_now;
          p = pool.allocate_async(bytes, 256, s);
        }
        const auto addr = reinterpret_cast<std::uintptr_t>(p);
        auto next = live.lower_bound(addr);
        if ((next != live.end() && next->first < addr + bytes) ||
            (next != live.begin() && std::prev(next)->first + std::prev(next)->second.bytes > addr)) {
          return fail(step, "a block overlaps a live one");
        }
        const std::uint64_t canary = rng();
        std::memcpy(p, &canary, sizeof canary);
        live.emplace(addr, live_block{bytes, s, canary});
      } else {
        auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
        if (!canary_ok(reinterpret_cast<void*>(it->first), it->second.canary)) return fail(step, "a canary was overwritten");
        auto s = rng() % 6 == 0 ? streams[rng() % streams.size()] : it->second.stream;
        if (s != it->second.stream) {  // ordered after the allocating stream's work, as the contract asks
          ops.record(order, it->second.stream);
          ops.wait(s, order);
        }
        {
          const arm_guard armed_now;
          pool.deallocate_async(reinterpret_cast<void*>(it->first), it->second.bytes, 256, s);  // noexcept
        }
        live.erase(it);
      }
    } catch (const std::bad_alloc&) {  // host bad_alloc, or mgm::out_of_memory from upstream
      ++out.failures;
    } catch (const mgm::cuda_error&) {  // an event the platform could not make
      ++out.failures;
    }
    try {
      pool.check_invariants();
    } catch (const mgm::logic_error& e) {
      return fail(step, e.what());
    }
    const auto st = pool.statistics();
    if (st.allocations.current != static_cast<std::int64_t>(live.size())) return fail(step, "the live set differs");
  }
  out.host_allocations = armed_allocations.load();
  if constexpr (!Expandable) out.upstream_allocations = upstream.allocations_seen();
  fail_allocation = 0;
  for (auto& [addr, b] : live) {
    if (!canary_ok(reinterpret_cast<void*>(addr), b.canary)) return fail(steps, "a canary was overwritten");
    pool.deallocate_async(reinterpret_cast<void*>(addr), b.bytes, 256, b.stream);
  }
  live.clear();
  ops.destroy_event(order);
  m.synchronize(d);
  m.advance(d, 1s);
  pool.release();
  try {
    pool.check_invariants();
  } catch (const mgm::logic_error& e) {
    return fail(steps, e.what());
  }
  if (pool.reserved_bytes() != 0) return fail(steps, "release() kept " + std::to_string(pool.reserved_bytes()) + " bytes");
  if (m.memory(d).used_bytes != 0) return fail(steps, "the device still holds memory");
  return out;
}

constexpr int steps = 600;

// The trace without failures: it holds, fails nothing, and says how many allocations to fail.
template <bool Expandable = false>
outcome clean_run(std::uint64_t seed) {
  const outcome clean = run<Expandable>(seed, steps, 0, 0);
  INFO(clean.broken);
  REQUIRE(clean.broken.empty());
  REQUIRE(clean.failures == 0);
  return clean;
}

}  // namespace

TEST_CASE("pool failure: every host allocation in turn fails, and the pool stays whole", "[pool][failure]") {
  const std::uint64_t seed = 20261201;
  const outcome clean = clean_run(seed);
  REQUIRE(clean.host_allocations > 20);  // the trace reaches the pool's allocating paths
  int failed_calls = 0;
  for (std::uint64_t k = 1; k <= clean.host_allocations; ++k) {
    const outcome o = run(seed, steps, k, 0);
    INFO(o.broken);
    REQUIRE(o.broken.empty());
    failed_calls += o.failures;
  }
  // Some failures are absorbed (a free, a spare slot), the others make exactly their call throw.
  REQUIRE(failed_calls > 0);
  REQUIRE(failed_calls <= static_cast<int>(clean.host_allocations));
}

TEST_CASE("pool failure: expandable segments: every host allocation in turn fails, and the pool stays whole",
          "[pool][failure][vmm]") {
  // The growths release the pool's lock around their driver calls; what they need afterwards
  // (a block record, a range's place in the list) is made before, or undone with the mapping.
  const std::uint64_t seed = 20261207;
  const outcome clean = clean_run<true>(seed);
  REQUIRE(clean.host_allocations > 20);
  int failed_calls = 0;
  for (std::uint64_t k = 1; k <= clean.host_allocations; ++k) {
    const outcome o = run<true>(seed, steps, k, 0);
    INFO(o.broken);
    REQUIRE(o.broken.empty());
    failed_calls += o.failures;
  }
  REQUIRE(failed_calls > 0);
  REQUIRE(failed_calls <= static_cast<int>(clean.host_allocations));
}

TEST_CASE("pool failure: every upstream allocation in turn fails, and the pool stays whole", "[pool][failure]") {
  const std::uint64_t seed = 20261202;
  const outcome clean = clean_run(seed);
  REQUIRE(clean.upstream_allocations > 5);
  for (std::uint64_t k = 1; k <= clean.upstream_allocations; ++k) {
    const outcome o = run(seed, steps, 0, k);
    INFO(o.broken);
    REQUIRE(o.broken.empty());
    // A failed upstream call is retried after a release, so the allocation may still succeed.
  }
}
