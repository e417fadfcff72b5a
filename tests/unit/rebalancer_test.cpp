// The rebalancer against brute force (routes, the fewest moves), under generated noise, cooldowns,
// lost GPUs and failed readings; its driver over the simulator's telemetry.
#include "sizes.hpp"

#include <mgm/partition/cluster.hpp>
#include <mgm/partition/rebalance_driver.hpp>
#include <mgm/partition/rebalancer.hpp>
#include <mgm/sim/machine.hpp>
#include <mgm/telemetry/source.hpp>
#include <mgm/topology/topology.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <thread>

namespace {

// Four GPUs: two NVLink pairs, PCIe peers within a socket, SYS across.
mgm::topology four_gpus() {
  return mgm::parse_smi_topology(
      "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\n"
      "GPU0\t X \tNV4\tPHB\tSYS\t0-15\t0\n"
      "GPU1\tNV4\t X \tSYS\tPHB\t16-31\t1\n"
      "GPU2\tPHB\tSYS\t X \tNV2\t0-15\t0\n"
      "GPU3\tSYS\tPHB\tNV2\t X \t16-31\t1\n");
}

mgm::partition_request job(const std::vector<std::size_t>& free, std::size_t items, std::size_t bytes_per_item,
                           std::size_t reserve = 0) {
  mgm::partition_request r;
  r.items = items;
  r.bytes_per_item = bytes_per_item;
  for (const auto f : free) {
    mgm::partition_device d;
    d.free_bytes = f;
    d.reserve_bytes = reserve;
    r.devices.push_back(d);
  }
  return r;
}

std::vector<mgm::gpu_reading> readings(const std::vector<std::size_t>& free) {
  std::vector<mgm::gpu_reading> out;
  for (const auto f : free) out.push_back({true, f, std::nullopt});
  return out;
}

double cost_of(const std::vector<mgm::partition_move>& moves, const mgm::topology& links) {
  double c = 0;
  for (const auto& m : moves) c += static_cast<double>(m.items) * mgm::move_cost(links, m.from, m.to);
  return c;
}

// The least cost of sending every surplus into the room, over every transfer matrix.
double brute_force_cost(const std::vector<std::size_t>& surplus, std::vector<std::size_t> room, const mgm::topology& links) {
  const std::size_t n = surplus.size();
  double best = std::numeric_limits<double>::infinity();
  std::function<void(std::size_t, std::size_t, std::size_t, double)> go = [&](std::size_t from, std::size_t to,
                                                                             std::size_t left, double cost) {
    if (cost >= best) return;
    if (from == n) {
      best = cost;
      return;
    }
    if (left == 0) {
      const std::size_t next = from + 1;
      go(next, 0, next < n ? surplus[next] : 0, cost);
      return;
    }
    if (to == n) return;  // this sender could not place everything
    const std::size_t most = to == from ? 0 : std::min(left, room[to]);
    for (std::size_t k = 0; k <= most; ++k) {
      room[to] -= k;
      go(from, to + 1, left - k, cost + static_cast<double>(k) * (k == 0 ? 0.0 : mgm::move_cost(links, from, to)));
      room[to] += k;
    }
  };
  go(0, 0, surplus[0], 0.0);
  return best;
}

}  // namespace

TEST_CASE("route_moves: the least cost over the links, against brute force", "[rebalancer]") {
  const auto links = four_gpus();
  std::mt19937 rng{7};
  for (int round = 0; round < 300; ++round) {
    std::vector<std::size_t> surplus(4, 0);
    std::vector<std::size_t> room(4, 0);
    std::size_t need = 0;
    for (std::size_t i = 0; i < 4; ++i) {
      if (rng() % 2 == 0) {
        surplus[i] = rng() % 11;
        need += surplus[i];
      }
    }
    // Receivers with room enough in total, some of it short so the cheapest routes fill.
    std::size_t have = 0;
    for (std::size_t i = 0; i < 4; ++i) {
      if (surplus[i] == 0) {
        room[i] = rng() % 12;
        have += room[i];
      }
    }
    if (have < need) {
      for (std::size_t i = 0; i < 4; ++i) {
        if (surplus[i] == 0) {
          room[i] += need - have;
          break;
        }
      }
      have = std::accumulate(room.begin(), room.end(), std::size_t{0});
    }
    if (have < need) continue;  // every GPU sends: nowhere to go
    const auto moves = mgm::route_moves(surplus, room, &links);
    std::vector<std::size_t> sent(4, 0);
    std::vector<std::size_t> got(4, 0);
    for (const auto& m : moves) {
      REQUIRE(m.from != m.to);
      REQUIRE(m.items > 0);
      sent[m.from] += m.items;
      got[m.to] += m.items;
      REQUIRE(m.via_host == !mgm::has_peer_path(links, m.from, m.to));
      REQUIRE(m.path == links.path(mgm::device_id{static_cast<int>(m.from)}, mgm::device_id{static_cast<int>(m.to)}).label());
    }
    REQUIRE(sent == surplus);
    for (std::size_t i = 0; i < 4; ++i) REQUIRE(got[i] <= room[i]);
    const double brute = brute_force_cost(surplus, room, links);
    REQUIRE(cost_of(moves, links) == Approx(brute).epsilon(1e-6).margin(1e-9));
  }
  // Two senders, two receivers: each over its own NVLink, none through host memory.
  const auto moves = mgm::route_moves({4, 0, 4, 0}, {0, 4, 0, 4}, &links);
  REQUIRE(moves.size() == 2);
  for (const auto& m : moves) REQUIRE(m.path.rfind("NV", 0) == 0);
  REQUIRE_THROWS_AS(mgm::route_moves({5, 0}, {0, 4}, nullptr), mgm::logic_error);
}

