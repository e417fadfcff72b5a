// Placement: the ranking over real topologies, peer access within CUDA's limit, and the placed
// allocator on the simulated machines.
#include <mgm/partition/partitioner.hpp>
#include <mgm/partition/rebalance_driver.hpp>
#include <mgm/partition/rebalancer.hpp>
#include <mgm/placement/peer_access.hpp>
#include <mgm/placement/placed_allocator.hpp>
#include <mgm/sim/judged.hpp>
#include <mgm/placement/placement_policy.hpp>
#include <mgm/sim/machine.hpp>

#include "shared_data.hpp"
#include "sizes.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

using mgm::device_id;
using mgm_test::slurp;

namespace {

mgm::placement_request full_reader(const mgm::topology& t, device_id reader, std::size_t bytes) {
  mgm::placement_request r;
  r.reader = reader;
  r.bytes = bytes;
  r.free_bytes.assign(t.gpu_count(), 8 * GiB);
  r.free_bytes[reader.index()] = 0;  // the reader is full
  return r;
}

// A rebalancer's move of `items` items, from GPU `from` to GPU `to`.
mgm::partition_move move(std::size_t from, std::size_t to, std::size_t items, bool from_lost = false) {
  mgm::partition_move m;
  m.from = from;
  m.to = to;
  m.items = items;
  m.path = "NV18";
  m.from_lost = from_lost;
  return m;
}
using moves = std::vector<mgm::partition_move>;

std::vector<std::string> where(const std::vector<mgm::placement_candidate>& c) {
  std::vector<std::string> out;
  for (const auto& x : c) out.push_back(x.where.to_string());
  return out;
}
}  // namespace

TEST_CASE("placement: on the DGX-1, NV2 peers before NV1 peers, never a SYS peer", "[placement]") {
  auto m = mgm::sim::machine::preset("dgx1-v100");  // the layout of the real DGX-1 file
  const auto ranked = mgm::rank_placements(m.links(), full_reader(m.links(), device_id{0}, GiB));
  REQUIRE(where(ranked) == std::vector<std::string>{"GPU3", "GPU4", "GPU1", "GPU2", "host (NUMA 0)", "host (NUMA 1)"});
  REQUIRE(ranked[0].path == "NV2");
  REQUIRE(ranked[2].path == "NV1");
  REQUIRE(ranked[0].gbps == Approx(40.0));
  // With room, the reader itself comes first.
  auto r = full_reader(m.links(), device_id{0}, GiB);
  r.free_bytes[0] = 2 * GiB;
  REQUIRE(mgm::rank_placements(m.links(), r).front().where.device == device_id{0});
  // A reserve makes a peer too full.
  r.reserve_bytes.assign(8, 0);
  r.reserve_bytes[3] = 7 * GiB + 512 * MiB;
  r.free_bytes[0] = 0;
  REQUIRE(mgm::rank_placements(m.links(), r).front().where.device == device_id{4});
}

TEST_CASE("realdata: placement on the real DGX-1, PCIe boxes and NV18 machines", "[realdata][placement]") {
  const auto dir = mgm_test::shared_data("topologies");
  if (dir.empty()) return;
  const auto dgx1 = mgm::parse_smi_topology(slurp(dir / "topo_dgx1_v100_8gpu_hybridcubemesh_oneflow_dlperf.txt"));
  const auto d = mgm::rank_placements(dgx1, full_reader(dgx1, device_id{0}, GiB));
  REQUIRE(where(d) == std::vector<std::string>{"GPU3", "GPU4", "GPU1", "GPU2", "host"});
  // All-SYS (two sockets) and PHB workstations: host memory on the reader's NUMA node.
  const auto della = mgm::parse_smi_topology(slurp(dir / "topo_princeton_della_2x_a100_2nic_sys.txt"));
  REQUIRE(where(mgm::rank_placements(della, full_reader(della, device_id{1}, GiB))) ==
          std::vector<std::string>{"host (NUMA 1)", "host (NUMA 0)"});
  const auto puget = mgm::parse_smi_topology(slurp(dir / "topo_puget_wrx90_2x_rtx6000ada_phb_stelline.txt"));
  REQUIRE(where(mgm::rank_placements(puget, full_reader(puget, device_id{0}, GiB))) == std::vector<std::string>{"host (NUMA 0)"});
  const auto asus = mgm::parse_smi_topology(slurp(dir / "topo_asus_esc8000a_e12_4x_rtx6000ada_4nic_stelline.txt"));
  REQUIRE(mgm::rank_placements(asus, full_reader(asus, device_id{2}, GiB)).front().where.to_string() == "host (NUMA 1)");
  // NV18 all-to-all: the peer with the most headroom.
  const auto h100 = mgm::parse_smi_topology(slurp(dir / "topo_h100_8gpu_nv18_stas00_mlengineering.txt"));
  auto r = full_reader(h100, device_id{0}, GiB);
  r.free_bytes[6] = 20 * GiB;
  r.free_bytes[2] = 12 * GiB;
  const auto h = mgm::rank_placements(h100, r);
  REQUIRE(h[0].where.device == device_id{6});
  REQUIRE(h[1].where.device == device_id{2});
  REQUIRE(h[0].path == "NV18");
}

