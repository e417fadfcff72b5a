// mgm plan --prometheus: the cluster's GPUs from Prometheus's HTTP API, split node first.
#include "plan_cluster.hpp"

#include "http.hpp"
#include "mgm_tool.hpp"

#include <mgm/bytes.hpp>
#include <mgm/partition/cluster.hpp>

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

std::string label(const nlohmann::json& metric, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (metric.contains(n) && metric[n].is_string()) return metric[n].get<std::string>();
  }
  return {};
}

// The instant vector `query` evaluates to now.
nlohmann::json instant_query(const std::string& base, const std::string& query, double timeout_s) {
  const std::string url = base + "/api/v1/query?query=" + url_encode(query);
  http_reply reply;
  try {
    reply = http_get(url, timeout_s);
  } catch (const tool_error& e) {
    throw tool_error{exit_bad_input, "cannot reach Prometheus at " + base + ": " + e.what()};
  }
  nlohmann::json answer;
  try {
    answer = nlohmann::json::parse(reply.body);
  } catch (const std::exception&) {
    throw tool_error{exit_bad_input, "Prometheus at " + base + " answered " + std::to_string(reply.status) +
                                         " with something that is not its API's JSON (is this Prometheus?)"};
  }
  if (reply.status != 200 || answer.value("status", "") != "success") {
    throw tool_error{exit_bad_input, "Prometheus at " + base + " answered " + std::to_string(reply.status) + " to " +
                                         query + ": " + answer.value("error", std::string{"no reason given"})};
  }
  const auto& data = answer["data"];
  if (data.value("resultType", "") != "vector") {
    throw tool_error{exit_bad_input, "Prometheus at " + base + ": " + query + " is not an instant vector"};
  }
  return data["result"];
}

std::string range_text(const std::pair<std::size_t, std::size_t>& r) {
  return "[" + std::to_string(r.first) + ", " + std::to_string(r.second) + ")";
}

}  // namespace

std::vector<cluster_gpu> read_cluster_gpus(const cluster_plan_options& o, std::string& source) {
  std::string base = o.prometheus;
  while (!base.empty() && base.back() == '/') base.pop_back();
  if (!o.selector.empty() && (o.selector.front() != '{' || o.selector.back() != '}')) {
    throw tool_error{exit_bad_input, "--selector " + o.selector + ": give label matchers in braces, such as {job=\"gpu\"}"};
  }
  double scale = 1.0;
  source = "mgm_gpu_memory_free_bytes" + o.selector;
  auto result = instant_query(base, source, o.timeout_s);
  if (result.empty()) {
    // dcgm-exporter's series, where only those exist: MiB.
    source = "DCGM_FI_DEV_FB_FREE" + o.selector;
    result = instant_query(base, source, o.timeout_s);
    scale = 1024.0 * 1024.0;
  }
  if (result.empty()) {
    throw tool_error{exit_bad_input, "Prometheus at " + base + " holds no GPU series (neither mgm_gpu_memory_free_bytes" +
                                         o.selector + " nor DCGM_FI_DEV_FB_FREE" + o.selector +
                                         "): is mgm serve or dcgm-exporter scraped?"};
  }
  // A small whole number of a label, or nullopt ("7", not "-1", "1e3" or 40 digits).
  const auto small_number = [](const std::string& text) -> std::optional<int> {
    if (text.empty() || text.size() > 6 || text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    return std::stoi(text);
  };
  std::vector<cluster_gpu> gpus;
  std::map<std::tuple<std::string, int, int, int>, int> seen;
  std::set<std::tuple<std::string, int, int>> instances;  // (node, GPU, GPU instance) already taken
  for (const auto& s : result) {
    if (!s.is_object() || !s.contains("metric") || !s.contains("value")) {
      throw tool_error{exit_bad_input, "Prometheus at " + base + " answered a sample without metric or value: " + s.dump()};
    }
    const auto& metric = s["metric"];
    cluster_gpu g;
    g.node = label(metric, {o.node_label.c_str()});
    if (g.node.empty()) {
      throw tool_error{exit_bad_input, "Prometheus at " + base + ": a series of " + source + " has no label '" +
                                           o.node_label + "' (" + metric.dump() + "); choose the node's label with --node-label"};
    }
    const std::string index = label(metric, {"gpu"});
    const auto gpu_index = small_number(index);
    if (!gpu_index) {
      throw tool_error{exit_bad_input, "Prometheus at " + base + ": a series of " + source + " has no GPU index (" +
                                           metric.dump() + ")"};
    }
    g.index = *gpu_index;
    int compute_instance = -1;
    if (const std::string gi = label(metric, {"gpu_instance_id", "GPU_I_ID"}); !gi.empty()) {
      const auto id = small_number(gi);
      const auto ci = small_number(label(metric, {"compute_instance_id"}));
      if (!id) {
        throw tool_error{exit_bad_input, "Prometheus at " + base + ": a MIG series of " + source +
                                             " has a GPU instance id that is not a number (" + metric.dump() + ")"};
      }
      g.gpu_instance = *id;
      compute_instance = ci.value_or(-1);
    }
    g.uuid = label(metric, {"uuid", "UUID"});
    g.name = label(metric, {"model_name", "modelName"});
    double value = -1.0;
    try {
      value = std::stod(s["value"][1].get<std::string>()) * scale;
    } catch (const std::exception&) {
    }
    // Below 2^63 bytes, so that the conversion is defined.
    if (!(value >= 0) || !(value < 9.2e18)) {
      throw tool_error{exit_bad_input, "Prometheus at " + base + ": GPU " + index + " of " + g.node +
                                           " has a free memory that is not a size: " + s["value"].dump()};
    }
    g.free_bytes = static_cast<std::size_t>(value);
    if (++seen[{g.node, g.index, g.gpu_instance.value_or(-1), compute_instance}] > 1) {
      throw tool_error{exit_bad_input, "Prometheus at " + base + ": GPU " + index +
                                           (g.gpu_instance ? " (GPU instance " + std::to_string(*g.gpu_instance) + ")" : "") +
                                           " of " + g.node +
                                           " appears in more than one series of " + source +
                                           "; narrow them with --selector (e.g. {job=\"mgm\"})"};
    }
    // The compute instances of one GPU instance share its memory: it counts once.
    if (g.gpu_instance && !instances.insert({g.node, g.index, *g.gpu_instance}).second) continue;
    gpus.push_back(std::move(g));
  }
  // A GPU in MIG mode takes work through its instances only: its own series (the whole GPU) goes.
  std::set<std::pair<std::string, int>> divided;
  for (const auto& [node, gpu, instance] : instances) divided.insert({node, gpu});
  std::erase_if(gpus, [&](const cluster_gpu& g) { return !g.gpu_instance && divided.contains({g.node, g.index}); });
  std::sort(gpus.begin(), gpus.end(), [](const cluster_gpu& a, const cluster_gpu& b) {
    return std::tuple{a.node, a.index, a.gpu_instance.value_or(-1)} < std::tuple{b.node, b.index, b.gpu_instance.value_or(-1)};
  });
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