TEST_CASE("has_peer_path and move_cost: NVLink, then PCIe peers, then through host memory", "[rebalancer]") {
  const auto links = four_gpus();
  REQUIRE(mgm::has_peer_path(links, 0, 1));
  REQUIRE(mgm::has_peer_path(links, 0, 2));   // PHB
  REQUIRE_FALSE(mgm::has_peer_path(links, 0, 3));  // SYS
  REQUIRE(mgm::move_cost(links, 0, 1) < mgm::move_cost(links, 2, 3));  // NV4 beats NV2
  REQUIRE(mgm::move_cost(links, 2, 3) < mgm::move_cost(links, 0, 2));  // NV2 beats PCIe
  REQUIRE(mgm::move_cost(links, 0, 2) < mgm::move_cost(links, 0, 3));  // PCIe beats host memory
  auto mixed = mgm::sim::machine::preset("pcie-4gpu-mixed");  // GeForce: no PCIe peers at all
  REQUIRE_FALSE(mgm::has_peer_path(mixed.links(), 0, 2));
}

TEST_CASE("rebalancer: overflows fixed with the fewest moves, against brute force", "[rebalancer]") {
  const auto links = four_gpus();
  std::mt19937 rng{11};
  int checked = 0;
  for (int round = 0; round < 400; ++round) {
    const std::size_t items = 4 + rng() % 37;  // up to 40
    const std::size_t bpi = GiB;
    std::vector<std::size_t> free(4);
    for (auto& f : free) f = (8 + rng() % 24) * GiB;
    mgm::rebalancer_options o;
    o.hold_steps = 1;
    o.min_change = 0.99;  // only overflows move: each decision is the fewest moves that fit
    o.readings_include_items = false;
    mgm::rebalancer r{job(free, items, bpi), o, links};
    const auto before = r.plan().counts;
    // New readings: some GPUs lose memory.
    std::vector<std::size_t> now = free;
    for (auto& f : now) {
      if (rng() % 2 == 0) f = (rng() % 10) * GiB;
    }
    const auto d = r.step(readings(now));
    std::vector<std::size_t> cap(4);
    for (std::size_t i = 0; i < 4; ++i) cap[i] = now[i] / bpi;
    const std::size_t total_cap = std::accumulate(cap.begin(), cap.end(), std::size_t{0});
    std::size_t over = 0;
    for (std::size_t i = 0; i < 4; ++i) over += before[i] > cap[i] ? before[i] - cap[i] : 0;
    if (total_cap < items) {
      REQUIRE_FALSE(d.moved());  // nothing fits: nothing moves
      continue;
    }
    // Brute force: the fewest items that must leave a GPU for every count to fit.
    std::size_t fewest = std::numeric_limits<std::size_t>::max();
    for (std::size_t a = 0; a <= std::min(items, cap[0]); ++a) {
      for (std::size_t b = 0; a + b <= items && b <= cap[1]; ++b) {
        for (std::size_t c = 0; a + b + c <= items && c <= cap[2]; ++c) {
          const std::size_t e = items - a - b - c;
          if (e > cap[3]) continue;
          const std::size_t counts[4] = {a, b, c, e};
          std::size_t moved = 0;
          for (std::size_t i = 0; i < 4; ++i) moved += before[i] > counts[i] ? before[i] - counts[i] : 0;
          fewest = std::min(fewest, moved);
        }
      }
    }
    REQUIRE(over == fewest);  // the overflow itself is the least that must move
    REQUIRE(d.moved() == (over > 0));
    if (!d.moved()) continue;
    std::size_t moved = 0;
    for (const auto& m : d.plan.moves) moved += m.items;
    REQUIRE(moved == fewest);
    const auto& after = d.plan.plan.counts;
    REQUIRE(std::accumulate(after.begin(), after.end(), std::size_t{0}) == items);
    std::vector<std::size_t> surplus(4, 0);
    std::vector<std::size_t> room(4, 0);
    for (std::size_t i = 0; i < 4; ++i) {
      REQUIRE(after[i] <= cap[i]);
      surplus[i] = before[i] > cap[i] ? before[i] - cap[i] : 0;
      room[i] = before[i] < cap[i] ? cap[i] - before[i] : 0;
    }
    // The cheapest routes for that surplus (brute force over every transfer).
    REQUIRE(cost_of(d.plan.moves, links) == Approx(brute_force_cost(surplus, room, links)).epsilon(1e-6));
    ++checked;
  }
  REQUIRE(checked > 50);
}

