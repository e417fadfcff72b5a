// `mgm plan --watch`: the plan, then every change the rebalancer makes as the GPUs' free memory
// changes, with its reason; one machine (NVML, the CUDA runtime, the simulator) or a cluster
// through Prometheus.
#pragma once

#include <mgm/partition/rebalance_driver.hpp>
#include <mgm/partition/rebalancer.hpp>
#include <mgm/topology/topology.hpp>

#include <optional>
#include <string>
#include <vector>

namespace mgm_tool {

struct watch_options {
  double interval_s{5.0};
  std::optional<double> duration_s;  ///< stop after this long; else at Ctrl-C or SIGTERM
  bool json{false};                  ///< one JSON line per change (and per failed reading)
  mgm::rebalancer_options rebalance;
};

/// @brief Runs the loop until Ctrl-C, SIGTERM or the duration: prints the first plan, then each
/// change, lost GPU and failed reading. `labels` name the GPUs in the output ("GPU0",
/// "node-a/3"); `read` takes one reading per GPU (it may throw: the loop goes on).
/// @throws tool_error when the items do not fit at the start.
void watch_plan(const watch_options& o, const mgm::partition_request& r, const std::vector<std::string>& labels,
                std::optional<mgm::topology> links, mgm::rebalance_driver::reading_function read);

}  // namespace mgm_tool
