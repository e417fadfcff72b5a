#include <mgm/bytes.hpp>
#include <mgm/error.hpp>
#include <mgm/log.hpp>

#include "log_capture.hpp"
#include "sizes.hpp"
#include <mgm/sim/machine.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

using mgm::device_id;
using namespace std::chrono_literals;

namespace {

// Captures what the library reports through its log callback during one test.
using mgm::test::log_capture;
}  // namespace

TEST_CASE("presets have the devices, memory and links of the real machines", "[sim]") {
  REQUIRE(mgm::sim::machine::preset_names().size() == 5);
  auto mixed = mgm::sim::machine::preset("pcie-4gpu-mixed");
  REQUIRE(mixed.device_count() == 4);
  REQUIRE(mixed.spec(device_id{0}).name == "NVIDIA GeForce RTX 4090");
  REQUIRE(mixed.memory(device_id{0}).total_bytes == 24564 * MiB);
  REQUIRE(mixed.memory(device_id{3}).total_bytes == 16376 * MiB);
  REQUIRE(mixed.links().path(device_id{0}, device_id{2}).label() == "PHB");
  REQUIRE(mixed.links().path(device_id{0}, device_id{1}).label() == "SYS");

  auto dgx1 = mgm::sim::machine::preset("dgx1-v100");
  REQUIRE(dgx1.device_count() == 8);
  REQUIRE(dgx1.memory(device_id{7}).total_bytes == 16160 * MiB);
  // GPU0: NV1 to GPU1 and GPU2, NV2 to GPU3 and GPU4, SYS to GPU5-7 (the real DGX-1 file).
  REQUIRE(dgx1.links().path(device_id{0}, device_id{1}).label() == "NV1");
  REQUIRE(dgx1.links().path(device_id{0}, device_id{4}).label() == "NV2");
  REQUIRE(dgx1.links().path(device_id{0}, device_id{5}).label() == "SYS");
  REQUIRE(dgx1.links().path(device_id{6}, device_id{7}).nvlinks == 2);

  auto h200 = mgm::sim::machine::preset("hgx-h200");
  REQUIRE(h200.memory(device_id{0}).total_bytes == 143771 * MiB);  // 8 x 140 GiB on a 24 GiB host
  REQUIRE(h200.links().path(device_id{2}, device_id{5}).label() == "NV18");
  REQUIRE(mgm::sim::machine::preset("dgx-a100").links().path(device_id{0}, device_id{7}).label() == "NV12");
  REQUIRE(mgm::sim::machine::preset("dgx-h100").spec(device_id{1}).name == "NVIDIA H100 80GB HBM3");

  REQUIRE_THROWS_WITH(mgm::sim::machine::preset("dgx-z"), Catch::Contains("pcie-4gpu-mixed"));
}

TEST_CASE("from_string takes a preset or a device list", "[sim]") {
  REQUIRE(mgm::sim::machine::from_string("dgx-h100").name() == "dgx-h100");
  auto m = mgm::sim::machine::from_string("2x1GiB:A,512MiB");
  REQUIRE(m.device_count() == 3);
  REQUIRE(m.spec(device_id{1}).name == "A");
  REQUIRE(m.memory(device_id{2}).total_bytes == 512 * MiB);
  REQUIRE_THROWS_AS(mgm::sim::machine::from_string("dgx-9000"), mgm::parse_error);
}

TEST_CASE("device memory is real, and accounting is exact", "[sim]") {
  mgm::sim::machine m{mgm::sim::parse_device_list("1GiB")};
  auto a = m.allocator(device_id{0});
  void* p = a.allocate(1000);
  std::memset(p, 7, 1000);
  REQUIRE(static_cast<unsigned char*>(p)[999] == 7);
  REQUIRE(m.memory(device_id{0}).used_bytes == 1024);  // rounded to 256 B
  void* q = a.allocate(300 * MiB);
  REQUIRE(m.memory(device_id{0}).used_bytes == 1024 + 300 * MiB);
  REQUIRE(m.memory(device_id{0}).live_allocations == 2);
  a.deallocate(p, 1000);
  a.deallocate(q, 300 * MiB);
  const auto info = m.memory(device_id{0});
  REQUIRE(info.used_bytes == 0);
  REQUIRE(info.free_bytes == GiB);
  REQUIRE(info.largest_free_bytes == GiB);
  REQUIRE(info.peak_used_bytes == 1024 + 300 * MiB);
}