// Random rounds of two kinds: tenants take memory from GPUs that hold items (no overhead); or each
// GPU needs an overhead once it holds any item (a model replica, a context) and one GPU, which
// could not hold its overhead, gets room. Either way the receivers fit what arrives, and a GPU that
// starts holding items its overhead too, while the senders still hold their copies.
TEST_CASE("rebalancer: a large change goes to the new plan, no item moving twice, every receiver within its memory",
          "[rebalancer]") {
  const auto links = four_gpus();
  std::mt19937 rng{5};
  int moved_rounds = 0;
  int joined = 0;  // rounds where a GPU with no items received some
  for (int round = 0; round < 600; ++round) {
    const bool with_overhead = round % 2 == 1;
    const std::size_t items = 8 + rng() % 33;
    const std::size_t bpi = 256 * MiB;
    const std::size_t reserve = GiB;
    const std::size_t overhead = with_overhead ? (1 + rng() % 4) * GiB : 0;
    std::vector<std::size_t> free(4);
    for (auto& f : free) f = (12 + rng() % 20) * GiB;
    const std::size_t empty = with_overhead ? rng() % 4 : 4;
    if (with_overhead) free[empty] = reserve + overhead / 2;  // no room for its overhead: no items
    auto request = job(free, items, bpi, reserve);
    for (auto& d : request.devices) d.overhead_bytes = overhead;
    mgm::rebalancer_options o;
    o.hold_steps = 1;
    o.min_change = 0.05;
    mgm::rebalancer r{request, o, links};
    const auto before = r.plan().counts;
    if (with_overhead) REQUIRE(before[empty] == 0);
    // Readings as the driver sees them: the job's items (and overhead) count as used; a tenant
    // takes memory, or the empty GPU's tenant leaves.
    std::vector<std::size_t> now(4);
    for (std::size_t i = 0; i < 4; ++i) {
      const std::size_t tenant = !with_overhead && rng() % 3 == 0 ? (rng() % 10) * GiB : 0;
      const std::size_t held = before[i] * bpi + (before[i] != 0 ? overhead : 0);
      now[i] = i == empty ? (rng() % 30) * GiB : free[i] > held + tenant ? free[i] - held - tenant : 0;
    }
    const auto d = r.step(readings(now));
    if (!d.moved()) continue;
    ++moved_rounds;
    const auto& after = d.plan.plan.counts;
    REQUIRE(std::accumulate(after.begin(), after.end(), std::size_t{0}) == items);
    std::size_t surplus = 0;
    std::vector<std::size_t> in(4, 0);
    for (std::size_t i = 0; i < 4; ++i) surplus += before[i] > after[i] ? before[i] - after[i] : 0;
    std::size_t moved = 0;
    for (const auto& m : d.plan.moves) {
      moved += m.items;
      in[m.to] += m.items;
      REQUIRE(after[m.from] < before[m.from]);  // a sender only sends
      REQUIRE(after[m.to] > before[m.to]);      // a receiver only receives
    }
    REQUIRE(moved == surplus);  // the fewest moves between the two plans
    // And the cheapest routes for them (brute force over every transfer matrix).
    std::vector<std::size_t> sends(4, 0);
    std::vector<std::size_t> takes(4, 0);
    for (std::size_t i = 0; i < 4; ++i) {
      sends[i] = before[i] > after[i] ? before[i] - after[i] : 0;
      takes[i] = after[i] > before[i] ? after[i] - before[i] : 0;
    }
    REQUIRE(cost_of(d.plan.moves, links) == Approx(brute_force_cost(sends, takes, links)).epsilon(1e-6));
    if (with_overhead && in[empty] != 0) ++joined;
    for (std::size_t i = 0; i < 4; ++i) {
      // While the senders still hold their copies, what arrives fits above the reserve, with the
      // overhead of a GPU that starts holding items.
      const std::size_t starts = before[i] == 0 && in[i] != 0 ? overhead : 0;
      REQUIRE(in[i] * bpi + starts + reserve <= now[i]);
    }
  }
  REQUIRE(moved_rounds > 60);
  REQUIRE(joined > 30);
}

TEST_CASE("rebalancer: Gaussian noise and periodic spikes in a flat run move nothing", "[rebalancer]") {
  const auto links = four_gpus();
  const std::vector<std::size_t> free{70 * GiB, 70 * GiB, 40 * GiB, 40 * GiB};
  const std::size_t items = 400;
  const std::size_t bpi = 64 * MiB;
  const auto run = [&](mgm::rebalancer_options o) {
    o.readings_include_items = true;
    mgm::rebalancer r{job(free, items, bpi, 2 * GiB), o, links};
    std::mt19937 rng{3};
    std::normal_distribution<double> noise{0.0, 0.01};  // 1 % of the free memory
    std::size_t moves = 0;
    for (int t = 1; t <= 600; ++t) {
      std::vector<std::size_t> now(4);
      for (std::size_t i = 0; i < 4; ++i) {
        const double held = static_cast<double>(r.plan().counts[i] * bpi);
        double f = static_cast<double>(free[i]) - held;
        f *= 1.0 + noise(rng);
        if (t % 25 == static_cast<int>(i)) f -= 0.3 * static_cast<double>(free[i]);  // a one-reading spike
        now[i] = static_cast<std::size_t>(std::max(0.0, f));
      }
      if (r.step(readings(now)).moved()) ++moves;
    }
    return moves;
  };
  mgm::rebalancer_options defaults;
  REQUIRE(run(defaults) == 0);
  // The same run without hysteresis churns: the test can tell.
  mgm::rebalancer_options none;
  none.hold_steps = 1;
  none.min_change = 0.0;
  none.cooldown_steps = 0;
  REQUIRE(run(none) > 20);
}

