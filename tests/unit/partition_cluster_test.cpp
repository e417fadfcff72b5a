// partition_cluster: nodes first, each node's items one contiguous range over its GPUs.
#include <mgm/partition/cluster.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>

namespace {

constexpr std::size_t gib = std::size_t{1} << 30;

mgm::partition_device gpu(std::size_t free, std::size_t reserve = 0) {
  mgm::partition_device d;
  d.free_bytes = free;
  d.reserve_bytes = reserve;
  return d;
}

// Every invariant cluster.hpp promises, for any plan.
void check_invariants(const mgm::partition_request& r, const std::vector<mgm::cluster_node>& nodes,
                      const mgm::cluster_plan& plan) {
  REQUIRE(plan.nodes.size() == nodes.size());
  std::size_t total = 0;
  std::size_t next = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const auto& share = plan.nodes[i];
    INFO("node " << i);
    total += share.items;
    CHECK(share.range.first == next);  // the nodes tile [0, N) in node order
    CHECK(share.range.second - share.range.first == share.items);
    next = share.range.second;
    REQUIRE(share.gpus.counts.size() == nodes[i].gpus.size());
    CHECK(std::accumulate(share.gpus.counts.begin(), share.gpus.counts.end(), std::size_t{0}) == share.items);
    std::size_t covered = 0;
    for (std::size_t g = 0; g < share.gpus.counts.size(); ++g) {
      const auto [b, e] = share.gpus.ranges[g];
      CHECK(e - b == share.gpus.counts[g]);
      if (e > b) {
        CHECK(b >= share.range.first);
        CHECK(e <= share.range.second);
      }
      covered += e - b;
      const auto& d = nodes[i].gpus[g];
      const std::size_t held = d.reserve_bytes + d.overhead_bytes;
      CHECK(share.gpus.counts[g] * r.bytes_per_item <= (d.free_bytes > held ? d.free_bytes - held : 0));
    }
    CHECK(covered == share.items);
  }
  CHECK(total == r.items);
  CHECK(next == r.items);
}

}  // namespace

TEST_CASE("partition_cluster: a DGX and a mixed PCIe box share by usable memory, each node contiguous",
          "[partition]") {
  std::vector<mgm::cluster_node> nodes(2);
  nodes[0].name = "dgx-h100";
  for (int i = 0; i < 8; ++i) nodes[0].gpus.push_back(gpu(80 * gib, 2 * gib));
  nodes[1].name = "pcie-4gpu-mixed";
  for (const std::size_t g : {48, 24, 24, 16}) nodes[1].gpus.push_back(gpu(g * gib, 2 * gib));
  mgm::partition_request r;
  r.items = 10000;
  r.bytes_per_item = 32 << 20;
  const auto plan = mgm::partition_cluster(r, nodes);
  check_invariants(r, nodes, plan);
  // Usable: 8 x 78 = 624 GiB against 46 + 22 + 22 + 14 = 104 GiB.
  CHECK(plan.nodes[0].items == 8571);  // 10000 x 624 / 728, rounded by largest remainder
  CHECK(plan.nodes[1].items == 1429);
  // Eight equal GPUs: counts within one item of each other.
  const auto [fewest, most] = std::minmax_element(plan.nodes[0].gpus.counts.begin(), plan.nodes[0].gpus.counts.end());
  CHECK(*most - *fewest <= 1);
  CHECK(plan.nodes[1].gpus.counts[0] > plan.nodes[1].gpus.counts[3]);
}

TEST_CASE("partition_cluster: the cluster's capacity is the sum of whole items per GPU", "[partition]") {
  // Two GPUs of 1.5 items each hold 2 items, not 3: the node must not be given 3.
  std::vector<mgm::cluster_node> nodes(2);
  nodes[0].name = "small";
  nodes[0].gpus = {gpu(3 * gib / 2), gpu(3 * gib / 2)};
  nodes[1].name = "big";
  nodes[1].gpus = {gpu(10 * gib)};
  mgm::partition_request r;
  r.bytes_per_item = gib;
  r.items = 12;
  const auto plan = mgm::partition_cluster(r, nodes);
  check_invariants(r, nodes, plan);
  CHECK(plan.nodes[0].items == 2);
  CHECK(plan.nodes[1].items == 10);
  r.items = 13;
  REQUIRE_THROWS_AS(mgm::partition_cluster(r, nodes), mgm::partition_error);
  REQUIRE_THROWS_AS(mgm::partition_cluster(r, {}), mgm::logic_error);
  REQUIRE_THROWS_AS(mgm::partition_cluster(r, {mgm::cluster_node{"empty", {}}}), mgm::logic_error);
}