TEST_CASE("peer access: lazily, once per pair, beyond 8 peers, staged", "[placement][peers]") {
  // Ten GPUs behind one PCIe switch (no NVSwitch): every pair could connect.
  std::vector<mgm::sim::device_spec> specs(10, {"GPU", GiB, 80, 0, true});
  std::vector<mgm::gpu_info> gpus(10);
  mgm::topology links{gpus};
  for (int a = 0; a < 10; ++a) {
    for (int b = a + 1; b < 10; ++b) links.set_path(device_id{a}, device_id{b}, mgm::gpu_path::from_label("PIX"));
  }
  mgm::sim::machine m{specs, links};
  mgm::peer_access access{m.peers(), m.links()};
  for (int o = 1; o <= 8; ++o) REQUIRE(access.ensure(device_id{0}, device_id{o}));
  REQUIRE(access.ensure(device_id{0}, device_id{3}));  // already enabled: success, no second enable
  REQUIRE(access.enables() == 8);
  REQUIRE_FALSE(access.ensure(device_id{0}, device_id{9}));  // the 9th peer is staged...
  REQUIRE(access.is_staged(device_id{0}, device_id{9}));
  REQUIRE_FALSE(m.peers().is_enabled(device_id{0}, device_id{9}));  // ...not enabled
  REQUIRE(m.peers().connections(device_id{0}) == 8);
}

TEST_CASE("peer access: NVLink peers keep their connections", "[placement][peers]") {
  // GPU0 has 7 NVLink peers and 3 PCIe peers: the PCIe ones may take only what NVLink leaves.
  std::vector<mgm::sim::device_spec> specs(11, {"GPU", GiB, 80, 0, true});
  std::vector<mgm::gpu_info> gpus(11);
  mgm::topology links{gpus};
  for (int a = 0; a < 11; ++a) {
    for (int b = a + 1; b < 11; ++b) links.set_path(device_id{a}, device_id{b}, mgm::gpu_path::from_label(b <= 7 ? "NV4" : "PIX"));
  }
  mgm::sim::machine m{specs, links};
  mgm::peer_access access{m.peers(), m.links()};
  REQUIRE(access.ensure(device_id{0}, device_id{8}));        // 1 PCIe + 7 NVLink waiting = 8
  REQUIRE_FALSE(access.ensure(device_id{0}, device_id{9}));  // a second would starve an NVLink peer
  for (int o = 1; o <= 7; ++o) REQUIRE(access.ensure(device_id{0}, device_id{o}));
  REQUIRE(m.peers().connections(device_id{0}) == 8);
}