TEST_CASE("rebalancer: a tenant arrives (items leave within two readings), leaves (they return after the cooldown)",
          "[rebalancer]") {
  const auto links = four_gpus();
  const std::vector<std::size_t> total{80 * GiB, 80 * GiB, 80 * GiB, 80 * GiB};
  const std::size_t items = 200;
  const std::size_t bpi = 128 * MiB;  // 25 GiB in all
  mgm::rebalancer_options o;  // hold 2, cooldown 6
  mgm::rebalancer r{job(total, items, bpi, GiB), o, links};
  std::size_t tenant = 0;
  const auto read = [&] {
    std::vector<std::size_t> now(4);
    for (std::size_t i = 0; i < 4; ++i) now[i] = total[i] - r.plan().counts[i] * bpi - (i == 1 ? tenant : 0);
    return r.step(readings(now));
  };
  const auto start = r.plan().counts;
  REQUIRE_FALSE(read().moved());
  tenant = 48 * GiB;  // 60 % of GPU1
  const auto first = read();
  REQUIRE_FALSE(first.moved());
  REQUIRE_THAT(first.plan.reason, Catch::Contains("1 of 2 readings"));
  const auto second = read();
  REQUIRE(second.moved());
  REQUIRE(second.plan.plan.counts[1] < start[1]);
  for (const auto& m : second.plan.moves) {
    REQUIRE(m.from == 1);
    REQUIRE(m.via_host == !mgm::has_peer_path(links, 1, m.to));  // GPU1 -> GPU2 is SYS: the only way
  }
  // GPU1's nearest peer over NVLink (NV4) takes the most.
  REQUIRE(second.plan.moves.front().to == 0);
  REQUIRE(second.plan.moves.front().path == "NV4");
  const std::uint64_t moved_at = second.step;
  tenant = 0;  // it leaves: back only once the cooldown ends
  std::uint64_t returned = 0;
  for (int t = 0; t < 12 && returned == 0; ++t) {
    const auto d = read();
    if (d.moved()) {
      returned = d.step;
      for (const auto& m : d.plan.moves) REQUIRE(m.to == 1);
      REQUIRE(d.plan.plan.counts == start);
    } else if (d.step > moved_at + 1) {
      REQUIRE_THAT(d.plan.reason, Catch::Contains("cooldown"));
    }
  }
  REQUIRE(returned == moved_at + o.cooldown_steps);
}

TEST_CASE("rebalancer: a lost GPU's items are re-placed at once, a missing reading keeps the last one", "[rebalancer]") {
  const auto links = four_gpus();
  const std::vector<std::size_t> total{80 * GiB, 80 * GiB, 80 * GiB, 80 * GiB};
  mgm::rebalancer_options o;
  o.readings_include_items = false;
  mgm::rebalancer r{job(total, 100, GiB), o, links};
  const auto start = r.plan().counts;
  auto now = readings(total);
  now[2].free_bytes.reset();
  const auto missing = r.step(now);
  REQUIRE_FALSE(missing.moved());
  REQUIRE(missing.notes.size() == 1);
  REQUIRE_THAT(missing.notes[0], Catch::Contains("GPU2: no memory reading"));
  now = readings(total);
  now[3].present = false;
  const auto lost = r.step(now);
  REQUIRE(lost.moved());  // no hold for a GPU that is gone
  REQUIRE(lost.lost == std::vector<std::size_t>{3});
  REQUIRE(lost.plan.plan.counts[3] == 0);
  std::size_t rebuilt = 0;
  for (const auto& m : lost.plan.moves) {
    REQUIRE(m.from == 3);
    REQUIRE(m.from_lost);
    rebuilt += m.items;
  }
  REQUIRE(rebuilt == start[3]);
  REQUIRE(r.gone()[3]);
  // It stays gone without moving again; when it is back it may take items again.
  REQUIRE_FALSE(r.step(now).moved());
  const auto back = r.step(readings(total));
  REQUIRE_THAT(back.notes.front(), Catch::Contains("GPU3 is back"));
  REQUIRE_FALSE(r.gone()[3]);
  // Bad input: a reading count that is not the GPU count.
  REQUIRE_THROWS_AS(r.step(readings({GiB})), mgm::logic_error);
  mgm::rebalancer_options bad;
  bad.hold_steps = 0;
  REQUIRE_THROWS_AS((mgm::rebalancer{job(total, 10, GiB), bad}), mgm::logic_error);
  REQUIRE_THROWS_AS((mgm::rebalancer{job(total, 1000, GiB)}), mgm::partition_error);
}

