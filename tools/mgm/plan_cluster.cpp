// mgm plan --prometheus: the cluster's GPUs from Prometheus's HTTP API, split node first.
#include "plan_cluster.hpp"

#include "mgm_tool.hpp"

#include <mgm/bytes.hpp>
#include <mgm/partition/cluster.hpp>
#include <mgm/telemetry/prometheus_source.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <tuple>

namespace mgm_tool {

namespace {

std::string range_text(const std::pair<std::size_t, std::size_t>& r) {
  return "[" + std::to_string(r.first) + ", " + std::to_string(r.second) + ")";
}

}  // namespace

std::vector<cluster_gpu> read_cluster_gpus(const cluster_plan_options& o, std::string& source) {
  mgm::telemetry::prometheus_reading reading;
  try {
    reading = mgm::telemetry::read_prometheus({o.prometheus, o.selector, o.node_label, o.timeout_s});
  } catch (const mgm::telemetry::prometheus_error& e) {
    throw tool_error{exit_bad_input, e.what()};
  }
  source = reading.series;
  std::vector<cluster_gpu> gpus;
  for (auto& s : reading.gpus) {
    cluster_gpu g;
    g.node = std::move(s.node);
    g.index = s.index;
    if (s.mig) g.gpu_instance = static_cast<int>(s.mig->gpu_instance_id);
    g.uuid = std::move(s.uuid);
    g.name = std::move(s.name);
    g.free_bytes = static_cast<std::size_t>(s.memory_free.value_or(0));
    gpus.push_back(std::move(g));
  }
  return gpus;
}

void plan_cluster(const cluster_plan_options& o, const mgm::partition_request& r,
                  const mgm::partition_device& gpu_template, const std::vector<double>& throughput) {
  std::string source;
  const auto gpus = read_cluster_gpus(o, source);
  if (!throughput.empty() && throughput.size() != gpus.size()) {
    throw tool_error{exit_bad_input, "--throughput has " + std::to_string(throughput.size()) + " values for the " +
                                         std::to_string(gpus.size()) + " GPUs of the cluster (nodes by name, GPUs by index)"};
  }
  std::vector<mgm::cluster_node> nodes;
  std::vector<std::vector<const cluster_gpu*>> members;
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    if (nodes.empty() || nodes.back().name != gpus[i].node) {
      nodes.push_back({gpus[i].node, {}});
      members.emplace_back();
    }
    auto d = gpu_template;
    d.free_bytes = gpus[i].free_bytes;
    if (!throughput.empty()) d.throughput = throughput[i];
    nodes.back().gpus.push_back(d);
    members.back().push_back(&gpus[i]);
  }
  mgm::cluster_plan plan;
  try {
    plan = mgm::partition_cluster(r, nodes);
  } catch (const mgm::partition_error& e) {
    throw tool_error{exit_bad_input, std::string{"the items do not fit: "} + e.what()};
  }
  if (o.json) {
    nlohmann::ordered_json out;
    out["prometheus"] = o.prometheus;
    out["source"] = source;
    out["items"] = r.items;
    out["bytes_per_item"] = r.bytes_per_item;
    out["reserve_bytes"] = gpu_template.reserve_bytes;
    out["overhead_bytes"] = gpu_template.overhead_bytes;
    out["policy"] = o.policy;
    out["nodes"] = nlohmann::ordered_json::array();
    for (std::size_t n = 0; n < nodes.size(); ++n) {
      const auto& share = plan.nodes[n];
      nlohmann::ordered_json node;
      node["node"] = nodes[n].name;
      node["items"] = share.items;
      node["range"] = {share.range.first, share.range.second};
      node["gpus"] = nlohmann::ordered_json::array();
      for (std::size_t g = 0; g < members[n].size(); ++g) {
        const auto& m = *members[n][g];
        node["gpus"].push_back({{"gpu", m.index},
                                {"gpu_instance_id", m.gpu_instance ? nlohmann::ordered_json(*m.gpu_instance)
                                                                   : nlohmann::ordered_json(nullptr)},
                                {"uuid", m.uuid.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(m.uuid)},
                                {"name", m.name},
                                {"free_bytes", m.free_bytes},
                                {"items", share.gpus.counts[g]},
                                {"range", {share.gpus.ranges[g].first, share.gpus.ranges[g].second}}});
      }
      out["nodes"].push_back(std::move(node));
    }
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("%zu items of %s over %zu nodes (%zu GPUs), policy %s, %s kept free per GPU\n"
              "Free memory from Prometheus at %s: %s.\n\n",
              r.items, mgm::format_bytes(r.bytes_per_item).c_str(), nodes.size(), gpus.size(), o.policy.c_str(),
              mgm::format_bytes(gpu_template.reserve_bytes).c_str(), o.prometheus.c_str(), source.c_str());
  std::printf("%-28s %4s  %-24s %11s %10s %21s\n", "NODE", "GPU", "NAME", "FREE", "ITEMS", "RANGE");
  for (std::size_t n = 0; n < nodes.size(); ++n) {
    const auto& share = plan.nodes[n];
    std::size_t free = 0;
    for (const auto* m : members[n]) free += m->free_bytes;
    std::printf("%-28.28s %4s  %-24s %11s %10zu %21s\n", nodes[n].name.c_str(), "", "",
                mgm::format_bytes(free).c_str(), share.items, range_text(share.range).c_str());
    for (std::size_t g = 0; g < members[n].size(); ++g) {
      const auto& m = *members[n][g];
      const std::string gpu = std::to_string(m.index) + (m.gpu_instance ? "." + std::to_string(*m.gpu_instance) : "");
      std::printf("%-28s %4s  %-24.24s %11s %10zu %21s\n", "", gpu.c_str(), m.name.empty() ? "--" : m.name.c_str(),
                  mgm::format_bytes(m.free_bytes).c_str(), share.gpus.counts[g], range_text(share.gpus.ranges[g]).c_str());
    }
  }
  std::printf("\nEach node's items are one contiguous range, split over its GPUs.\n");
}

}  // namespace mgm_tool
