// `mgm plan --prometheus URL`: the GPUs of a cluster as Prometheus has them, and the items split
// over its nodes, then over each node's GPUs.
#pragma once

#include <mgm/partition/partitioner.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace mgm_tool {

struct cluster_plan_options {
  std::string prometheus;  ///< the server's base URL, http://HOST:PORT[/prefix]
  std::string selector;    ///< `{job="gpu"}`, added to the metric's name; empty: every series
  std::string node_label{"instance"};
  std::string policy;      ///< the name, for the output
  bool json{false};
  double timeout_s{10.0};  ///< for each request to Prometheus
};

/// @brief Reads every GPU's free memory from Prometheus (`mgm_gpu_memory_free_bytes`, else
/// dcgm-exporter's `DCGM_FI_DEV_FB_FREE` in MiB), splits `r.items` over the nodes and prints the
/// plan. `r.devices` is ignored; `gpu_template` gives each GPU's reserve and overhead, and
/// `throughput` (optional) one value per GPU in the plan's order (nodes by name, GPUs by index).
/// @throws tool_error (2) naming the URL and the reason when Prometheus is down, answers an
/// error or holds no GPU series.
void plan_cluster(const cluster_plan_options& o, const mgm::partition_request& r,
                  const mgm::partition_device& gpu_template, const std::vector<double>& throughput);

}  // namespace mgm_tool