TEST_CASE("rebalancer: a GPU back with less room than it held: rebuilt there within its memory, the rest elsewhere",
          "[rebalancer]") {
  // Four full GPUs (readings count the job's items); GPU3 is lost and its items fit nowhere.
  mgm::rebalancer r{job({8 * GiB, 8 * GiB, 8 * GiB, 8 * GiB}, 32, GiB), {}, four_gpus()};
  REQUIRE(r.plan().counts == std::vector<std::size_t>{8, 8, 8, 8});
  auto gone = readings({0, 0, 0, 0});
  gone[3].present = false;
  REQUIRE_FALSE(r.step(gone).moved());
  // It comes back with 4 GiB free (a tenant took the rest), and no other GPU has room: its data is
  // gone, so its reading is all it has (before: its 8 lost items were added back to the reading
  // and all 8 rebuilt into 4 GiB).
  const auto tight = r.step(readings({0, 0, 0, 4 * GiB}));
  INFO(tight.plan.reason);
  REQUIRE_FALSE(tight.moved());
  REQUIRE_THAT(tight.plan.reason, Catch::Contains("8 items of lost GPUs fit nowhere else now"));
  // Room appears on GPU0 (6 GiB more): 4 rebuilt on GPU3, 4 on GPU0 (before: never rebuilt, since
  // only the step the GPU came back on rebuilt).
  const auto room = r.step(readings({6 * GiB, 0, 0, 4 * GiB}));
  INFO(room.plan.reason);
  REQUIRE(room.moved());
  REQUIRE_THAT(room.plan.reason, Catch::Contains("rebuilt 8 items: GPU3 (room for 4 items there now)"));
  const std::vector<std::size_t> usable{14, 8, 8, 4};  // GiB: each reading plus the items whose data it holds
  std::size_t in_place = 0, elsewhere = 0;
  for (const auto& m : room.plan.moves) {
    REQUIRE(m.from == 3);
    REQUIRE(m.from_lost);
    (m.to == 3 ? in_place : elsewhere) += m.items;
  }
  CHECK(in_place == 4);
  CHECK(elsewhere == 4);
  const auto& counts = room.plan.plan.counts;
  CHECK(std::accumulate(counts.begin(), counts.end(), std::size_t{0}) == 32);
  for (std::size_t i = 0; i < 4; ++i) {
    INFO("GPU" << i);
    CHECK(counts[i] <= usable[i]);  // no GPU over its memory
  }
  // The items are in place: the same readings again move nothing.
  CHECK_FALSE(r.step(readings({2 * GiB, 0, 0, 0})).moved());
}

TEST_CASE("rebalance_driver: failed readings, a throwing callback and a thread with a period", "[rebalancer]") {
  const std::vector<std::size_t> total{40 * GiB, 40 * GiB};
  mgm::rebalancer_options o;
  o.hold_steps = 1;
  o.readings_include_items = false;
  int calls = 0;
  std::size_t gpu0 = 40 * GiB;
  const auto read = [&] {
    ++calls;
    if (calls == 2) throw std::runtime_error{"NVML went away"};
    return readings({gpu0, 40 * GiB});
  };
  int changes = 0;
  bool fail_moves = true;
  std::vector<mgm::rebalance_event> events;
  mgm::rebalance_driver d{
      mgm::rebalancer{job(total, 40, GiB), o}, read, std::chrono::milliseconds{1},
      [&](const mgm::rebalance_decision&) {
        ++changes;
        if (fail_moves) throw std::runtime_error{"a copy failed"};
      },
      [&](const mgm::rebalance_event& e) { events.push_back(e); }, false};
  REQUIRE(d.turn().what == mgm::rebalance_event::kind::stayed);
  const auto failed = d.turn();
  REQUIRE(failed.what == mgm::rebalance_event::kind::reading_failed);
  REQUIRE_THAT(failed.message, Catch::Contains("NVML went away"));
  gpu0 = 10 * GiB;  // GPU0 can hold 10 items now
  const auto refused = d.turn();
  REQUIRE(refused.what == mgm::rebalance_event::kind::callback_failed);
  REQUIRE(d.plan().counts == std::vector<std::size_t>{20, 20});  // back to the plan before
  fail_moves = false;
  const auto moved = d.turn();
  REQUIRE(moved.what == mgm::rebalance_event::kind::moved);
  REQUIRE(d.plan().counts[0] <= 10);
  REQUIRE(d.errors() == 2);
  REQUIRE(d.changes() == 1);
  REQUIRE(changes == 2);
  REQUIRE(events.size() == 4);
  REQUIRE(d.turns() == 4);

  // On its own thread, at a period, over the simulator's telemetry.
  auto m = mgm::sim::machine::preset("dgx-h100");
  std::shared_ptr<mgm::telemetry::source> src = mgm::telemetry::make_sim_source(m);
  std::vector<std::size_t> free(8);
  for (int g = 0; g < 8; ++g) free[static_cast<std::size_t>(g)] = m.memory(mgm::device_id{g}).free_bytes;
  mgm::rebalancer_options so;
  so.readings_include_items = false;
  std::atomic<int> moved_events{0};
  mgm::rebalance_driver threaded{mgm::rebalancer{job(free, 400, GiB), so, m.links()},
                                 mgm::rebalance_driver::from_source(src, 8), std::chrono::milliseconds{2},
                                 [&](const mgm::rebalance_decision&) { moved_events.fetch_add(1); }};
  m.hold_foreign(mgm::device_id{5}, 4242, "tenant", 60 * GiB);
  for (int spin = 0; spin < 5000 && threaded.changes() == 0; ++spin) std::this_thread::sleep_for(std::chrono::milliseconds{1});
  threaded.stop();
  REQUIRE(threaded.changes() >= 1);
  REQUIRE(moved_events.load() >= 1);
  REQUIRE(threaded.plan().counts[5] < 30);  // from 50
}