TEST_CASE("partition_cluster: invariants on generated clusters, every policy", "[partition]") {
  std::mt19937_64 rng{20261201};
  for (int round = 0; round < 400; ++round) {
    std::vector<mgm::cluster_node> nodes(1 + rng() % 5);
    for (auto& n : nodes) {
      n.name = "n" + std::to_string(&n - nodes.data());
      n.gpus.resize(1 + rng() % 8);
      for (auto& g : n.gpus) {
        g = gpu((1 + rng() % 80) * gib, (rng() % 3) * gib);
        g.throughput = 0.25 + static_cast<double>(rng() % 8) / 4.0;
        g.weight = 0.5 + static_cast<double>(rng() % 4);
      }
    }
    mgm::partition_request r;
    r.bytes_per_item = (1 + rng() % 512) << 20;
    r.policy = round % 4 == 0 ? mgm::partition_policy::memory
               : round % 4 == 1 ? mgm::partition_policy::throughput
               : round % 4 == 2 ? mgm::partition_policy::equal
                                : mgm::partition_policy::weights;
    // Units of several items: any whole number of units the GPUs hold fits.
    r.granularity = 1 + rng() % 4;
    std::size_t units = 0;
    for (const auto& n : nodes) {
      for (const auto& g : n.gpus) {
        units += (g.free_bytes > g.reserve_bytes ? (g.free_bytes - g.reserve_bytes) / r.bytes_per_item : 0) / r.granularity;
      }
    }
    r.items = (units == 0 ? 0 : rng() % (units + 1)) * r.granularity;
    std::size_t capacity = units * r.granularity;
    INFO("round " << round << ", " << nodes.size() << " nodes, " << r.items << " of " << capacity << " items");
    const auto plan = mgm::partition_cluster(r, nodes);
    check_invariants(r, nodes, plan);
  }
}

TEST_CASE("partition_cluster: in units of several items a node holds whole units per GPU", "[partition]") {
  // Node A: five GPUs of 3 items each hold 5 units of 2 (10 items, plus 1 left over on one GPU);
  // node B: one GPU of 4. 14 items in units of 2: A 10, B 4 (A cannot take 12).
  std::vector<mgm::cluster_node> nodes(2);
  nodes[0].name = "A";
  for (int i = 0; i < 5; ++i) nodes[0].gpus.push_back(gpu(3 * gib));
  nodes[1].name = "B";
  nodes[1].gpus = {gpu(4 * gib)};
  mgm::partition_request r;
  r.bytes_per_item = gib;
  r.granularity = 2;
  r.items = 14;
  const auto plan = mgm::partition_cluster(r, nodes);
  check_invariants(r, nodes, plan);
  CHECK(plan.nodes[0].items == 10);
  CHECK(plan.nodes[1].items == 4);
  r.items = 15;  // the odd item fits where a GPU of A has one left over
  check_invariants(r, nodes, mgm::partition_cluster(r, nodes));
}

TEST_CASE("partition_cluster: equal is equal per GPU, not per node", "[partition]") {
  std::vector<mgm::cluster_node> nodes(2);
  nodes[0].name = "eight";
  for (int i = 0; i < 8; ++i) nodes[0].gpus.push_back(gpu(80 * gib));
  nodes[1].name = "two";
  nodes[1].gpus = {gpu(16 * gib), gpu(16 * gib)};
  mgm::partition_request r;
  r.bytes_per_item = gib / 4;
  r.items = 100;
  r.policy = mgm::partition_policy::equal;
  const auto plan = mgm::partition_cluster(r, nodes);
  check_invariants(r, nodes, plan);
  CHECK(plan.nodes[0].items == 80);
  CHECK(plan.nodes[1].items == 20);
}