TEST_CASE("capacity exhaustion gives out_of_memory naming the device and sizes", "[sim]") {
  auto m = mgm::sim::machine::preset("pcie-4gpu-mixed");
  auto a = m.allocator(device_id{2});
  void* big = a.allocate(15 * GiB);
  try {
    (void)a.allocate(2 * GiB);
    FAIL("no exception");
  } catch (const mgm::out_of_memory& e) {
    const std::string what = e.what();
    INFO(what);
    REQUIRE(e.requested_bytes() == 2 * GiB);
    REQUIRE(what.find("sim device 2") != std::string::npos);
    REQUIRE(what.find("RTX 4080") != std::string::npos);
    REQUIRE(what.find("2.00 GiB (2147483648 bytes)") != std::string::npos);
    REQUIRE(what.find("15.00 GiB in use") != std::string::npos);
    REQUIRE(what.find("15.99 GiB capacity") != std::string::npos);
  }
  a.deallocate(big, 15 * GiB);
  REQUIRE(m.memory(device_id{2}).used_bytes == 0);
  // Other devices are unaffected; the device is usable again.
  REQUIRE(a.allocate(1 * GiB) != nullptr);
}

TEST_CASE("device memory does not fragment: free bytes are what can be allocated", "[sim]") {
  // A GPU's driver maps pages into virtual ranges, so cudaMalloc succeeds while enough memory is
  // free, however it is scattered; the simulator behaves the same.
  mgm::sim::machine m{mgm::sim::parse_device_list("64MiB")};
  auto a = m.allocator(device_id{0});
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(a.allocate(8 * MiB));
  REQUIRE_THROWS_AS(a.allocate(256), mgm::out_of_memory);
  for (int i = 0; i < 8; i += 2) a.deallocate(blocks[static_cast<std::size_t>(i)], 8 * MiB);
  REQUIRE(m.memory(device_id{0}).free_bytes == 32 * MiB);
  REQUIRE(m.memory(device_id{0}).largest_free_bytes == 32 * MiB);
  void* big = a.allocate(32 * MiB);  // no 32 MiB piece of the range is free: a range of its own
  REQUIRE(m.owner_of(big) == device_id{0});
  REQUIRE(m.owner_of(static_cast<char*>(big) + 32 * MiB - 1) == device_id{0});
  std::memset(big, 1, 32 * MiB);
  REQUIRE_THROWS_AS(a.allocate(256), mgm::out_of_memory);
  a.deallocate(big, 32 * MiB);
  for (int i = 1; i < 8; i += 2) a.deallocate(blocks[static_cast<std::size_t>(i)], 8 * MiB);
  REQUIRE(m.memory(device_id{0}).used_bytes == 0);
}

TEST_CASE("bad input gives a clear error and leaves the allocator usable", "[sim]") {
  auto m = mgm::sim::machine::preset("pcie-4gpu-mixed");
  auto a = m.allocator(device_id{1});
  log_capture log;

  SECTION("non-power-of-two alignment") {
    REQUIRE_THROWS_WITH(a.allocate(1024, 24), Catch::Contains("alignment 24 is not a power of two"));
  }
  SECTION("SIZE_MAX bytes") {
    REQUIRE_THROWS_AS(a.allocate(std::numeric_limits<std::size_t>::max()), mgm::out_of_memory);
  }
  SECTION("a pointer the device never gave out") {
    int local = 0;
    a.deallocate(&local, sizeof local);
    REQUIRE(m.invalid_frees(device_id{1}) == 1);
    REQUIRE(log.messages.size() == 1);
    REQUIRE(log.messages[0].find("not simulated device memory") != std::string::npos);
  }
  SECTION("another device's pointer") {
    void* other = m.allocator(device_id{0}).allocate(4096);
    a.deallocate(other, 4096);
    REQUIRE(log.messages.at(0).find("belongs to sim device 0") != std::string::npos);
    REQUIRE(m.memory(device_id{0}).used_bytes == 4096);  // not freed by the wrong device
    m.allocator(device_id{0}).deallocate(other, 4096);
  }
  SECTION("a double free") {
    void* p = a.allocate(4096);
    a.deallocate(p, 4096);
    a.deallocate(p, 4096);
    REQUIRE(m.invalid_frees(device_id{1}) == 1);
    REQUIRE(log.messages.at(0).find("already freed") != std::string::npos);
  }
  SECTION("a device id out of range") {
    REQUIRE_THROWS_WITH(m.allocator(device_id{4}), Catch::Contains("device 4 is out of range") &&
                                                        Catch::Contains("has 4 devices (0-3)"));
    REQUIRE_THROWS_AS(m.memory(device_id{-7}), mgm::logic_error);
    REQUIRE_THROWS_AS(m.create_stream(device_id::host()), mgm::logic_error);
    REQUIRE_THROWS_AS(m.streams().create_event(device_id{99}), mgm::logic_error);
  }
  // Whatever was rejected, the device still serves and accounts exactly.
  void* p = a.allocate(1 * MiB);
  REQUIRE(m.memory(device_id{1}).used_bytes == 1 * MiB);
  a.deallocate(p, 1 * MiB);
  REQUIRE(m.memory(device_id{1}).used_bytes == 0);
}

