// `mgm plan --prometheus URL`: the GPUs of a cluster as Prometheus has them, and the items split
// over its nodes, then over each node's GPUs.
#pragma once

#include <mgm/partition/partitioner.hpp>

#include <cstddef>
#include <optional>
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

/// @brief One GPU (or MIG instance) of the cluster as Prometheus has it.
struct cluster_gpu {
  std::string node;
  int index{0};
  std::optional<int> gpu_instance;  ///< a MIG instance of GPU `index`
  std::string uuid;
  std::string name;
  std::size_t free_bytes{0};
  /// @brief `node/index` (`node/index.instance` for MIG): what names the GPU across readings.
  [[nodiscard]] std::string id() const {
    return node + "/" + std::to_string(index) + (gpu_instance ? "." + std::to_string(*gpu_instance) : "");
  }
};

/// @brief Every GPU's free memory from Prometheus, nodes by name and GPUs by index; `source`
/// says which series answered. @throws tool_error as `plan_cluster` does.
[[nodiscard]] std::vector<cluster_gpu> read_cluster_gpus(const cluster_plan_options& o, std::string& source);

/// @brief Reads every GPU's free memory from Prometheus (`mgm_gpu_memory_free_bytes`, else
/// dcgm-exporter's `DCGM_FI_DEV_FB_FREE` in MiB), splits `r.items` over the nodes and prints the
/// plan. `r.devices` is ignored; `gpu_template` gives each GPU's reserve and overhead, and
/// `throughput` (optional) one value per GPU in the plan's order (nodes by name, GPUs by index).
/// @throws tool_error (2) naming the URL and the reason when Prometheus is down, answers an
/// error or holds no GPU series.
void plan_cluster(const cluster_plan_options& o, const mgm::partition_request& r,
                  const mgm::partition_device& gpu_template, const std::vector<double>& throughput);

}  // namespace mgm_tool
