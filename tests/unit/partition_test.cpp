#include <mgm/partition/partitioner.hpp>
#include <mgm/sim/machine.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>

namespace {
constexpr std::size_t GB = 1'000'000'000;

mgm::partition_request gpus(std::vector<std::size_t> free_bytes, std::size_t items, std::size_t bytes_per_item,
                            mgm::partition_policy policy = mgm::partition_policy::memory) {
  mgm::partition_request r;
  r.items = items;
  r.bytes_per_item = bytes_per_item;
  r.policy = policy;
  for (auto f : free_bytes) r.devices.push_back({f, 0, 0, 1.0, 0, std::numeric_limits<std::size_t>::max(), 1.0});
  return r;
}
}  // namespace

TEST_CASE("partition: 81 layers over 80/80/80/40 GB is [23,23,23,12] (largest remainder)", "[partition]") {
  const auto plan = mgm::partition(gpus({80 * GB, 80 * GB, 80 * GB, 40 * GB}, 81, GB / 2));
  REQUIRE(plan.counts == std::vector<std::size_t>{23, 23, 23, 12});
  REQUIRE(plan.ranges[0] == std::pair<std::size_t, std::size_t>{0, 23});
  REQUIRE(plan.ranges[3] == std::pair<std::size_t, std::size_t>{69, 81});
}

TEST_CASE("partition: capacity caps, and the rest is re-apportioned", "[partition]") {
  // 100 items of 1 GB: device 2 may take at most 10, the others share the other 90 by memory.
  auto r = gpus({80 * GB, 40 * GB, 40 * GB}, 100, GB);
  r.devices[2].max_items = 10;
  const auto plan = mgm::partition(r);
  REQUIRE(plan.counts == std::vector<std::size_t>{60, 30, 10});
  REQUIRE(plan.capacity == std::vector<std::size_t>{80, 40, 10});
  // A fixed overhead and a reserve shrink a device's share.
  auto o = gpus({80 * GB, 80 * GB}, 60, GB);
  o.devices[1].overhead_bytes = 20 * GB;
  o.devices[1].reserve_bytes = 20 * GB;
  REQUIRE(mgm::partition(o).counts == std::vector<std::size_t>{40, 20});
}

TEST_CASE("partition: infeasible requests name the shortfall", "[partition]") {
  try {
    (void)mgm::partition(gpus({8 * GB, 8 * GB}, 20, GB));
    FAIL("no exception");
  } catch (const mgm::partition_error& e) {
    REQUIRE(std::string{e.what()}.find("4 more than the devices hold (16 items") != std::string::npos);
    REQUIRE(e.shortfall_items() == std::vector<std::size_t>{2, 2});
  }
  auto r = gpus({8 * GB, 8 * GB}, 10, GB);
  r.devices[1].reserve_bytes = 6 * GB;
  r.devices[1].min_items = 5;
  try {
    (void)mgm::partition(r);
    FAIL("no exception");
  } catch (const mgm::partition_error& e) {
    REQUIRE(std::string{e.what()}.find("device 1 lacks room for 3 items") != std::string::npos);
    REQUIRE(e.shortfall_items() == std::vector<std::size_t>{0, 3});
  }
  REQUIRE_THROWS_AS(mgm::partition(mgm::partition_request{}), mgm::logic_error);
  auto bad = gpus({GB}, 1, 1);
  bad.granularity = 0;
  REQUIRE_THROWS_AS(mgm::partition(bad), mgm::logic_error);
}

TEST_CASE("partition: granularity, with one remainder on the device with the most room", "[partition]") {
  auto r = gpus({80 * GB, 40 * GB, 40 * GB}, 103, GB / 4);
  r.granularity = 8;
  const auto plan = mgm::partition(r);
  std::size_t off_grid = 0;
  for (auto c : plan.counts) off_grid += c % 8 != 0 ? 1 : 0;
  REQUIRE(off_grid == 1);
  REQUIRE(plan.counts[0] % 8 == 103 % 8);  // the 80 GB device has the most spare room
  REQUIRE(plan.counts[0] + plan.counts[1] + plan.counts[2] == 103);
}

