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
  std::vector<std::thread> pool;
  for (int t = 0; t < 4; ++t) {
    pool.emplace_back([&, t] {
      auto vmm = m.vmm();
      auto peers = m.peers();
      const device_id d{t};
      for (int i = 0; i < 50; ++i) {
        peers.enable(d, device_id{(t + 1 + i % 7) % 8});
        void* va = vmm.reserve(d, 4u << 20);
        const auto h = vmm.create(d, 4u << 20);
        vmm.map(va, 4u << 20, h);
        const std::vector<device_id> readers{d};
        vmm.set_access(va, 4u << 20, readers);
        static_cast<char*>(va)[0] = 1;
        vmm.unmap(va, 4u << 20);
        vmm.release(h);
        vmm.unreserve(va, 4u << 20);
      }
    });
  }
  for (auto& th : pool) th.join();
  for (int d = 0; d < 4; ++d) REQUIRE(m.memory(device_id{d}).used_bytes == 0);
}