TEST_CASE("placed_allocator on the simulated DGX-1: fill GPU0, the next block lands on an NV2 peer", "[placement]") {
  auto m = mgm::sim::machine::preset("dgx1-v100");
  mgm::pool_options plain;
  plain.expandable_segments = false;
  mgm::placed_allocator placed{m.links(), [&](device_id d) { return m.allocator(d); },
                               [&](std::optional<int> numa) { return m.host_allocator(numa); }, m.peers(),
                               std::vector<std::size_t>(8, 256 * MiB), mgm::placement_options{}, plain};
  mgm::sim::judged judged{m, placed};  // every placement judged
  std::vector<void*> local;
  while (true) {  // 1 GiB blocks until GPU0 (15.78 GiB, 256 MiB reserved) is full
    void* p = judged.allocate(device_id{0}, GiB);
    if (placed.location_of(p)->device != device_id{0}) {
      judged.deallocate(p, GiB);
      break;
    }
    local.push_back(p);
  }
  REQUIRE(local.size() == 15);
  void* spilled = judged.allocate(device_id{0}, GiB);
  REQUIRE(placed.location_of(spilled)->device == device_id{3});  // NV2, the faster kind
  REQUIRE(m.owner_of(spilled) == device_id{3});
  REQUIRE(m.peers().is_enabled(device_id{0}, device_id{3}));
  REQUIRE(placed.peers().enables() == 1);
  const auto spills = placed.spills();
  REQUIRE(spills.size() == 2);  // the probe above, and this one
  REQUIRE(spills.back().path == "NV2");
  REQUIRE_FALSE(spills.back().staged);
  // The other NV2 peer now has more headroom: the next block goes there, the one after back to
  // GPU3, whose access is already enabled.
  void* again = judged.allocate(device_id{0}, GiB);
  REQUIRE(placed.location_of(again)->device == device_id{4});
  void* third = judged.allocate(device_id{0}, GiB);
  REQUIRE(placed.location_of(third)->device == device_id{3});
  REQUIRE(placed.peers().enables() == 2);  // each pair enabled once
  judged.deallocate(third, GiB);
  // Freed, it returns to GPU3's pool.
  const auto before = placed.pools().statistics(device_id{3}).allocated_bytes.current;
  judged.deallocate(spilled, GiB);
  REQUIRE(placed.pools().statistics(device_id{3}).allocated_bytes.current == before - static_cast<std::int64_t>(GiB));
  // GPU0 frees room: rebalance pulls the other spilled block home.
  judged.deallocate(local.back(), GiB);
  local.pop_back();
  std::memset(again, 0x7E, 4096);
  const auto moved = judged.rebalance();
  REQUIRE(moved.size() == 1);
  REQUIRE(moved[0].from_ptr == again);
  REQUIRE(placed.location_of(moved[0].to_ptr)->device == device_id{0});
  REQUIRE(static_cast<unsigned char*>(moved[0].to_ptr)[4095] == 0x7E);  // the contents came along
  judged.deallocate(moved[0].to_ptr, GiB);
  for (void* p : local) judged.deallocate(p, GiB);
  placed.release_all();
  for (int d = 0; d < 8; ++d) REQUIRE(m.memory(device_id{d}).used_bytes == 0);
  REQUIRE(m.hazards().empty());
}