TEST_CASE("partition: random requests keep every invariant", "[partition][property]") {
  std::mt19937_64 rng{20261130};
  for (int round = 0; round < 2000; ++round) {
    INFO("round " << round);
    mgm::partition_request r;
    const std::size_t n = 1 + rng() % 6;
    r.bytes_per_item = 1 + rng() % 1000;
    r.granularity = 1 + rng() % 4;
    r.policy = static_cast<mgm::partition_policy>(rng() % 4);
    std::size_t cap_total = 0;
    for (std::size_t i = 0; i < n; ++i) {
      mgm::partition_device d;
      d.free_bytes = rng() % 200'000;
      d.throughput = 0.5 + static_cast<double>(rng() % 100) / 10.0;
      d.weight = 0.1 + static_cast<double>(rng() % 50);
      r.devices.push_back(d);
      cap_total += d.free_bytes / r.bytes_per_item;
    }
    r.items = cap_total == 0 ? 0 : rng() % (cap_total + 1);
    mgm::partition_plan plan;
    try {
      plan = mgm::partition(r);
    } catch (const mgm::partition_error&) {
      // Only the granularity can make a fitting request fail: the remainder finds no room.
      REQUIRE(r.granularity > 1);
      continue;
    }
    std::size_t sum = 0;
    std::size_t off_grid = 0;
    for (std::size_t i = 0; i < n; ++i) {
      sum += plan.counts[i];
      REQUIRE(plan.counts[i] <= plan.capacity[i]);
      off_grid += plan.counts[i] % r.granularity != 0 ? 1 : 0;
    }
    REQUIRE(sum == r.items);
    REQUIRE(off_grid <= 1);
    REQUIRE(mgm::partition(r).counts == plan.counts);  // deterministic
    // Contiguous ranges covering [0, N).
    std::vector<std::pair<std::size_t, std::size_t>> ranges = plan.ranges;
    std::sort(ranges.begin(), ranges.end());
    std::size_t at = 0;
    for (const auto& [b, e] : ranges) {
      REQUIRE(b == at);
      at = e;
    }
    REQUIRE(at == r.items);
    // Proportional policies, where no device is capped: each count within one unit of its quota.
    if (r.policy != mgm::partition_policy::throughput && r.granularity == 1) {
      bool capped = false;
      double total = 0;
      std::vector<double> w(n);
      for (std::size_t i = 0; i < n; ++i) {
        const auto& d = r.devices[i];
        w[i] = r.policy == mgm::partition_policy::memory ? static_cast<double>(d.free_bytes)
               : r.policy == mgm::partition_policy::equal ? 1.0
                                                          : d.weight;
        total += w[i];
      }
      for (std::size_t i = 0; i < n; ++i) capped = capped || static_cast<double>(r.items) * w[i] / total >= static_cast<double>(plan.capacity[i]);
      if (!capped) {
        for (std::size_t i = 0; i < n; ++i) {
          REQUIRE(std::abs(static_cast<double>(plan.counts[i]) - static_cast<double>(r.items) * w[i] / total) < 1.0);
        }
      }
    }
  }
}

TEST_CASE("partition: the throughput policy's makespan is the brute-force optimum", "[partition][property]") {
  std::mt19937_64 rng{7};
  for (int round = 0; round < 300; ++round) {
    INFO("round " << round);
    const std::size_t n = 1 + rng() % 4;
    mgm::partition_request r;
    r.policy = mgm::partition_policy::throughput;
    r.bytes_per_item = 1;
    r.items = rng() % 41;
    std::size_t cap_total = 0;
    for (std::size_t i = 0; i < n; ++i) {
      mgm::partition_device d;
      d.free_bytes = rng() % 30;
      d.throughput = static_cast<double>(1 + rng() % 8);
      r.devices.push_back(d);
      cap_total += d.free_bytes;
    }
    if (cap_total < r.items) continue;
    const auto plan = mgm::partition(r);
    // Every composition of the items within the capacities.
    double best = std::numeric_limits<double>::infinity();
    std::vector<std::size_t> c(n, 0);
    std::function<void(std::size_t, std::size_t)> walk = [&](std::size_t i, std::size_t left) {
      if (i + 1 == n) {
        if (left > r.devices[i].free_bytes) return;
        c[i] = left;
        double m = 0;
        for (std::size_t k = 0; k < n; ++k) m = std::max(m, static_cast<double>(c[k]) / r.devices[k].throughput);
        best = std::min(best, m);
        return;
      }
      for (std::size_t x = 0; x <= std::min(left, r.devices[i].free_bytes); ++x) {
        c[i] = x;
        walk(i + 1, left - x);
      }
    };
    walk(0, r.items);
    REQUIRE(plan.makespan == Approx(best));
  }
}

