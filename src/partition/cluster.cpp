// Partitioning over a cluster: nodes first, then each node's GPUs (see cluster.hpp).
#include <mgm/partition/cluster.hpp>

#include "plan_shape.hpp"

#include <algorithm>
#include <limits>

namespace mgm {
namespace {

using detail::saturating_add;
using detail::unlimited;

}  // namespace

cluster_plan partition_cluster(const partition_request& r, const std::vector<cluster_node>& nodes) {
  if (nodes.empty()) throw logic_error{"partition_cluster: no nodes"};
  partition_request top = r;
  top.devices.clear();
  // `equal` is equal per GPU: a node weighs as many GPUs as it has.
  if (r.policy == partition_policy::equal) top.policy = partition_policy::weights;
  const std::size_t g = std::max<std::size_t>(r.granularity, 1);
  for (const auto& n : nodes) {
    if (n.gpus.empty()) throw logic_error{"partition_cluster: node '" + n.name + "' has no GPUs"};
    partition_device whole;
    whole.throughput = 0.0;
    whole.weight = 0.0;
    whole.max_items = 0;
    std::size_t largest_leftover = 0;
    for (const auto& gpu : n.gpus) {
      const std::size_t held = gpu.reserve_bytes + gpu.overhead_bytes;
      whole.free_bytes = saturating_add(whole.free_bytes, gpu.free_bytes > held ? gpu.free_bytes - held : 0);
      // Whole units on each GPU; what is left over below a unit only on one of them (where the
      // inner plan puts the items that are not a whole unit).
      const std::size_t cap = partition_capacity(gpu, r.bytes_per_item);
      whole.max_items = saturating_add(whole.max_items, cap / g * g);
      largest_leftover = std::max(largest_leftover, cap % g);
      whole.min_items += gpu.min_items;
      whole.throughput += gpu.throughput;
      whole.weight += r.policy == partition_policy::equal ? 1.0 : gpu.weight;
    }
    whole.max_items = saturating_add(whole.max_items, largest_leftover);
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

topology cluster_links(const std::vector<std::size_t>& node_of) {
  std::vector<gpu_info> gpus(node_of.size());
  for (std::size_t i = 0; i < gpus.size(); ++i) gpus[i].ordinal = static_cast<int>(i);
  topology links{std::move(gpus)};  // every pair SYS
  for (std::size_t a = 0; a < node_of.size(); ++a) {
    for (std::size_t b = a + 1; b < node_of.size(); ++b) {
      if (node_of[a] != node_of[b]) {
        links.set_path(device_id{static_cast<int>(a)}, device_id{static_cast<int>(b)}, {path_type::net, smi_label::sys, 0});
      }
    }
  }
  return links;
}

}  // namespace mgm