TEST_CASE("placed_allocator::migrate: the platform's copy, the reserve kept, nothing changed on failure", "[placement]") {
  auto m = mgm::sim::machine::preset("dgx-h100");
  mgm::pool_options plain;
  plain.expandable_segments = false;
  const std::size_t reserve = 2 * GiB;
  mgm::placed_allocator placed{m.links(), [&](device_id d) { return m.allocator(d); },
                               [&](std::optional<int> numa) { return m.host_allocator(numa); }, m.peers(),
                               std::vector<std::size_t>(8, reserve), mgm::placement_options{}, plain};
  void* p = placed.allocate(device_id{0}, 8 * MiB);
  std::memset(p, 0x5A, 8 * MiB);
  void* q = placed.migrate(p, device_id{5});
  REQUIRE(q != p);
  REQUIRE(m.owner_of(q) == device_id{5});
  REQUIRE(placed.location_of(q)->device == device_id{5});
  REQUIRE_FALSE(placed.location_of(p));
  REQUIRE(static_cast<unsigned char*>(q)[8 * MiB - 1] == 0x5A);
  REQUIRE(m.peers().is_enabled(device_id{5}, device_id{0}));  // enabled for the copy: CUDA copies directly only then
  REQUIRE(m.peers().copies().peer == 1);  // NV18: peer to peer
  REQUIRE(m.peers().copies().staged == 0);
  REQUIRE(placed.statistics().migrations == 1);
  REQUIRE(placed.migrate(q, device_id{5}) == q);  // already there
  // A GPU with no room above its reserve: out_of_memory, the buffer where it was.
  const auto free6 = m.memory(device_id{6}).free_bytes;
  m.hold_foreign(device_id{6}, 1, "tenant", free6 - reserve - 4 * MiB);
  REQUIRE_THROWS_AS((void)placed.migrate(q, device_id{6}), mgm::out_of_memory);
  REQUIRE(placed.location_of(q)->device == device_id{5});
  REQUIRE(m.memory(device_id{6}).free_bytes >= reserve);
  int outside = 0;
  REQUIRE_THROWS_AS((void)placed.migrate(&outside, device_id{1}), mgm::logic_error);
  // The seam refuses a pointer said to be on a GPU it is not on, and a lost GPU.
  REQUIRE_THROWS_AS(m.peers().copy(q, device_id{1}, &outside, device_id::host(), 4, {}), mgm::logic_error);
  m.faults(device_id{5}).lose_device();
  REQUIRE_THROWS_AS((void)placed.migrate(q, device_id{4}), mgm::cuda_error);
  REQUIRE(placed.location_of(q)->device == device_id{5});
  // Without peer access enabled, the seam's copy between NVLink peers is staged, as CUDA's is.
  void* g1 = m.allocator(device_id{1}).allocate(MiB);
  void* g2 = m.allocator(device_id{2}).allocate(MiB);
  m.peers().copy(g2, device_id{2}, g1, device_id{1}, MiB, {});
  REQUIRE(m.peers().copies().staged == 1);
  m.allocator(device_id{1}).deallocate(g1, MiB);
  m.allocator(device_id{2}).deallocate(g2, MiB);
  // On GeForce boards (no peer access) the same copy is staged through host memory.
  auto mixed = mgm::sim::machine::preset("pcie-4gpu-mixed");
  mgm::placed_allocator pcie{mixed.links(), [&](device_id d) { return mixed.allocator(d); },
                             [&](std::optional<int> numa) { return mixed.host_allocator(numa); }, mixed.peers(),
                             std::vector<std::size_t>(4, 0),
                             mgm::placement_options{}, plain};
  void* r = pcie.allocate(device_id{0}, MiB);
  void* s2 = pcie.migrate(r, device_id{2});
  REQUIRE(mixed.peers().copies().staged == 1);
  pcie.deallocate(s2, MiB);
}