TEST_CASE("fault injection: the Nth allocation fails once", "[sim][faults]") {
  auto m = mgm::sim::machine::preset("dgx-h100");
  auto a = m.allocator(device_id{3});
  auto plan = m.faults(device_id{3});
  plan.fail_nth(3);
  void* p1 = a.allocate(1 * MiB);
  void* p2 = a.allocate(1 * MiB);
  REQUIRE_THROWS_WITH(a.allocate(1 * MiB), Catch::Contains("injected fault"));
  void* p4 = a.allocate(1 * MiB);
  REQUIRE(plan.injected() == 1);
  REQUIRE(m.memory(device_id{3}).used_bytes == 3 * MiB);
  // Another device's plan is separate.
  REQUIRE(m.faults(device_id{2}).injected() == 0);
  for (void* p : {p1, p2, p4}) a.deallocate(p, 1 * MiB);
  REQUIRE_THROWS_AS(plan.fail_nth(0), mgm::logic_error);
  REQUIRE_THROWS_AS(plan.fail_with_probability(1.5, 1), mgm::logic_error);
}

TEST_CASE("fault injection is deterministic under a seed", "[sim][faults]") {
  const auto pattern = [](std::uint64_t seed) {
    mgm::sim::machine m{mgm::sim::parse_device_list("1GiB")};
    auto a = m.allocator(device_id{0});
    m.faults(device_id{0}).fail_with_probability(0.3, seed);
    std::string bits;
    for (int i = 0; i < 200; ++i) {
      try {
        a.deallocate(a.allocate(4096), 4096);
        bits += '.';
      } catch (const mgm::out_of_memory&) {
        bits += 'X';
      }
    }
    return bits;
  };
  const std::string a = pattern(42);
  REQUIRE(a == pattern(42));
  REQUIRE(a != pattern(43));
  const auto failures = std::count(a.begin(), a.end(), 'X');
  REQUIRE(failures > 30);  // p = 0.3 over 200 draws: 60 expected, far from both bounds
  REQUIRE(failures < 90);
}

TEST_CASE("a lost device fails every call but accepts frees", "[sim][faults]") {
  auto m = mgm::sim::machine::preset("dgx-a100");
  auto a = m.allocator(device_id{1});
  void* p = a.allocate(4096);
  m.faults(device_id{1}).lose_device();
  try {
    (void)a.allocate(4096);
    FAIL("no exception");
  } catch (const mgm::cuda_error& e) {
    REQUIRE(e.code() == cudaErrorDevicesUnavailable);
  }
  REQUIRE_THROWS_AS(m.create_stream(device_id{1}), mgm::cuda_error);
  REQUIRE_THROWS_AS(m.streams().create_event(device_id{1}), mgm::cuda_error);
  a.deallocate(p, 4096);
  REQUIRE(m.memory(device_id{1}).used_bytes == 0);
  REQUIRE(m.allocator(device_id{0}).allocate(4096) != nullptr);  // others are fine
  m.faults(device_id{1}).clear();
  a.deallocate(a.allocate(4096), 4096);
}

TEST_CASE("the cost model is reported as modelled, per device", "[sim][costs]") {
  using mgm::sim::driver_call;
  auto m = mgm::sim::machine::preset("dgx-h100");
  auto a = m.allocator(device_id{0});
  std::vector<void*> ps;
  for (int i = 0; i < 10; ++i) ps.push_back(a.allocate(4096));
  for (void* p : ps) a.deallocate(p, 4096);
  const auto c = m.modelled(device_id{0});
  REQUIRE(c.count(driver_call::malloc) == 10);
  REQUIRE(c.count(driver_call::free) == 10);
  REQUIRE(c.seconds(driver_call::malloc) == Approx(10 * 66e-6));  // small blocks: the fixed charge only
  REQUIRE(c.seconds(driver_call::free) == Approx(10 * 42e-6));
  REQUIRE(c.total_seconds() == Approx(0.00108));
  REQUIRE(m.modelled(device_id{1}).count(driver_call::malloc) == 0);
  m.costs().malloc_us = 100.0;
  a.deallocate(a.allocate(4096), 4096);
  REQUIRE(m.modelled(device_id{0}).total_seconds() == Approx(10 * 66e-6 + 11 * 42e-6 + 100e-6));
}

TEST_CASE("a machine with many GiB per device runs on this host", "[sim]") {
  // 8 x 140 GiB of simulated memory; only touched pages cost host RAM.
  auto m = mgm::sim::machine::preset("hgx-h200");
  for (int d = 0; d < 8; ++d) {
    auto a = m.allocator(device_id{d});
    void* p = a.allocate(100 * GiB);
    static_cast<char*>(p)[0] = 1;
    static_cast<char*>(p)[100 * GiB - 1] = 2;
    REQUIRE(m.memory(device_id{d}).used_bytes == 100 * GiB);
    a.deallocate(p, 100 * GiB);
  }
}