TEST_CASE("rebalance_driver: readings of the wrong GPUs are refused, a throwing event callback is ignored", "[rebalancer]") {
  const std::vector<std::size_t> total{40 * GiB, 40 * GiB};
  mgm::rebalancer_options o;
  o.hold_steps = 1;
  o.readings_include_items = false;
  std::vector<std::size_t> now{40 * GiB, 40 * GiB};
  int event_calls = 0;
  mgm::rebalance_driver d{mgm::rebalancer{job(total, 40, GiB), o}, [&] { return readings(now); },
                          std::chrono::milliseconds{1}, [](const mgm::rebalance_decision&) {},
                          [&](const mgm::rebalance_event&) {
                            ++event_calls;
                            throw std::runtime_error{"the log is full"};
                          },
                          false};
  REQUIRE(d.turn().what == mgm::rebalance_event::kind::stayed);
  now = {40 * GiB, 40 * GiB, 40 * GiB};  // a third GPU appeared in the readings: not this plan's
  const auto refused = d.turn();
  REQUIRE(refused.what == mgm::rebalance_event::kind::reading_failed);
  REQUIRE_THAT(refused.message, Catch::StartsWith("the readings were refused: rebalancer: 3 readings for 2 GPUs"));
  REQUIRE(d.plan().counts == std::vector<std::size_t>{20, 20});
  now = {10 * GiB, 40 * GiB};
  REQUIRE(d.turn().what == mgm::rebalance_event::kind::moved);  // the loop goes on
  REQUIRE(d.plan().counts[0] <= 10);
  REQUIRE(event_calls == 3);  // every turn told, every throw swallowed
  REQUIRE(d.errors() == 1);
  REQUIRE(d.changes() == 1);
  // On its thread too: the loop keeps turning while the event callback throws.
  mgm::rebalance_driver threaded{mgm::rebalancer{job(total, 40, GiB), o}, [] { return readings({40 * GiB, 40 * GiB}); },
                                 std::chrono::milliseconds{1}, [](const mgm::rebalance_decision&) {},
                                 [](const mgm::rebalance_event&) { throw 42; }};
  for (int spin = 0; spin < 5000 && threaded.turns() < 5; ++spin) std::this_thread::sleep_for(std::chrono::milliseconds{1});
  threaded.stop();
  REQUIRE(threaded.turns() >= 5);
  REQUIRE(threaded.errors() == 0);
}

TEST_CASE("readings_from: the simulator's batch, a lost GPU, a foreign process, pool cache as free", "[rebalancer]") {
  auto m = mgm::sim::machine::preset("pcie-4gpu-mixed");
  m.hold_foreign(mgm::device_id{1}, 99, "other-job", 4 * GiB);
  REQUIRE_THROWS_AS(m.hold_foreign(mgm::device_id{2}, 99, "other-job", 64 * GiB), mgm::out_of_memory);
  m.faults(mgm::device_id{3}).lose_device();
  auto src = mgm::telemetry::make_sim_source(m);
  const auto batch = src->sample();
  REQUIRE(batch[3].lost);
  REQUIRE(batch[1].processes.size() == 1);
  REQUIRE(batch[1].processes[0].pid == 99);
  const auto r = mgm::readings_from(batch, 4);
  REQUIRE(r[0].present);
  REQUIRE(r[1].free_bytes.value() == m.memory(mgm::device_id{1}).free_bytes);
  REQUIRE(r[1].free_bytes.value() + 4 * GiB == m.memory(mgm::device_id{0}).free_bytes);
  REQUIRE_FALSE(r[3].present);
  REQUIRE(m.release_foreign(mgm::device_id{1}, 99) == 4 * GiB);
  REQUIRE(m.release_foreign(mgm::device_id{1}, 99) == 0);
  // A GPU the batch lacks is gone; keys pick GPUs by UUID / bus id.
  const auto five = mgm::readings_from(batch, 5);
  REQUIRE_FALSE(five[4].present);
  auto with_cache = batch;
  with_cache[0].pool_reserved = 3 * GiB;
  with_cache[0].pool_allocated = GiB;
  REQUIRE(mgm::readings_from(with_cache, 4)[0].free_bytes.value() == *batch[0].memory_free + 2 * GiB);
  REQUIRE(mgm::readings_from(with_cache, 4, {}, {false})[0].free_bytes.value() == *batch[0].memory_free);
  std::vector<std::string> keys;
  for (const auto& s : batch) keys.push_back(s.key());
  std::reverse(keys.begin(), keys.end());
  const auto reversed = mgm::readings_from(batch, 4, keys);
  REQUIRE_FALSE(reversed[0].present);  // GPU3, lost
  REQUIRE(reversed[3].present);
}