TEST_CASE("placed_allocator::apply_moves: a rebalancer's plan over the job's buffers, refused whole when it does not fit them",
          "[placement][rebalancer]") {
  auto m = mgm::sim::machine::preset("dgx-h100");
  mgm::pool_options plain;
  plain.expandable_segments = false;
  const std::size_t reserve = GiB;
  mgm::placed_allocator placed{m.links(), [&](device_id d) { return m.allocator(d); },
                               [&](std::optional<int> numa) { return m.host_allocator(numa); }, m.peers(),
                               std::vector<std::size_t>(8, reserve), mgm::placement_options{}, plain};
  constexpr std::size_t bytes = 2 * MiB;
  std::vector<std::vector<void*>> items(8);
  for (int g = 0; g < 3; ++g) {
    for (int k = 0; k < 4; ++k) {
      void* p = placed.allocate(device_id{g}, bytes);
      std::memset(p, 0x10 * (g + 1) + k, bytes);
      items[static_cast<std::size_t>(g)].push_back(p);
    }
  }
  // Refused before anything moves: the wrong number of lists, too few buffers on a sender (also
  // counting what an earlier move brings it), a buffer it did not place, a move to itself that
  // is not a rebuild (from_lost).
  const auto copy = items;
  std::vector<std::vector<void*>> seven(7);
  REQUIRE_THROWS_AS(placed.apply_moves(moves{move(0, 1, 1)}, seven, bytes), mgm::logic_error);
  REQUIRE_THROWS_WITH(placed.apply_moves(moves{move(0, 4, 3), move(0, 5, 2)}, items, bytes),
                      Catch::Contains("GPU0 holds 1 item buffers; a move takes 2"));
  REQUIRE_NOTHROW(placed.apply_moves(moves{}, items, bytes));
  auto foreign = items;
  int outside = 0;
  foreign[2].back() = &outside;
  REQUIRE_THROWS_WITH(placed.apply_moves(moves{move(2, 6, 1)}, foreign, bytes),
                      Catch::Contains("a buffer it did not place"));
  REQUIRE_THROWS_AS(placed.apply_moves(moves{move(1, 1, 1)}, items, bytes), mgm::logic_error);
  auto twice = items;
  twice[0][2] = twice[0][3];  // one buffer listed twice
  REQUIRE_THROWS_WITH(placed.apply_moves(moves{move(0, 2, 2)}, twice, bytes), Catch::Contains("a buffer listed twice"));
  auto null = items;
  null[1].push_back(nullptr);
  REQUIRE_THROWS_WITH(placed.apply_moves(moves{move(1, 3, 1)}, null, bytes), Catch::Contains("a null pointer"));
  REQUIRE_THROWS_WITH(placed.apply_moves(moves{move(1, 3, 1, true)}, items, 32 * bytes),
                      Catch::Contains("not bytes_per_item"));
  REQUIRE(items == copy);
  REQUIRE(placed.statistics().migrations == 0);
  // A plan: GPU0 sends 3 to GPU4 over NVLink, GPU4 passes 1 on to GPU5, and GPU2 is gone: its 2
  // last items are rebuilt on GPU6 (fresh memory, nothing copied from it).
  const moves plan{move(0, 4, 3), move(4, 5, 1), move(2, 6, 2, true)};
  const auto moved = placed.apply_moves(plan, items, bytes);
  REQUIRE(moved.size() == 6);
  REQUIRE(items[0].size() == 1);
  REQUIRE(items[4].size() == 2);
  REQUIRE(items[5].size() == 1);
  REQUIRE(items[2].size() == 2);
  REQUIRE(items[6].size() == 2);
  for (std::size_t g = 0; g < 8; ++g) {
    for (void* p : items[g]) REQUIRE(placed.location_of(p)->device == device_id{static_cast<int>(g)});
  }
  // The copies carry the data (the last of GPU0's buffers went first): GPU5's came via GPU4.
  REQUIRE(static_cast<unsigned char*>(items[4][0])[bytes - 1] == 0x10 + 3);
  REQUIRE(static_cast<unsigned char*>(items[5][0])[0] == 0x10 + 1);
  REQUIRE(placed.statistics().migrations == 4);
  REQUIRE(m.peers().copies().peer == 4);
  REQUIRE(m.peers().copies().staged == 0);
  for (const auto& b : moved) REQUIRE_FALSE(placed.location_of(b.from_ptr));
  // A receiver without room for the second of two: out_of_memory and nothing moved (a driver
  // that keeps its plan then still matches the buffers); the first one's new memory given back.
  m.hold_foreign(device_id{7}, 1, "tenant", m.memory(device_id{7}).free_bytes - reserve - bytes - MiB);
  const auto before = items;
  const auto used7 = m.memory(device_id{7}).used_bytes;
  REQUIRE_THROWS_AS(placed.apply_moves(moves{move(4, 7, 2)}, items, bytes), mgm::out_of_memory);
  REQUIRE(items == before);
  REQUIRE(static_cast<unsigned char*>(items[4][0])[bytes - 1] == 0x10 + 3);
  REQUIRE(m.memory(device_id{7}).free_bytes >= reserve);
  placed.release_all();
  REQUIRE(m.memory(device_id{7}).used_bytes <= used7);
  REQUIRE(placed.statistics().migrations == 4);
  // The same through two moves: the second receiver's lack undoes the first's (GPU4 keeps both).
  REQUIRE_THROWS_AS(placed.apply_moves(moves{move(4, 3, 1), move(4, 7, 1), move(0, 7, 1)}, items, bytes),
                    mgm::out_of_memory);
  REQUIRE(items == before);
  // A GPU that came back without its data rebuilds in place (a move to itself, from_lost): the
  // first k buffers of its list afresh, and a move from it after that takes the others.
  const void* first2 = items[2][0];
  const void* second2 = items[2][1];
  const auto rebuilt = placed.apply_moves(moves{move(2, 2, 1, true), move(2, 3, 1, true)}, items, bytes);
  REQUIRE(rebuilt.size() == 2);
  REQUIRE(rebuilt[0].from_ptr == first2);
  REQUIRE(rebuilt[1].from_ptr == second2);
  REQUIRE(items[2].size() == 1);
  REQUIRE(items[2][0] != first2);
  REQUIRE(items[3].size() == 1);
  REQUIRE(placed.location_of(items[2][0])->device == device_id{2});
  REQUIRE_FALSE(placed.location_of(first2));
  REQUIRE(placed.statistics().migrations == 4);  // rebuilt, not copied
  for (std::size_t g = 0; g < 8; ++g) {
    for (void* p : items[g]) REQUIRE(placed.location_of(p)->device == device_id{static_cast<int>(g)});
    for (void* p : items[g]) placed.deallocate(p, bytes);
  }
}

