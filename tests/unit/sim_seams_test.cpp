// The simulated machine's seams: streams and events on virtual clocks, virtual memory, peers.
#include "sizes.hpp"

#include <mgm/error.hpp>
#include <mgm/sim/machine.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <vector>

using mgm::device_id;
using namespace std::chrono_literals;

namespace {
}

TEST_CASE("an event completes when its device's clock passes the work", "[sim][streams]") {
  auto m = mgm::sim::machine::preset("dgx-h100");
  const device_id d{1};
  auto ops = m.streams();
  const auto s1 = m.create_stream(d);
  const auto s2 = m.create_stream(d);
  REQUIRE(m.device_of(s2) == d);
  auto e = ops.create_event(d);
  REQUIRE(ops.query(e));  // never recorded: complete, as in CUDA

  m.enqueue(s1, 100us);
  ops.record(e, s1);
  REQUIRE_FALSE(ops.query(e));

  // s2 waits for e on the device; its own work runs after it.
  ops.wait(s2, e);
  m.enqueue(s2, 10us);
  auto e2 = ops.create_event(d);
  ops.record(e2, s2);

  m.advance(d, 99us);
  REQUIRE_FALSE(ops.query(e));
  m.advance(d, 1us);
  REQUIRE(ops.query(e));
  REQUIRE_FALSE(ops.query(e2));  // 110 µs: after e, not at the same time
  m.advance(d, 9us);
  REQUIRE_FALSE(ops.query(e2));
  m.advance(d, 1us);
  REQUIRE(ops.query(e2));
  REQUIRE(m.now(d) == 110us);
  // Another device's clock did not move.
  REQUIRE(m.now(device_id{0}) == 0us);
  ops.destroy_event(e);
  ops.destroy_event(e2);
}

TEST_CASE("a stream waiting on another device's event runs after it", "[sim][streams]") {
  auto m = mgm::sim::machine::preset("dgx-a100");
  auto ops = m.streams();
  const auto producer = m.create_stream(device_id{0});
  const auto consumer = m.create_stream(device_id{3});
  auto e = ops.create_event(device_id{0});
  m.enqueue(producer, 50us);
  ops.record(e, producer);
  ops.wait(consumer, e);
  m.enqueue(consumer, 5us);
  auto done = ops.create_event(device_id{3});
  ops.record(done, consumer);
  m.advance(device_id{3}, 54us);
  REQUIRE_FALSE(ops.query(done));
  m.advance(device_id{3}, 1us);
  REQUIRE(ops.query(done));
  REQUIRE_THROWS_AS(ops.record(e, consumer), mgm::logic_error);  // stream and event on different devices
}

TEST_CASE("the host waiting moves the clock: synchronize and a free", "[sim][streams]") {
  auto m = mgm::sim::machine::preset("dgx-a100");
  const device_id d{0};
  auto ops = m.streams();
  const auto s = m.create_stream(d);
  auto e = ops.create_event(d);
  m.enqueue(s, 1ms);
  ops.record(e, s);
  ops.synchronize(e);
  REQUIRE(m.now(d) == 1ms);
  REQUIRE(ops.query(e));
  m.enqueue(s, 2ms);
  auto a = m.allocator(d);
  void* p = a.allocate(4096);
  a.deallocate(p, 4096);  // cudaFree synchronises the device
  REQUIRE(m.now(d) == 3ms);
  ops.destroy_event(e);
}

TEST_CASE("graph capture: no upstream calls and no event queries", "[sim][streams]") {
  auto m = mgm::sim::machine::preset("dgx-h100");
  const device_id d{2};
  auto ops = m.streams();
  auto a = m.allocator(d);
  const auto s = m.create_stream(d);
  auto e = ops.create_event(d);
  REQUIRE_FALSE(ops.is_capturing(s));
  m.begin_capture(s);
  REQUIRE(ops.is_capturing(s));
  REQUIRE_FALSE(ops.is_capturing(mgm::stream_ref{}));
  try {
    (void)a.allocate_async(4096, 256, s);
    FAIL("no exception");
  } catch (const mgm::cuda_error& err) {
    REQUIRE(err.code() == cudaErrorStreamCaptureUnsupported);
  }
  REQUIRE_THROWS_AS(a.allocate(4096), mgm::cuda_error);
  REQUIRE_THROWS_AS(ops.query(e), mgm::cuda_error);
  // Refused before the driver: nothing was allocated or counted as a call.
  REQUIRE(m.modelled(d).count(mgm::sim::driver_call::malloc) == 0);
  REQUIRE(m.memory(d).used_bytes == 0);
  ops.record(e, s);  // recording into a capture is allowed
  REQUIRE_THROWS_AS(m.begin_capture(s), mgm::logic_error);
  try {  // the prohibited calls broke the capture, as on CUDA
    (void)m.end_capture(s);
    FAIL("no exception");
  } catch (const mgm::cuda_error& err) {
    REQUIRE(err.code() == cudaErrorStreamCaptureInvalidated);
  }
  REQUIRE_FALSE(ops.is_capturing(s));
  REQUIRE_NOTHROW(ops.query(e));
  // Out of the capture the stream allocates again, through the driver this time.
  a.deallocate(a.allocate(4096), 4096);
  REQUIRE(m.modelled(d).count(mgm::sim::driver_call::malloc) == 1);
  REQUIRE(m.memory(d).used_bytes == 0);
  ops.destroy_event(e);
}