TEST_CASE("rebalancer: review cases (items lost with no room, a first missing reading, overheads carried)",
          "[rebalancer]") {
  // A lost GPU whose items fit nowhere: they stay lost; when it comes back they are rebuilt there.
  mgm::rebalancer_options o;
  o.readings_include_items = false;
  mgm::rebalancer r{job({8 * GiB, 8 * GiB, 8 * GiB}, 24, GiB), o};
  REQUIRE(r.plan().counts == std::vector<std::size_t>{8, 8, 8});
  auto now = readings({8 * GiB, 8 * GiB, 8 * GiB});
  now[2].present = false;
  const auto nowhere = r.step(now);
  REQUIRE_FALSE(nowhere.moved());
  REQUIRE_THAT(nowhere.plan.reason, Catch::Contains("8 items of lost GPUs fit nowhere"));
  const auto back = r.step(readings({8 * GiB, 8 * GiB, 8 * GiB}));
  REQUIRE(back.moved());
  REQUIRE(back.plan.moves.size() == 1);
  REQUIRE(back.plan.moves[0].from == 2);
  REQUIRE(back.plan.moves[0].to == 2);
  REQUIRE(back.plan.moves[0].from_lost);
  REQUIRE(back.plan.moves[0].items == 8);
  REQUIRE_FALSE(r.step(readings({8 * GiB, 8 * GiB, 8 * GiB})).moved());

  // Readings that count the job's items: a GPU without a first reading is not given the job's
  // share twice (the start readings were taken before the items were in place).
  mgm::rebalancer_options held;
  held.hold_steps = 1;
  mgm::rebalancer two{job({40 * GiB, 40 * GiB}, 40, GiB), held};
  std::vector<mgm::gpu_reading> gpu1_silent{{true, 20 * GiB, std::nullopt}, {true, std::nullopt, std::nullopt}};
  const auto silent = two.step(gpu1_silent);
  REQUIRE_FALSE(silent.moved());
  REQUIRE_THAT(silent.plan.reason, Catch::Contains("matches"));

  // Overheads carried into the last readings: two senders fill a GPU that held nothing; a step
  // without any reading then sees the same GPUs and keeps the plan exactly.
  mgm::partition_request with_overhead = job({30 * GiB, 30 * GiB, GiB}, 40, GiB);
  for (auto& d : with_overhead.devices) d.overhead_bytes = 2 * GiB;
  mgm::rebalancer three{with_overhead, held};
  REQUIRE(three.plan().counts[2] == 0);
  const auto c = three.plan().counts;
  const auto free_now = [&](std::size_t i, std::size_t total) { return total - c[i] * GiB - (c[i] != 0 ? 2 * GiB : 0); };
  const auto grew = three.step(readings({free_now(0, 30 * GiB), free_now(1, 30 * GiB), 30 * GiB}));
  REQUIRE(grew.moved());
  REQUIRE(grew.plan.moves.size() == 2);  // GPU0 and GPU1 both send to GPU2
  std::vector<mgm::gpu_reading> none(3, mgm::gpu_reading{true, std::nullopt, std::nullopt});
  const auto blind = three.step(none);
  REQUIRE_FALSE(blind.moved());
  REQUIRE_THAT(blind.plan.reason, Catch::Contains("matches"));

  // The throughput policy: another plan that is not faster says so. GPU0 must hold 500 items and
  // sets the makespan; GPU1 and GPU2 trade speeds, so their split changes and the makespan not.
  mgm::partition_request fast = job({80 * GiB, 80 * GiB, 80 * GiB}, 1000, 10 * MiB);
  fast.policy = mgm::partition_policy::throughput;
  fast.devices[0].min_items = 500;
  fast.devices[1].throughput = 10.0;
  fast.devices[2].throughput = 10.0;
  mgm::rebalancer_options t;
  t.readings_include_items = false;
  t.min_change = 0.2;
  t.hold_steps = 1;
  mgm::rebalancer tp{fast, t};
  std::vector<mgm::gpu_reading> traded{{true, 80 * GiB, 1.0}, {true, 80 * GiB, 1.0}, {true, 80 * GiB, 19.0}};
  const auto small_gain = tp.step(traded);
  INFO(small_gain.plan.reason);
  REQUIRE_FALSE(small_gain.moved());
  REQUIRE_THAT(small_gain.plan.reason, Catch::Contains("% faster, under the 20.0 %"));

  // rebalance() with fewer items than the previous plan: the surplus beyond the deficits is dropped.
  const auto first = mgm::partition(job({40 * GiB, 40 * GiB}, 20, GiB));
  auto fewer = job({40 * GiB, 5 * GiB}, 15, GiB);
  const auto shrunk = mgm::rebalance(first, fewer);
  std::size_t sum = 0;
  for (const auto n : shrunk.plan.counts) sum += n;
  REQUIRE(sum == 15);
  // route_moves: a sender's own room does not count.
  REQUIRE_THROWS_WITH(mgm::route_moves({1, 0}, {1, 0}, nullptr), Catch::Contains("1 items to send, room for 0"));
}

