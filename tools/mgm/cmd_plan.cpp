// mgm plan: how to split N items across the GPUs, and where each GPU's buffers spill when it is full.
#include "mgm_tool.hpp"
#include "live_source.hpp"
#include "plan_cluster.hpp"
#include "plan_watch.hpp"

#include <mgm/bytes.hpp>
#include <mgm/device.hpp>
#include <mgm/error.hpp>
#include <mgm/partition/cluster.hpp>
#include <mgm/partition/partitioner.hpp>
#include <mgm/partition/rebalance_driver.hpp>
#include <mgm/placement/placement_policy.hpp>
#include <mgm/topology/discovery.hpp>
#include <mgm/topology/topology.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <cmath>
#include <memory>
#include <cstdio>

namespace mgm_tool {

namespace {

// The machine the options name, as devices with free memory and a topology.
struct machine_view {
  std::string name;
  std::string capacity_source;  // where the memory sizes come from
  std::vector<std::string> gpu_names;
  std::vector<std::size_t> free_bytes;
  std::vector<std::size_t> total_bytes;
  mgm::topology links;
};

machine_view view_of(const context& ctx) {
  machine_view v;
  if (ctx.simulated()) {
    auto choice = make_sim_machine(ctx);
    const auto& m = choice.machine;
    v.name = "sim:" + m.name();
    v.capacity_source = choice.capacity_source;
    v.links = m.links();
    for (int d = 0; d < m.device_count(); ++d) {
      const auto mem = m.memory(mgm::device_id{d});
      v.gpu_names.push_back(m.spec(mgm::device_id{d}).name);
      v.free_bytes.push_back(mem.free_bytes);
      v.total_bytes.push_back(mem.total_bytes);
    }
    return v;
  }
  if (mgm::device_count() == 0) no_gpu("the CUDA runtime sees no GPU");
  v.name = "this machine";
  v.capacity_source = "the CUDA driver (cudaMemGetInfo)";
  v.links = mgm::discover_topology();
  for (int d = 0; d < mgm::device_count(); ++d) {
    const auto mem = mgm::memory_info(mgm::device_id{d});
    v.gpu_names.push_back(v.links.gpus()[static_cast<std::size_t>(d)].name);
    v.free_bytes.push_back(mem.free_bytes);
    v.total_bytes.push_back(mem.total_bytes);
  }
  return v;
}

// A share: "5%" or "0.05", in [0, 1).
double parse_fraction(const char* option, const std::string& text) {
  std::string t = text;
  double scale = 1.0;
  if (!t.empty() && t.back() == '%') {
    t.pop_back();
    scale = 0.01;
  }
  std::size_t used = 0;
  double v = -1.0;
  try {
    v = std::stod(t, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != t.size() || !std::isfinite(v)) {
    throw tool_error{exit_bad_input, std::string{option} + ": '" + text + "' is not a share (5%, 0.05)"};
  }
  v *= scale;
  if (v < 0.0 || v >= 1.0) throw tool_error{exit_bad_input, std::string{option} + ": " + text + " is not in [0, 100%)"};
  return v;
}

}  // namespace

void add_plan(CLI::App& app, context& ctx) {
  auto* cmd = app.add_subcommand("plan", "Split N items across the GPUs by free memory, throughput or equally; and "
                                         "where each GPU's buffers go when it is full (its spill order)");
  struct options {
    std::size_t items{0};
    std::string bytes_per_item;
    std::string policy{"memory"};
    std::string reserve{"0"};
    std::string overhead{"0"};
    std::vector<double> throughput;
    std::size_t granularity{1};
    std::string prometheus;
    std::string selector;
    std::string node_label{"instance"};
    std::string timeout{"10s"};
    std::string watch;
    std::string duration;
    std::size_t hold{2};
    std::string min_change{"5%"};
    std::size_t cooldown{6};
    bool jax{false};
  };
  auto o = std::make_shared<options>();
  cmd->add_option("--items", o->items, "How many items (samples, layers, shards)")->required()->check(count_at_least(0));
  cmd->add_option("--bytes-per-item", o->bytes_per_item, "Memory one item needs: 512MiB, 1.5GiB, 4096")->required();
  cmd->add_option("--policy", o->policy, "memory (by free memory), throughput (by --throughput), equal")
      ->check(CLI::IsMember({"memory", "throughput", "equal"}))
      ->capture_default_str();
  cmd->add_option("--reserve", o->reserve, "Memory kept free on every GPU")->capture_default_str();
  cmd->add_option("--overhead", o->overhead, "Memory needed once per GPU whatever the count (a model replica)");
  cmd->add_option("--throughput", o->throughput,
                  "Items per second of each GPU, relative, one per GPU in GPU order (time a few batches of the job "
                  "on each GPU): 1.0,0.6")
      ->delimiter(',');
  cmd->add_option("--granularity", o->granularity,
                  "Counts are multiples of this; the items left over (N mod this) go to the GPU with the most room "
                  "left")
      ->check(count_at_least(1));
  cmd->add_option("--prometheus", o->prometheus,
                  "Plan over every GPU of a cluster, read from this Prometheus server (http://HOST:9090): node "
                  "first, each node's items one contiguous range");
  cmd->add_option("--selector", o->selector, "With --prometheus: label matchers for the series, such as {job=\"gpu\"}");
  cmd->add_option("--node-label", o->node_label, "With --prometheus: the label that names a node")->capture_default_str();
  cmd->add_option("--timeout", o->timeout, "With --prometheus: how long each request may take")->capture_default_str();
  cmd->add_flag("--jax", o->jax,
                "Also print each GPU's share as the environment of a JAX process (XLA_CLIENT_MEM_FRACTION of the "
                "GPU's memory; JAX has no allocator hook, so it is given its share instead)");
  auto* watch_opt = cmd->add_option("--watch", o->watch,
                                    "Keep the plan in step with the GPUs' free memory: read them every INTERVAL "
                                    "(default 5s) and print each change with its reason, until Ctrl-C")
                        ->expected(0, 1);
  auto* duration_opt = cmd->add_option("--duration", o->duration, "With --watch: stop after this long (10m, 2h)");
  auto* hold_opt = cmd->add_option("--hold", o->hold, "With --watch: readings in a row a change must last before items move")
                       ->check(count_at_least(1))
                       ->capture_default_str();
  auto* min_change_opt =
      cmd->add_option("--min-change", o->min_change,
                      "With --watch: the least share of the items a change must move (5%, 0.05); smaller ones are noise")
          ->capture_default_str();
  auto* cooldown_opt =
      cmd->add_option("--cooldown", o->cooldown, "With --watch: readings before moved items may go back the way they came")
          ->capture_default_str();
  cmd->footer(
      "Example: mgm --sim pcie-4gpu-mixed plan --items 50000 --bytes-per-item 1MiB --reserve 2GiB\n"
      "         mgm plan --items 512 --bytes-per-item 1GiB --reserve 4GiB --watch 10s\n"
      "         mgm plan --prometheus http://prometheus:9090 --selector '{job=\"mgm\"}' --items 1000 --bytes-per-item 8GiB");
  cmd->callback([&ctx, o, watch_opt, duration_opt, hold_opt, min_change_opt, cooldown_opt] {
    const bool watching = watch_opt->count() > 0;
    if (!watching) {
      for (const auto* opt : {duration_opt, hold_opt, min_change_opt, cooldown_opt}) {
        if (opt->count() > 0) throw tool_error{exit_usage, opt->get_name() + " is used with --watch only"};
      }
    }
    watch_options w;
    w.json = ctx.json;
    if (watching) {
      w.interval_s = parse_duration(o->watch.empty() ? std::string{"5s"} : o->watch).count();
      if (w.interval_s < 0.1) throw tool_error{exit_bad_input, "--watch needs at least 100ms between readings"};
      if (!o->duration.empty()) {
        w.duration_s = parse_duration(o->duration).count();
        if (!(*w.duration_s > 0)) throw tool_error{exit_bad_input, "--duration must be more than 0 s"};
      }
      w.rebalance.hold_steps = o->hold;
      w.rebalance.cooldown_steps = o->cooldown;
      w.rebalance.min_change = parse_fraction("--min-change", o->min_change);
      // The job is not running yet, or runs elsewhere: free memory is what it may take.
      w.rebalance.readings_include_items = false;
    }
    // Options that would be silently ignored are refused before anything is measured.
    if (o->policy == "throughput" && o->throughput.empty()) {
      throw tool_error{exit_usage, "--policy throughput needs --throughput: the items per second of each GPU, in GPU "
                                   "order (time a few batches of the job on each GPU), e.g. --throughput 1.0,0.6"};
    }
    if (o->policy != "throughput" && !o->throughput.empty()) {
      throw tool_error{exit_usage, "--throughput is used by --policy throughput only (the policy is " + o->policy + ")"};
    }
    for (const double t : o->throughput) {
      if (!(t > 0) || !std::isfinite(t)) throw tool_error{exit_bad_input, "--throughput values must be more than 0"};
    }
    if (o->prometheus.empty() && (!o->selector.empty() || o->node_label != "instance" || o->timeout != "10s")) {
      throw tool_error{exit_usage, "--selector, --node-label and --timeout are used with --prometheus only"};
    }
    if (!o->prometheus.empty() && ctx.simulated()) {
      throw tool_error{exit_usage, "--prometheus plans over the cluster Prometheus sees; it does not take --sim"};
    }
    mgm::partition_request r;
    r.items = o->items;
    try {
      r.bytes_per_item = mgm::parse_bytes(o->bytes_per_item);
    } catch (const std::exception& e) {
      throw tool_error{exit_bad_input, "--bytes-per-item: " + std::string{e.what()}};
    }
    if (r.bytes_per_item == 0) throw tool_error{exit_bad_input, "--bytes-per-item must be more than 0 bytes"};
    r.granularity = o->granularity;
    r.policy = o->policy == "memory" ? mgm::partition_policy::memory
               : o->policy == "throughput" ? mgm::partition_policy::throughput
                                           : mgm::partition_policy::equal;
    const auto size_option = [](const char* name, const std::string& text) {
      try {
        return mgm::parse_bytes(text);
      } catch (const std::exception& e) {
        throw tool_error{exit_bad_input, std::string{name} + ": " + e.what()};
      }
    };
    const std::size_t reserve = size_option("--reserve", o->reserve);
    const std::size_t overhead = size_option("--overhead", o->overhead);
    mgm::partition_device each;  // every GPU's reserve and overhead
    each.reserve_bytes = reserve;
    each.overhead_bytes = overhead;
    // The request's devices: one per free-memory figure, with --throughput's values in order.
    const auto add_devices = [&](const std::vector<std::size_t>& free, const std::string& gpus) {
      if (!o->throughput.empty() && o->throughput.size() != free.size()) {
        throw tool_error{exit_bad_input, "--throughput has " + std::to_string(o->throughput.size()) + " values for " +
                                             std::to_string(free.size()) + " " + gpus};
      }
      for (std::size_t i = 0; i < free.size(); ++i) {
        auto d = each;
        d.free_bytes = free[i];
        if (!o->throughput.empty()) d.throughput = o->throughput[i];
        r.devices.push_back(d);
      }
    };
    if (!o->prometheus.empty()) {
      const double timeout_s = parse_duration(o->timeout).count();
      if (!(timeout_s > 0)) throw tool_error{exit_bad_input, "--timeout must be more than 0 s"};
      const cluster_plan_options co{o->prometheus, o->selector, o->node_label, o->policy, ctx.json, timeout_s};
      if (!watching) {
        plan_cluster(co, r, each, o->throughput);
        return;
      }
      std::string source;
      const auto gpus = read_cluster_gpus(co, source);
      std::vector<std::string> ids;
      std::vector<std::size_t> free;
      std::vector<std::size_t> node_of;  // moves stay within a node before they cross the network
      std::map<std::string, std::size_t> nodes;
      for (const auto& g : gpus) {
        ids.push_back(g.id());
        free.push_back(g.free_bytes);
        node_of.push_back(nodes.try_emplace(g.node, nodes.size()).first->second);
      }
      add_devices(free, "GPUs of the cluster");
      // Each reading asks Prometheus again. A GPU whose series is missing has no reading (its last
      // one stands: a scrape can fail once); missing three readings in a row, it is lost.
      constexpr int misses_for_lost = 3;
      auto misses = std::make_shared<std::vector<int>>(ids.size(), 0);
      auto read = [co, ids, misses] {
        std::string ignored;
        const auto now = read_cluster_gpus(co, ignored);
        std::vector<mgm::gpu_reading> out(ids.size());
        for (std::size_t i = 0; i < ids.size(); ++i) {
          bool seen = false;
          for (const auto& g : now) {
            if (g.id() == ids[i]) {
              out[i] = {true, g.free_bytes, std::nullopt};
              seen = true;
            }
          }
          (*misses)[i] = seen ? 0 : (*misses)[i] + 1;
          out[i].present = seen || (*misses)[i] < misses_for_lost;
        }
        return out;
      };
      watch_plan(w, r, ids, mgm::cluster_links(node_of), read);
      return;
    }
    if (watching) {
      std::optional<sim_choice> machine;
      std::shared_ptr<mgm::telemetry::source> src = open_source(ctx, machine);
      const auto first = src->sample();
      // Whole GPUs (MIG instances are planned through Prometheus), in CUDA's order where every GPU
      // is joined to its CUDA ordinal (the topology's order), else the source's.
      std::vector<const mgm::telemetry::device_sample*> gpus;
      for (const auto& s : first) {
        if (!s.mig) gpus.push_back(&s);
      }
      const bool by_ordinal = std::all_of(gpus.begin(), gpus.end(), [](const auto* s) { return s->cuda_ordinal.has_value(); });
      if (by_ordinal) {
        std::stable_sort(gpus.begin(), gpus.end(), [](const auto* a, const auto* b) { return *a->cuda_ordinal < *b->cuda_ordinal; });
      }
      std::vector<std::string> labels;
      std::vector<std::string> keys;
      for (const auto* s : gpus) {
        labels.push_back("GPU" + std::to_string(s->cuda_ordinal.value_or(s->index)));
        keys.push_back(s->key());
      }
      std::vector<std::size_t> free;
      for (const auto& reading : mgm::readings_from(first, labels.size(), keys)) free.push_back(reading.free_bytes.value_or(0));
      add_devices(free, "GPUs");
      std::optional<mgm::topology> links;
      if (machine) {
        links = machine->machine.links();
      } else if (by_ordinal && mgm::device_count() == static_cast<int>(labels.size())) {
        bool dense = true;  // ordinals 0..n-1, one each: the topology's GPUs in the same order
        for (std::size_t i = 0; i < gpus.size(); ++i) dense = dense && *gpus[i]->cuda_ordinal == static_cast<int>(i);
        if (dense) links = mgm::discover_topology();
      }
      watch_plan(w, r, labels, links, mgm::rebalance_driver::from_source(src, labels.size(), keys));
      return;
    }
    const machine_view v = view_of(ctx);
    add_devices(v.free_bytes, "GPUs");
    mgm::partition_plan plan;
    try {
      plan = mgm::partition(r, &v.links);
    } catch (const mgm::partition_error& e) {
      throw tool_error{exit_bad_input, std::string{"the items do not fit: "} + e.what()};
    }
    // Spill order: where a GPU's next buffer of one item goes when it is itself full.
    std::vector<std::vector<mgm::placement_candidate>> spills;
    for (std::size_t i = 0; i < v.free_bytes.size(); ++i) {
      mgm::placement_request pr;
      pr.reader = mgm::device_id{static_cast<int>(i)};
      pr.bytes = r.bytes_per_item;
      pr.free_bytes = v.free_bytes;
      pr.reserve_bytes.assign(v.free_bytes.size(), reserve);
      pr.free_bytes[i] = 0;  // as if full
      auto ranked = mgm::rank_placements(v.links, pr);
      std::erase_if(ranked, [&](const auto& c) { return !c.where.is_host() && c.where.device.value() == static_cast<int>(i); });
      spills.push_back(std::move(ranked));
    }
    // JAX's share of each GPU: what its items (and overhead) take, of the GPU's whole memory, rounded
    // up to a thousandth so that they fit.
    const auto xla_fraction = [&](std::size_t i) {
      if (plan.counts[i] == 0 || v.total_bytes[i] == 0) return 0.0;
      const double need = static_cast<double>(plan.counts[i]) * static_cast<double>(r.bytes_per_item) +
                          static_cast<double>(overhead);
      return std::min(1.0, std::ceil(1000.0 * need / static_cast<double>(v.total_bytes[i])) / 1000.0);
    };
    if (ctx.json) {
      nlohmann::json out;
      out["machine"] = v.name;
      out["items"] = r.items;
      out["capacity_source"] = v.capacity_source;
      out["bytes_per_item"] = r.bytes_per_item;
      out["reserve_bytes"] = reserve;
      out["overhead_bytes"] = overhead;
      out["policy"] = o->policy;
      out["gpus"] = nlohmann::json::array();
      for (std::size_t i = 0; i < plan.counts.size(); ++i) {
        nlohmann::json spill = nlohmann::json::array();
        for (const auto& c : spills[i]) spill.push_back({{"where", c.where.to_string()}, {"path", c.path}, {"gb_per_s", c.gbps}});
        out["gpus"].push_back({{"gpu", i}, {"name", v.gpu_names[i]}, {"free_bytes", v.free_bytes[i]},
                               {"total_bytes", v.total_bytes[i]},
                               {"xla_client_mem_fraction", xla_fraction(i)},
                               {"items", plan.counts[i]}, {"capacity_items", plan.capacity[i]},
                               {"range", {plan.ranges[i].first, plan.ranges[i].second}}, {"spill_order", spill}});
      }
      std::printf("%s\n", out.dump(2).c_str());
      return;
    }
    std::printf("%zu items of %s on %s, policy %s, %s kept free per GPU\nMemory sizes from %s.\n\n", r.items,
                mgm::format_bytes(r.bytes_per_item).c_str(), v.name.c_str(), o->policy.c_str(),
                mgm::format_bytes(reserve).c_str(), v.capacity_source.c_str());
    std::printf("%-4s %-24s %11s %10s %7s %10s %21s  %s\n", "GPU", "NAME", "FREE", "ITEMS", "SHARE", "HOLDS", "RANGE",
                "SPILL ORDER (when full)");
    for (std::size_t i = 0; i < plan.counts.size(); ++i) {
      std::string spill;
      for (std::size_t k = 0; k < spills[i].size() && k < 4; ++k) {
        if (!spill.empty()) spill += " > ";
        const auto& c = spills[i][k];
        char bw[32];
        std::snprintf(bw, sizeof bw, " %.0f GB/s", c.gbps);
        spill += (c.where.is_host() ? std::string{"host"} : "GPU" + std::to_string(c.where.device.value())) + " (" +
                 c.path + bw + ")";
      }
      const std::string range = "[" + std::to_string(plan.ranges[i].first) + ", " + std::to_string(plan.ranges[i].second) + ")";
      std::printf("%-4zu %-24.24s %11s %10zu %6.1f%% %10zu %21s  %s\n", i, v.gpu_names[i].c_str(),
                  mgm::format_bytes(v.free_bytes[i]).c_str(), plan.counts[i],
                  r.items == 0 ? 0.0 : 100.0 * static_cast<double>(plan.counts[i]) / static_cast<double>(r.items),
                  plan.capacity[i], range.c_str(), spill.empty() ? "--" : spill.c_str());
    }
    std::size_t sum = 0;
    for (const auto c : plan.counts) sum += c;
    std::printf("\nTotal %zu items (HOLDS: the most items a GPU can take; RANGE: its items, neighbours on fast links).\n", sum);
    if (o->jax) {
      std::printf("\nJAX, one process per GPU (XLA preallocates this share of the GPU's memory):\n");
      for (std::size_t i = 0; i < plan.counts.size(); ++i) {
        if (plan.counts[i] == 0) continue;
        std::printf("  CUDA_VISIBLE_DEVICES=%zu XLA_PYTHON_CLIENT_PREALLOCATE=true XLA_CLIENT_MEM_FRACTION=%.3f  # %zu items\n", i,
                    xla_fraction(i), plan.counts[i]);
      }
      std::printf("(JAX releases before XLA_CLIENT_MEM_FRACTION read XLA_PYTHON_CLIENT_MEM_FRACTION: set that one instead\n"
                  " there; newer ones refuse both at once.)\n");
    }
  });
}

}  // namespace mgm_tool