TEST_CASE("partition: NVLink neighbours get adjacent ranges", "[partition][topology]") {
  auto m = mgm::sim::machine::preset("dgx1-v100");
  const auto plan = mgm::partition(gpus(std::vector<std::size_t>(8, 16 * GB), 80, GB / 8), &m.links());
  REQUIRE(plan.order.size() == 8);
  REQUIRE(plan.order[0] == 0);
  std::size_t nvlink_steps = 0;
  for (std::size_t k = 1; k < plan.order.size(); ++k) {
    const auto& p = m.links().path(mgm::device_id{static_cast<int>(plan.order[k - 1])}, mgm::device_id{static_cast<int>(plan.order[k])});
    nvlink_steps += p.is_nvlink() ? 1 : 0;
    REQUIRE(plan.ranges[plan.order[k]].first == plan.ranges[plan.order[k - 1]].second);
  }
  REQUIRE(nvlink_steps == 7);  // a Hamiltonian path over NVLink exists on the cube-mesh, and is found
}

TEST_CASE("rebalance: hysteresis, overflow and the fewest moves over the best links", "[partition][rebalance]") {
  auto m = mgm::sim::machine::preset("dgx1-v100");
  auto r = gpus(std::vector<std::size_t>(8, 16 * GB), 80, GB / 8);
  const auto first = mgm::partition(r, &m.links());
  // A small change: kept.
  r.devices[1].free_bytes = 15 * GB;
  const auto kept = mgm::rebalance(first, r, &m.links());
  REQUIRE(kept.kept);
  REQUIRE(kept.moves.empty());
  REQUIRE(kept.plan.counts == first.counts);
  // Device 0 loses most of its memory: its items must move.
  r.devices[0].free_bytes = GB / 4;  // room for 2 items
  const auto moved = mgm::rebalance(first, r, &m.links());
  REQUIRE_FALSE(moved.kept);
  std::size_t out_of_0 = 0;
  std::size_t total = 0;
  std::size_t surplus = 0;
  for (std::size_t i = 0; i < 8; ++i) surplus += first.counts[i] > moved.plan.counts[i] ? first.counts[i] - moved.plan.counts[i] : 0;
  bool left_nvlink = false;
  for (const auto& mv : moved.moves) {
    total += mv.items;
    if (mv.from == 0) {
      out_of_0 += mv.items;
      const bool nvlink = mv.path.rfind("NV", 0) == 0;
      if (!nvlink) left_nvlink = true;
      if (left_nvlink) REQUIRE_FALSE(nvlink);  // NVLink peers first, then the rest
    }
  }
  REQUIRE(moved.moves.at(0).from == 0);
  REQUIRE(moved.moves.at(0).path.rfind("NV", 0) == 0);
  REQUIRE(out_of_0 == first.counts[0] - moved.plan.counts[0]);
  REQUIRE(total == surplus);  // nothing moves twice
  REQUIRE(moved.plan.counts[0] <= 2);
}

TEST_CASE("partition: the README's example", "[partition]") {
  mgm::partition_request r;
  r.items = 81;                    // 81 layers
  r.bytes_per_item = 1'000'000'000;  // of 1 GB
  for (std::size_t gb : {80, 80, 80, 40}) {
    mgm::partition_device d;
    d.free_bytes = gb * 1'000'000'000;
    r.devices.push_back(d);
  }
  REQUIRE(mgm::partition(r).counts == std::vector<std::size_t>{23, 23, 23, 12});
}