TEST_CASE("rebalance_driver: plan() shows a change only once its moves are done, stop() from a callback", "[rebalancer]") {
  mgm::rebalancer_options o;
  o.hold_steps = 1;
  o.readings_include_items = false;
  std::size_t gpu0 = 40 * GiB;
  const auto read = [&] { return readings({gpu0, 40 * GiB}); };
  mgm::rebalance_driver* self = nullptr;
  std::vector<std::size_t> seen_in_callback;
  mgm::rebalance_driver d{mgm::rebalancer{job({40 * GiB, 40 * GiB}, 40, GiB), o}, read, std::chrono::milliseconds{1},
                          [&](const mgm::rebalance_decision&) { seen_in_callback = self->plan().counts; }, {}, false};
  self = &d;
  gpu0 = 10 * GiB;
  REQUIRE(d.turn().what == mgm::rebalance_event::kind::moved);
  REQUIRE(seen_in_callback == std::vector<std::size_t>{20, 20});  // the old plan while the moves ran
  REQUIRE(d.plan().counts[0] <= 10);

  // A callback that stops its own driver: the loop ends after that turn, nothing aborts.
  std::atomic<int> calls{0};
  mgm::rebalance_driver* me = nullptr;
  std::atomic<bool> ready{false};
  std::size_t flip = 40 * GiB;
  mgm::rebalance_driver threaded{mgm::rebalancer{job({40 * GiB, 40 * GiB}, 40, GiB), o},
                                 [&] {
                                   flip = flip == 40 * GiB ? 10 * GiB : 40 * GiB;
                                   return readings({flip, 40 * GiB});
                                 },
                                 std::chrono::milliseconds{1},
                                 [&](const mgm::rebalance_decision&) {
                                   calls.fetch_add(1);
                                   while (!ready.load()) std::this_thread::yield();
                                   me->stop();
                                 }};
  me = &threaded;
  ready.store(true);
  for (int spin = 0; spin < 5000 && calls.load() == 0; ++spin) std::this_thread::sleep_for(std::chrono::milliseconds{1});
  std::this_thread::sleep_for(std::chrono::milliseconds{20});
  REQUIRE(calls.load() == 1);  // stopped after the turn that called back
  threaded.stop();
}

TEST_CASE("cluster_links: items move within a node before they cross the network", "[rebalancer]") {
  // Two nodes of two GPUs: GPU 0 (node 0) sends 4 items; GPU 1 (node 0) and GPU 2 (node 1) have room.
  const auto links = mgm::cluster_links({0, 0, 1, 1});
  REQUIRE(links.path(mgm::device_id{0}, mgm::device_id{1}).type == mgm::path_type::sys);
  REQUIRE(links.path(mgm::device_id{1}, mgm::device_id{2}).type == mgm::path_type::net);
  REQUIRE(mgm::move_cost(links, 0, 2) > mgm::move_cost(links, 0, 1));
  REQUIRE_FALSE(mgm::has_peer_path(links, 0, 2));
  auto moves = mgm::route_moves({4, 0, 0, 0}, {0, 4, 4, 4}, &links);
  REQUIRE(moves.size() == 1);
  CHECK(moves[0].to == 1);
  CHECK(moves[0].path == "SYS");
  CHECK(moves[0].via_host);
  // Room for only 1 on the node: the rest crosses, labelled as the network.
  moves = mgm::route_moves({4, 0, 0, 0}, {0, 1, 4, 0}, &links);
  REQUIRE(moves.size() == 2);
  std::size_t crossed = 0;
  for (const auto& m : moves) {
    if (m.to == 1) CHECK(m.items == 1);
    if (m.to == 2) {
      CHECK(m.path == "NET");
      crossed += m.items;
    }
  }
  CHECK(crossed == 3);
  // Through the rebalancer: GPU 0 of node 0 crowded by a tenant; its items go to its own node's GPU.
  mgm::partition_request r;
  r.items = 40;
  r.bytes_per_item = std::size_t{1} << 30;
  for (int i = 0; i < 4; ++i) {
    mgm::partition_device d;
    d.free_bytes = std::size_t{20} << 30;
    r.devices.push_back(d);
  }
  mgm::rebalancer rb{r, {.min_change = 0.05, .hold_steps = 1, .cooldown_steps = 6, .readings_include_items = true}, links};
  std::vector<mgm::gpu_reading> now(4, mgm::gpu_reading{true, std::size_t{10} << 30, std::nullopt});
  now[0].free_bytes = 0;  // a tenant took all the room the job did not use there
  now[1].free_bytes = std::size_t{20} << 30;
  const auto d = rb.step(now);
  REQUIRE(d.moved());
  std::size_t left = 0;
  for (const auto& m : d.plan.moves) {
    INFO(m.from << " -> " << m.to << " " << m.items << " over " << m.path);
    if (m.from != 0) continue;
    CHECK(m.to == 1);  // the crowded GPU's items stay on its node
    left += m.items;
  }
  CHECK(left == 5);  // usable 10, 30, 20, 20 GiB: 5, 15, 10, 10 of the 40
}
