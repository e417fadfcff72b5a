// Partitioning over a cluster: nodes first, then each node's GPUs (see cluster.hpp).
#include <mgm/partition/cluster.hpp>

#include <algorithm>

namespace mgm {

namespace {

// What one GPU can hold, as `partition` counts it.
std::size_t capacity_of(const partition_device& d, std::size_t bytes_per_item) {
  const std::size_t held = d.reserve_bytes + d.overhead_bytes;
  if (d.free_bytes <= held || bytes_per_item == 0) return 0;
  return std::min(d.max_items, (d.free_bytes - held) / bytes_per_item);
}

}  // namespace

cluster_plan partition_cluster(const partition_request& r, const std::vector<cluster_node>& nodes) {
  if (nodes.empty()) throw logic_error{"partition_cluster: no nodes"};
  partition_request top = r;
  top.devices.clear();
  for (const auto& n : nodes) {
    if (n.gpus.empty()) throw logic_error{"partition_cluster: node '" + n.name + "' has no GPUs"};
    partition_device whole;
    whole.throughput = 0.0;
    whole.max_items = 0;
    for (const auto& g : n.gpus) {
      const std::size_t held = g.reserve_bytes + g.overhead_bytes;
      whole.free_bytes += g.free_bytes > held ? g.free_bytes - held : 0;
      whole.max_items += capacity_of(g, r.bytes_per_item);
      whole.min_items += g.min_items;
      whole.throughput += g.throughput;
      whole.weight = g.weight;  // `weights` weighs nodes by their first GPU's weight times its GPUs
    }
    whole.weight *= static_cast<double>(n.gpus.size());
    top.devices.push_back(whole);
  }
  partition_plan first;
  try {
    first = partition(top);
  } catch (const partition_error& e) {
    throw partition_error{std::string{"over the nodes: "} + e.what(), e.shortfall_items()};
  }
  cluster_plan out;
  out.nodes.resize(nodes.size());
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    auto& share = out.nodes[i];
    share.items = first.counts[i];
    share.range = first.ranges[i];
    partition_request inner = r;
    inner.items = share.items;
    inner.devices = nodes[i].gpus;
    try {
      share.gpus = partition(inner);
    } catch (const partition_error& e) {
      throw partition_error{"on node '" + nodes[i].name + "': " + e.what(), e.shortfall_items()};
    }
    for (auto& range : share.gpus.ranges) {
      range.first += share.range.first;
      range.second += share.range.first;
    }
  }
  return out;
}

}  // namespace mgm
