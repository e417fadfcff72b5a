/// @file
/// @brief `partition_cluster`: N items over the GPUs of several nodes, node first. Each node takes
/// one contiguous range of the items, split over its GPUs as `partition` splits over one machine.
///
/// A node counts as one device at the first level: its capacity is what its GPUs hold in whole
/// units of `granularity` items, each on its own GPU, plus the largest part-unit one of them has
/// left (so the node's count always fits its GPUs); its usable memory, throughput and weight are
/// the sums of its GPUs' (`equal` weighs a node by its number of GPUs). The second level is
/// `partition` over the node's GPUs with the node's count. Invariants: `Σ node counts == N`; each node's
/// counts add up to its count; a node's range is the union of its GPUs' ranges, and the nodes'
/// ranges tile [0, N) in node order.
#pragma once

#include <mgm/partition/partitioner.hpp>
#include <mgm/topology/topology.hpp>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace mgm {

struct cluster_node {
  std::string name;
  std::vector<partition_device> gpus;
};

struct cluster_plan {
  struct node_share {
    std::size_t items{0};
    std::pair<std::size_t, std::size_t> range;  ///< [begin, end) of the items
    partition_plan gpus;                         ///< over the node's GPUs; ranges are absolute
  };
  std::vector<node_share> nodes;  ///< by node index
};

/// @brief The plan for `items` (`bytes_per_item`, `granularity`, `policy` of `r`; its `devices`
/// are ignored) over `nodes`.
/// @throws mgm::partition_error when the cluster cannot hold the items (its shortfall is per node;
/// "on node 'X'" errors, per GPU of X); mgm::logic_error for no nodes or a node without GPUs.
[[nodiscard]] cluster_plan partition_cluster(const partition_request& r, const std::vector<cluster_node>& nodes);

/// @brief The links between the GPUs of a cluster, for `rebalancer` and `route_moves`, from the
/// node of each GPU (`node_of[i]`, any numbering). GPUs of one node are `SYS` (through host memory:
/// a cluster's metrics do not say how a node's GPUs connect, and no faster path is assumed); GPUs of
/// different nodes are `NET`, whose cost is the network's on top of staging through host memory
/// at both ends (`move_cost`), so that items move within a node before they cross to another.
/// Where a node's own topology is known, `set_path` its pairs on the result.
[[nodiscard]] topology cluster_links(const std::vector<std::size_t>& node_of);

}  // namespace mgm