// The README's wiring: a rebalance_driver whose callback carries out each decision with
// apply_moves. The plan it keeps must always be where the buffers are.
TEST_CASE("rebalance_driver with apply_moves: a GPU rebuilt in place, and a receiver short of room, keep plan and buffers together",
          "[placement][rebalancer]") {
  constexpr std::size_t bpi = 64 * MiB;
  mgm::pool_options plain;
  plain.expandable_segments = false;
  // `items` of `bpi` bytes over `gpus` GPUs that each read `free` bytes free, 1 GiB kept.
  const auto job_of = [&](std::size_t items, int gpus, std::size_t free) {
    mgm::partition_request job;
    job.items = items;
    job.bytes_per_item = bpi;
    for (int d = 0; d < gpus; ++d) {
      mgm::partition_device pd;
      pd.free_bytes = free;
      pd.reserve_bytes = GiB;
      job.devices.push_back(pd);
    }
    return job;
  };
  const auto matches = [](const mgm::rebalance_driver& d, const std::vector<std::vector<void*>>& held) {
    for (std::size_t g = 0; g < held.size(); ++g) {
      if (d.plan().counts[g] != held[g].size()) return false;
    }
    return true;
  };
  SECTION("a GPU lost with no room elsewhere comes back and its items are rebuilt on it") {
    auto m = mgm::sim::machine::from_string("3x16GiB");
    mgm::placed_allocator placed{m.links(), [&](device_id d) { return m.allocator(d); },
                                 [&](std::optional<int> numa) { return m.host_allocator(numa); }, m.peers(),
                                 std::vector<std::size_t>(3, GiB), mgm::placement_options{}, plain};
    const auto job = job_of(30, 3, 10 * bpi + GiB);
    mgm::rebalancer_options o;
    o.readings_include_items = false;
    mgm::rebalancer r{job, o, m.links()};
    std::vector<std::vector<void*>> held(3);
    for (int d = 0; d < 3; ++d) {
      for (std::size_t k = 0; k < r.plan().counts[static_cast<std::size_t>(d)]; ++k) {
        held[static_cast<std::size_t>(d)].push_back(placed.allocate(device_id{d}, bpi));
      }
    }
    std::vector<mgm::gpu_reading> rd(3, mgm::gpu_reading{true, 10 * bpi + GiB, std::nullopt});
    int turn = 0;
    std::size_t rebuilt = 0;
    mgm::rebalance_driver drv{r,
                              [&] {
                                ++turn;
                                auto x = rd;
                                if (turn == 1) x[2].present = false;  // gone, and nowhere has room for its 10
                                return x;
                              },
                              std::chrono::milliseconds{1},
                              [&](const mgm::rebalance_decision& d) { rebuilt += placed.apply_moves(d.plan.moves, held, bpi).size(); },
                              {}, false};
    for (int i = 0; i < 4; ++i) {
      const auto e = drv.turn();
      INFO("turn " << i + 1 << ": " << e.message);
      REQUIRE(e.what != mgm::rebalance_event::kind::callback_failed);
      REQUIRE(matches(drv, held));
    }
    REQUIRE(drv.errors() == 0);
    REQUIRE(rebuilt == 10);  // GPU2's, afresh on GPU2
    for (void* p : held[2]) REQUIRE(placed.location_of(p)->device == device_id{2});
    for (std::size_t g = 0; g < 3; ++g) {
      for (void* p : held[g]) placed.deallocate(p, bpi);
    }
  }
  SECTION("a receiver whose reading is stale has no room: nothing moves, and the plan stays") {
    auto m = mgm::sim::machine::from_string("2x16GiB");
    mgm::placed_allocator placed{m.links(), [&](device_id d) { return m.allocator(d); },
                                 [&](std::optional<int> numa) { return m.host_allocator(numa); }, m.peers(),
                                 std::vector<std::size_t>(2, GiB), mgm::placement_options{}, plain};
    const auto job = job_of(20, 2, 10 * GiB);
    mgm::rebalancer_options o;
    o.readings_include_items = false;
    o.hold_steps = 1;
    mgm::rebalancer r{job, o, m.links()};
    std::vector<std::vector<void*>> held(2);
    for (int d = 0; d < 2; ++d) {
      for (std::size_t k = 0; k < r.plan().counts[static_cast<std::size_t>(d)]; ++k) {
        held[static_cast<std::size_t>(d)].push_back(placed.allocate(device_id{d}, bpi));
      }
    }
    // GPU0 has room for 3 more items above its reserve; its (stale) reading says 10 GiB. GPU1's
    // says it can keep 2: 8 of its 10 must go, and GPU0 runs out at the fourth.
    m.hold_foreign(device_id{0}, 9, "other", m.memory(device_id{0}).free_bytes - GiB - 3 * bpi - bpi / 2);
    const std::vector<mgm::gpu_reading> rd{{true, 10 * GiB, std::nullopt}, {true, 2 * bpi + GiB, std::nullopt}};
    mgm::rebalance_driver drv{r, [&] { return rd; }, std::chrono::milliseconds{1},
                              [&](const mgm::rebalance_decision& d) { (void)placed.apply_moves(d.plan.moves, held, bpi); },
                              {}, false};
    for (int i = 0; i < 3; ++i) {
      const auto e = drv.turn();
      INFO("turn " << i + 1 << ": " << e.message);
      REQUIRE(matches(drv, held));
    }
    REQUIRE(drv.errors() >= 1);  // the callback failed: out of memory, said
    REQUIRE(held[0].size() == 10);
    REQUIRE(placed.statistics().migrations == 0);
    for (std::size_t g = 0; g < 2; ++g) {
      for (void* p : held[g]) placed.deallocate(p, bpi);
    }
  }
}

