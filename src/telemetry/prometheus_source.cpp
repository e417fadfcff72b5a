// Prometheus as a telemetry source (see prometheus_source.hpp): the cluster's GPUs from its HTTP
// API's instant queries.
#include <mgm/telemetry/prometheus_source.hpp>

#include "http_get.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <system_error>
#include <tuple>

namespace mgm::telemetry {

namespace {

// `object[key]` where it is a string; else "".
std::string text_at(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return {};
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string{};
}

std::string label(const nlohmann::json& metric, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (auto v = text_at(metric, n); !v.empty()) return v;
  }
  return {};
}

// A sample's value: a decimal or exponent number, read the same in every locale; -1 for what is
// not one (NaN, +Inf).
double number_of(const std::string& text) {
  double v = -1.0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  return ec == std::errc{} && end == text.data() + text.size() ? v : -1.0;
}

// The instant vector `query` evaluates to now.
nlohmann::json instant_query(const std::string& base, const std::string& query, double timeout_s) {
  const std::string url = base + "/api/v1/query?query=" + detail::url_encode(query);
  detail::http_reply reply;
  try {
    reply = detail::http_get(url, timeout_s);
  } catch (const detail::http_error& e) {
    throw prometheus_error{"cannot reach Prometheus at " + base + ": " + e.what()};
  }
  nlohmann::json answer;
  try {
    answer = nlohmann::json::parse(reply.body);
  } catch (const std::exception&) {
    throw prometheus_error{"Prometheus at " + base + " answered " + std::to_string(reply.status) +
                           " with something that is not its API's JSON (is this Prometheus?)"};
  }
  if (reply.status != 200 || text_at(answer, "status") != "success") {
    const std::string why = text_at(answer, "error");
    throw prometheus_error{"Prometheus at " + base + " answered " + std::to_string(reply.status) + " to " + query + ": " +
                           (why.empty() ? std::string{"no reason given"} : why)};
  }
  const auto& data = answer["data"];
  if (!data.is_object() || text_at(data, "resultType") != "vector" || !data.contains("result") ||
      !data["result"].is_array()) {
    throw prometheus_error{"Prometheus at " + base + ": " + query + " is not an instant vector"};
  }
  return data["result"];
}

// A small whole number of a label, or nullopt ("7", not "-1", "1e3" or 40 digits).
std::optional<int> small_number(const std::string& text) {
  if (text.empty() || text.size() > 6 || text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoi(text);
}

void check_selector(const std::string& selector) {
  if (!selector.empty() && (selector.front() != '{' || selector.back() != '}')) {
    throw prometheus_error{"the selector " + selector + ": give label matchers in braces, such as {job=\"gpu\"}"};
  }
}

class prometheus_source final : public source {
 public:
  explicit prometheus_source(prometheus_options o) : options_{std::move(o)} { check_selector(options_.selector); }
  [[nodiscard]] std::string name() const override { return "prometheus:" + options_.url; }
  [[nodiscard]] std::vector<device_sample> sample() override { return read_prometheus(options_).gpus; }

 private:
  prometheus_options options_;
};

}  // namespace

prometheus_reading read_prometheus(const prometheus_options& o) {
  std::string base = o.url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  check_selector(o.selector);
  prometheus_reading out;
  double scale = 1.0;
  out.series = "mgm_gpu_memory_free_bytes" + o.selector;
  auto result = instant_query(base, out.series, o.timeout_s);
  if (result.empty()) {
    // dcgm-exporter's series, where only those exist: MiB.
    out.series = "DCGM_FI_DEV_FB_FREE" + o.selector;
    result = instant_query(base, out.series, o.timeout_s);
    scale = 1024.0 * 1024.0;
  }
  if (result.empty()) {
    throw prometheus_error{"Prometheus at " + base + " holds no GPU series (neither mgm_gpu_memory_free_bytes" +
                           o.selector + " nor DCGM_FI_DEV_FB_FREE" + o.selector +
                           "): is mgm serve or dcgm-exporter scraped?"};
  }
  const auto now = clock::now();
  std::map<std::tuple<std::string, int, int, int>, int> seen;
  std::set<std::tuple<std::string, int, int>> instances;  // (node, GPU, GPU instance) already taken
  for (const auto& s : result) {
    if (!s.is_object() || !s.contains("metric") || !s.contains("value") || !s["metric"].is_object()) {
      throw prometheus_error{"Prometheus at " + base + " answered a sample without metric or value: " + s.dump()};
    }
    const auto& metric = s["metric"];
    device_sample g;
    g.time = now;
    g.node = label(metric, {o.node_label.c_str()});
    if (g.node.empty()) {
      throw prometheus_error{"Prometheus at " + base + ": a series of " + out.series + " has no label '" + o.node_label +
                             "' (" + metric.dump() + "); choose the label that names the node"};
    }
    const std::string index = label(metric, {"gpu"});
    const auto gpu_index = small_number(index);
    if (!gpu_index) {
      throw prometheus_error{"Prometheus at " + base + ": a series of " + out.series + " has no GPU index (" +
                             metric.dump() + ")"};
    }
    g.index = *gpu_index;
    int compute_instance = -1;
    if (const std::string gi = label(metric, {"gpu_instance_id", "GPU_I_ID"}); !gi.empty()) {
      const auto id = small_number(gi);
      const auto ci = small_number(label(metric, {"compute_instance_id"}));
      if (!id) {
        throw prometheus_error{"Prometheus at " + base + ": a MIG series of " + out.series +
                               " has a GPU instance id that is not a number (" + metric.dump() + ")"};
      }
      compute_instance = ci.value_or(-1);
      g.mig = mig_identity{static_cast<unsigned>(*id), static_cast<unsigned>(ci.value_or(0)),
                           label(metric, {"mig_profile", "GPU_I_PROFILE"})};
    }
    g.uuid = label(metric, {"uuid", "UUID"});
    // dcgm-exporter labels a MIG instance's series with its GPU's UUID: not the instance's own.
    if (g.mig && g.uuid.rfind("MIG-", 0) != 0) g.uuid.clear();
    g.name = label(metric, {"model_name", "modelName"});
    double value = -1.0;
    if (const auto& v = s["value"]; v.is_array() && v.size() == 2 && v[1].is_string()) {
      value = number_of(v[1].get<std::string>()) * scale;
    }
    // Below 2^63 bytes, so that the conversion is defined.
    if (!(value >= 0) || !(value < 9.2e18)) {
      throw prometheus_error{"Prometheus at " + base + ": GPU " + index + " of " + g.node +
                             " has a free memory that is not a size: " + s["value"].dump()};
    }
    g.memory_free = static_cast<std::uint64_t>(value);
    const int instance = g.mig ? static_cast<int>(g.mig->gpu_instance_id) : -1;
    if (++seen[{g.node, g.index, instance, compute_instance}] > 1) {
      throw prometheus_error{"Prometheus at " + base + ": GPU " + index +
                             (g.mig ? " (GPU instance " + std::to_string(instance) + ")" : "") + " of " + g.node +
                             " appears in more than one series of " + out.series +
                             "; narrow them with a selector (e.g. {job=\"mgm\"})"};
    }
    // The compute instances of one GPU instance share its memory: it counts once.
    if (g.mig && !instances.insert({g.node, g.index, instance}).second) continue;
    g.missing.push_back("memory.total: not read from Prometheus");
    out.gpus.push_back(std::move(g));
  }
  // A GPU in MIG mode takes work through its instances only: its own series (the whole GPU) goes.
  std::set<std::pair<std::string, int>> divided;
  for (const auto& [node, gpu, instance] : instances) divided.insert({node, gpu});
  std::erase_if(out.gpus, [&](const device_sample& g) { return !g.mig && divided.contains({g.node, g.index}); });
  const auto order = [](const device_sample& g) {
    return std::tuple{g.node, g.index, g.mig ? static_cast<int>(g.mig->gpu_instance_id) : -1};
  };
  std::sort(out.gpus.begin(), out.gpus.end(), [&](const device_sample& a, const device_sample& b) { return order(a) < order(b); });
  return out;
}

std::unique_ptr<source> make_prometheus_source(prometheus_options options) {
  return std::make_unique<prometheus_source>(std::move(options));
}

}  // namespace mgm::telemetry
