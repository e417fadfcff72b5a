// Many threads on the simulated machine at once: run under ThreadSanitizer in CI (the tsan preset).
#include <mgm/sim/machine.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

using mgm::device_id;
using namespace std::chrono_literals;

TEST_CASE("threads allocating, freeing and timing on shared devices", "[sim][stress]") {
  auto m = mgm::sim::machine::preset("dgx-h100");
  constexpr int threads = 4;
  constexpr int rounds = 400;
  std::atomic<int> failures{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::mt19937_64 rng{static_cast<std::uint64_t>(t) * 7919};
      const device_id d{t % 2};  // two threads per device: contention on one lock
      auto a = m.allocator(d);
      auto ops = m.streams();
      const auto s = m.create_stream(d);
      auto e = ops.create_event(d);
      std::vector<std::pair<void*, std::size_t>> live;
      for (int i = 0; i < rounds; ++i) {
        const std::size_t bytes = 256 + rng() % (4u << 20);
        void* p = a.allocate_async(bytes, 256, s);
        std::memset(p, t, 64);
        live.emplace_back(p, bytes);
        m.enqueue(s, std::chrono::nanoseconds{static_cast<long>(rng() % 1000)});
        ops.record(e, s);
        (void)ops.query(e);
        if (i % 7 == 0) m.advance(d, 1us);
        if (live.size() > 16) {
          const auto victim = live[rng() % live.size()];
          std::erase(live, victim);
          if (static_cast<const unsigned char*>(victim.first)[0] != static_cast<unsigned char>(t)) ++failures;
          a.deallocate_async(victim.first, victim.second, 256, s);
        }
        (void)m.memory(device_id{(t + 1) % 2});  // read another device while it is busy
      }
      for (auto [p, bytes] : live) a.deallocate(p, bytes);
      ops.destroy_event(e);
    });
  }
  for (auto& th : pool) th.join();
  REQUIRE(failures == 0);
  for (int d = 0; d < 2; ++d) {
    REQUIRE(m.memory(device_id{d}).used_bytes == 0);
    REQUIRE(m.invalid_frees(device_id{d}) == 0);
    REQUIRE(m.modelled(device_id{d}).count(mgm::sim::driver_call::malloc) == 2 * rounds);
  }
}

TEST_CASE("threads enabling peers and mapping virtual memory", "[sim][stress]") {
  auto m = mgm::sim::machine::preset("dgx-a100");
  constexpr int threads = 4;
  constexpr int rounds = 50;
  constexpr std::size_t bytes = 4u << 20;
  std::atomic<int> failures{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      auto vmm = m.vmm();
      auto peers = m.peers();
      const device_id d{t};
      for (int i = 0; i < rounds; ++i) {
        const device_id peer{(t + 1 + i % 7) % 8};
        peers.enable(d, peer);
        if (!peers.is_enabled(d, peer)) ++failures;  // another thread's enable never hides ours
        void* va = vmm.reserve(d, bytes);
        const auto h = vmm.create(d, bytes);
        vmm.map(va, bytes, h);
        const std::vector<device_id> readers{d};
        vmm.set_access(va, bytes, readers);
        auto* c = static_cast<unsigned char*>(va);
        c[0] = static_cast<unsigned char>(t);
        c[bytes - 1] = static_cast<unsigned char>(i);
        if (c[0] != static_cast<unsigned char>(t) || c[bytes - 1] != static_cast<unsigned char>(i)) ++failures;
        vmm.unmap(va, bytes);
        vmm.release(h);
        vmm.unreserve(va, bytes);
      }
    });
  }
  for (auto& th : pool) th.join();
  REQUIRE(failures == 0);
  for (int t = 0; t < threads; ++t) {
    const device_id d{t};
    INFO("GPU" << t);
    REQUIRE(m.memory(d).used_bytes == 0);
    // Every call of every thread was counted once, on its own device: none lost to a race.
    const auto& calls = m.modelled(d);
    for (const auto k : {mgm::sim::driver_call::reserve, mgm::sim::driver_call::create, mgm::sim::driver_call::map,
                         mgm::sim::driver_call::set_access, mgm::sim::driver_call::unmap,
                         mgm::sim::driver_call::release, mgm::sim::driver_call::unreserve}) {
      INFO(mgm::sim::name(k));
      REQUIRE(calls.count(k) == rounds);
    }
    // Each thread enabled the seven peers it cycles through (the first time only; again is success).
    for (int i = 0; i < 7; ++i) REQUIRE(m.peers().is_enabled(d, device_id{(t + 1 + i) % 8}));
  }
  REQUIRE(m.hazards().empty());
}