TEST_CASE("placed_allocator on a PCIe box spills to host memory near the reader", "[placement]") {
  auto m = mgm::sim::machine::preset("pcie-4gpu-mixed");
  mgm::placed_allocator placed{m.links(), [&](device_id d) { return m.allocator(d); },
                               [&](std::optional<int> numa) { return m.host_allocator(numa); }, m.peers()};
  mgm::sim::judged judged{m, placed};  // every placement judged
  void* big = judged.allocate(device_id{1}, 20 * GiB);
  REQUIRE(placed.location_of(big)->device == device_id{1});
  void* more = judged.allocate(device_id{1}, 8 * GiB);
  const auto at = placed.location_of(more);
  REQUIRE(at->is_host());
  REQUIRE(at->numa_node == 1);  // GPU1's socket
  REQUIRE(placed.statistics().to_host == 1);
  REQUIRE(placed.statistics().spilled_bytes == 8 * GiB);
  judged.deallocate(more, 8 * GiB);
  judged.deallocate(big, 20 * GiB);
  REQUIRE(m.hazards().empty());
}

// The seed of the random traffic: MGM_TEST_SEED when set (to replay a failure), else a fresh one.
// Printed either way.
std::uint64_t traffic_seed() {
  if (const char* s = std::getenv("MGM_TEST_SEED"); s != nullptr && *s != '\0') return std::strtoull(s, nullptr, 0);
  return std::random_device{}();
}