TEST_CASE("streams of another machine or device are rejected", "[sim][streams]") {
  auto m1 = mgm::sim::machine::preset("dgx-a100");
  auto m2 = mgm::sim::machine::preset("dgx-a100");
  const auto foreign = m2.create_stream(device_id{0});
  REQUIRE_THROWS_AS(m1.enqueue(foreign, 1us), mgm::logic_error);
  REQUIRE_THROWS_AS(m1.device_of(mgm::stream_ref{}), mgm::logic_error);
  const auto other_device = m1.create_stream(device_id{1});
  REQUIRE_THROWS_AS(m1.allocator(device_id{0}).allocate_async(256, 256, other_device), mgm::logic_error);
  int fake = 0;
  REQUIRE_THROWS_AS(m1.enqueue(mgm::stream_ref{reinterpret_cast<cudaStream_t>(&fake)}, 1us), mgm::logic_error);
}

TEST_CASE("virtual memory maps 2 MiB granules and never exceeds capacity", "[sim][vmm]") {
  mgm::sim::machine m{mgm::sim::parse_device_list("16MiB,16MiB")};
  auto vmm = m.vmm();
  const device_id d{0};
  REQUIRE(vmm.supported(d));
  REQUIRE(vmm.granularity(d) == 2 * MiB);
  void* va = vmm.reserve(d, 64 * MiB);  // address space may exceed capacity
  REQUIRE(reinterpret_cast<std::uintptr_t>(va) % (2 * MiB) == 0);

  std::vector<mgm::sim::vmm_ops::physical_handle> handles;
  for (int i = 0; i < 8; ++i) handles.push_back(vmm.create(d, 2 * MiB));
  REQUIRE(m.memory(d).used_bytes == 16 * MiB);
  REQUIRE_THROWS_AS(vmm.create(d, 2 * MiB), mgm::out_of_memory);  // physical memory is capacity
  REQUIRE(m.memory(d).used_bytes == 16 * MiB);
  REQUIRE_THROWS_AS(m.allocator(d).allocate(256), mgm::out_of_memory);  // shared with cudaMalloc

  auto* bytes = static_cast<std::byte*>(va);
  for (std::size_t i = 0; i < handles.size(); ++i) vmm.map(bytes + i * 2 * MiB, 2 * MiB, handles[i]);
  const std::vector<device_id> owner{d};
  vmm.set_access(va, 16 * MiB, owner);
  std::memset(va, 0x5A, 16 * MiB);  // mapped and accessible: real memory
  REQUIRE(std::to_integer<int>(bytes[16 * MiB - 1]) == 0x5A);

  // Bad calls are hazards the judge lists and throws (with the judge off, the driver's error).
  REQUIRE_THROWS_AS(vmm.map(bytes + 1, 2 * MiB, handles[0]), mgm::sim::stream_hazard);
  REQUIRE_THROWS_AS(vmm.map(bytes, 2 * MiB, handles[0]), mgm::sim::stream_hazard);  // already mapped
  REQUIRE_THROWS_AS(vmm.map(bytes + 62 * MiB, 4 * MiB, handles[0]), mgm::sim::stream_hazard);  // past the reservation
  REQUIRE_THROWS_AS(vmm.create(d, 3 * MiB), mgm::sim::stream_hazard);  // not a granule multiple
  REQUIRE_THROWS_AS(vmm.map(bytes + 20 * MiB, 2 * MiB, 999), mgm::sim::stream_hazard);
  REQUIRE(m.hazards().size() == 5);
  for (const auto& h : m.hazards()) REQUIRE(h.kind == mgm::sim::hazard_kind::vmm_contract);
  m.clear_hazards();

  // Unmapped handles keep their memory until released.
  vmm.unmap(bytes, 4 * MiB);
  REQUIRE(m.memory(d).used_bytes == 16 * MiB);
  vmm.release(handles[0]);
  vmm.release(handles[1]);
  REQUIRE(m.memory(d).used_bytes == 12 * MiB);
  vmm.unmap(bytes + 4 * MiB, 12 * MiB);
  for (std::size_t i = 2; i < handles.size(); ++i) vmm.release(handles[i]);
  REQUIRE(m.memory(d).used_bytes == 0);
  vmm.unreserve(va, 64 * MiB);
  REQUIRE(m.hazards().empty());

  mgm::sim::machine off{mgm::sim::parse_device_list("16MiB"), {mgm::sim::oracle_mode::off}};
  auto raw = off.vmm();
  REQUIRE_THROWS_AS(raw.create(d, 3 * MiB), mgm::cuda_error);  // as the driver fails
  REQUIRE(off.hazards().empty());
}