TEST_CASE("placed_allocator property: random traffic on every preset keeps the reserve and the spill order",
          "[placement][property]") {
  const std::uint64_t seed = traffic_seed();
  std::cout << "placement property: seed " << seed << " (MGM_TEST_SEED=" << seed << " replays it)\n";
  for (const auto name : mgm::sim::machine::preset_names()) {
    INFO(name << ", seed " << seed);
    auto m = mgm::sim::machine::preset(name);
    const int n = m.device_count();
    const auto& links = m.links();
    std::vector<std::size_t> reserve(static_cast<std::size_t>(n), 512 * MiB);
    // No limiting adaptor: the placed allocator alone must keep each GPU's reserve free.
    mgm::placed_allocator placed{links, [&](device_id d) { return m.allocator(d); },
                                 [&](std::optional<int> numa) { return m.host_allocator(numa); }, m.peers(), reserve};
    mgm::sim::judged judged{m, placed};  // every placement judged
    // The oracle of "GPU d had room": its pool serves `bytes` itself, keeping the reserve free. A
    // count of free and cached bytes would not do: cached blocks may be too small, and their
    // memory may share physical chunks with live blocks, so that it cannot be given back. The
    // probe's memory stays in the pool's cache (given back when it reached into the reserve).
    const auto can_serve = [&](device_id d, std::size_t bytes) {
      auto& pool = placed.pools().pool(d);
      void* p = nullptr;
      try {
        p = pool.allocate(bytes);
      } catch (const mgm::out_of_memory&) {
        return false;
      }
      const bool kept = m.memory(d).free_bytes >= reserve[d.index()];
      pool.deallocate(p, bytes);
      if (!kept) (void)pool.release();
      return kept;
    };
    std::mt19937_64 rng{seed ^ std::hash<std::string_view>{}(name)};
    std::vector<std::pair<void*, std::size_t>> live;
    std::size_t to_peers = 0;
    for (int step = 0; step < 1500; ++step) {
      if (live.empty() || rng() % 3 != 0) {
        const device_id reader{static_cast<int>(rng() % static_cast<std::uint64_t>(n))};
        const std::size_t bytes = (1 + rng() % 64) * 64 * MiB;
        void* p = nullptr;
        try {
          p = judged.allocate(reader, bytes);
        } catch (const mgm::out_of_memory&) {
          continue;  // host memory full as well: a clear refusal, checked below to have changed nothing
        }
        live.emplace_back(p, bytes);
        const auto at = placed.location_of(p);
        REQUIRE(at.has_value());
        INFO("step " << step << ": " << bytes / MiB << " MiB for GPU" << reader.value() << " went to "
                     << at->to_string());
        // The reader first, whenever it has room above its reserve: elsewhere only when its pool
        // cannot serve the request now either (placement's failed attempt changed nothing).
        if (at->is_host() || at->device != reader) REQUIRE_FALSE(can_serve(reader, bytes));
        if (at->is_host()) {
          // Host memory only when no NVLink peer had room.
          for (int q = 0; q < n; ++q) {
            if (q == reader.value() || !links.path(reader, device_id{q}).is_nvlink()) continue;
            INFO("GPU" << q << " had room over " << links.path(reader, device_id{q}).label());
            REQUIRE_FALSE(can_serve(device_id{q}, bytes));
          }
        } else if (at->device != reader) {
          ++to_peers;
          const auto& via = links.path(reader, at->device);
          REQUIRE(via.type != mgm::path_type::sys);  // never across sockets
          // No peer with room was better: NVLink before PCIe, then the fastest.
          const double gbps = links.bandwidth(at->device, reader).gbps;
          for (int q = 0; q < n; ++q) {
            const device_id other{q};
            if (other == reader || other == at->device) continue;
            const auto& alt = links.path(reader, other);
            if (!alt.is_nvlink() || (via.is_nvlink() && links.bandwidth(other, reader).gbps <= gbps)) continue;
            if (!can_serve(other, bytes)) continue;
            // A faster NVLink peer could serve it: the choice was wrong.
            INFO("GPU" << q << " had room over " << alt.label());
            REQUIRE(via.is_nvlink());
            REQUIRE(links.bandwidth(other, reader).gbps <= gbps);
          }
        }
      } else {
        const std::size_t k = rng() % live.size();
        judged.deallocate(live[k].first, live[k].second);
        live[k] = live.back();
        live.pop_back();
      }
      for (int d = 0; d < n; ++d) {
        const auto mem = m.memory(device_id{d});
        INFO("GPU" << d << " after step " << step);
        REQUIRE(mem.used_bytes <= mem.total_bytes - reserve[static_cast<std::size_t>(d)]);
      }
    }
    std::cout << "  " << name << ": " << placed.statistics().spills << " spills, " << to_peers << " to peers\n";
    for (const auto& [p, bytes] : live) judged.deallocate(p, bytes);
    REQUIRE(placed.statistics().spilled_bytes == 0);
    placed.release_all();
    for (int d = 0; d < n; ++d) REQUIRE(m.memory(device_id{d}).used_bytes == 0);  // every byte went home
    REQUIRE(m.hazards().empty());
  }
}