TEST_CASE("virtual memory access for peers follows peer capability", "[sim][vmm]") {
  auto m = mgm::sim::machine::preset("dgx1-v100");
  auto vmm = m.vmm();
  const device_id owner{0};
  void* va = vmm.reserve(owner, 2 * MiB);
  const auto h = vmm.create(owner, 2 * MiB);
  vmm.map(va, 2 * MiB, h);
  const std::vector<device_id> nvlink_peers{device_id{0}, device_id{3}};
  REQUIRE_NOTHROW(vmm.set_access(va, 2 * MiB, nvlink_peers));
  const std::vector<device_id> across_sockets{device_id{0}, device_id{5}};  // SYS
  try {
    vmm.set_access(va, 2 * MiB, across_sockets);
    FAIL("no exception");
  } catch (const mgm::cuda_error& e) {
    REQUIRE(e.code() == cudaErrorPeerAccessUnsupported);
  }
  vmm.unmap(va, 2 * MiB);
  vmm.release(h);
  vmm.unreserve(va, 2 * MiB);
  REQUIRE(m.memory(owner).used_bytes == 0);
}

TEST_CASE("peer access: capability from the links, already-enabled is success", "[sim][peers]") {
  auto dgx1 = mgm::sim::machine::preset("dgx1-v100");
  auto peers = dgx1.peers();
  REQUIRE(peers.can_access(device_id{0}, device_id{3}));   // NV2
  REQUIRE_FALSE(peers.can_access(device_id{0}, device_id{6}));  // SYS
  peers.enable(device_id{0}, device_id{3});
  REQUIRE_NOTHROW(peers.enable(device_id{0}, device_id{3}));
  REQUIRE(peers.is_enabled(device_id{0}, device_id{3}));
  // Both are driver calls (the second answers "already enabled", which the seam takes as success).
  REQUIRE(dgx1.modelled(device_id{0}).count(mgm::sim::driver_call::peer_enable) == 2);
  REQUIRE_FALSE(peers.is_enabled(device_id{3}, device_id{0}));  // one direction only
  REQUIRE(peers.connections(device_id{3}) == 1);
  try {
    peers.enable(device_id{0}, device_id{6});
    FAIL("no exception");
  } catch (const mgm::cuda_error& e) {
    REQUIRE(e.code() == cudaErrorPeerAccessUnsupported);
    REQUIRE(std::string{e.what()}.find("SYS") != std::string::npos);
  }
  peers.disable(device_id{0}, device_id{3});
  REQUIRE_FALSE(peers.is_enabled(device_id{0}, device_id{3}));

  // GeForce 40-series boards: no PCIe peer access even on the same host bridge.
  auto mixed = mgm::sim::machine::preset("pcie-4gpu-mixed");
  REQUIRE_FALSE(mixed.peers().can_access(device_id{0}, device_id{2}));
  // Explicit device lists: PHB on one NUMA node, peer access allowed.
  mgm::sim::machine custom{mgm::sim::parse_device_list("2x1GiB")};
  REQUIRE(custom.peers().can_access(device_id{0}, device_id{1}));
}

TEST_CASE("peer access: at most 8 peers per device", "[sim][peers]") {
  mgm::sim::machine m{mgm::sim::parse_device_list("10x64MiB")};
  auto peers = m.peers();
  for (int o = 1; o <= 8; ++o) peers.enable(device_id{0}, device_id{o});
  REQUIRE(peers.connections(device_id{0}) == 8);
  try {
    peers.enable(device_id{0}, device_id{9});
    FAIL("no exception");
  } catch (const mgm::cuda_error& e) {
    REQUIRE(e.code() == cudaErrorTooManyPeers);
  }
  REQUIRE_FALSE(peers.is_enabled(device_id{0}, device_id{9}));  // nothing changed
  // The reverse direction of an existing pair costs no new connection.
  REQUIRE_NOTHROW(peers.enable(device_id{1}, device_id{0}));
  REQUIRE(peers.is_enabled(device_id{1}, device_id{0}));
  REQUIRE(peers.connections(device_id{0}) == 8);
  REQUIRE(peers.connections(device_id{1}) == 1);
  // The limit binds on the owner's side too.
  REQUIRE_THROWS_AS(peers.enable(device_id{9}, device_id{0}), mgm::cuda_error);
  REQUIRE(peers.connections(device_id{9}) == 0);
  peers.disable(device_id{0}, device_id{8});
  REQUIRE(peers.connections(device_id{0}) == 7);
  REQUIRE_NOTHROW(peers.enable(device_id{0}, device_id{9}));  // a freed connection is usable again
  REQUIRE(peers.is_enabled(device_id{0}, device_id{9}));
  REQUIRE(peers.connections(device_id{0}) == 8);
}
