// mgm topo, mgm plan: the link matrix, and how to split work and where buffers spill.
#include "mgm_tool.hpp"

#include <mgm/bytes.hpp>
#include <mgm/device.hpp>
#include <mgm/error.hpp>
#include <mgm/partition/partitioner.hpp>
#include <mgm/placement/placement_policy.hpp>
#include <mgm/topology/discovery.hpp>
#include <mgm/topology/topology.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <sstream>

namespace mgm_tool {

namespace {

// The machine the options name, as devices with free memory and a topology.
struct machine_view {
  std::string name;
  std::vector<std::string> gpu_names;
  std::vector<std::size_t> free_bytes;
  std::vector<std::size_t> total_bytes;
  mgm::topology links;
};

machine_view view_of(const context& ctx) {
  machine_view v;
  if (ctx.simulated()) {
    auto m = make_sim_machine(ctx.sim);
    v.name = "sim:" + m.name();
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
  v.links = mgm::discover_topology();
  for (int d = 0; d < mgm::device_count(); ++d) {
    const auto mem = mgm::memory_info(mgm::device_id{d});
    v.gpu_names.push_back(v.links.gpus()[static_cast<std::size_t>(d)].name);
    v.free_bytes.push_back(mem.free_bytes);
    v.total_bytes.push_back(mem.total_bytes);
  }
  return v;
}

mgm::topology read_topology_file(const std::string& path) {
  const std::string text = read_file(path);
  try {
    return text.find("<system") != std::string::npos ? mgm::parse_nccl_topology_xml(text) : mgm::parse_smi_topology(text);
  } catch (const mgm::parse_error& e) {
    throw tool_error{exit_bad_input, path + ":" + std::to_string(e.line()) + ": " + e.what()};
  }
}

// `mgm topo --json`. Keys carry their unit where they have one (`bandwidth_gb_per_s`,
// `memory_bytes`); what is not known is null.
nlohmann::json topology_json(const mgm::topology& t, bool bandwidth) {
  const auto or_null = [](const std::optional<int>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  const auto or_null_text = [](const std::string& v) { return v.empty() ? nlohmann::json(nullptr) : nlohmann::json(v); };
  nlohmann::json out;
  out["gpus"] = nlohmann::json::array();
  for (const auto& g : t.gpus()) {
    out["gpus"].push_back({{"ordinal", g.ordinal},
                           {"name", g.name},
                           {"pci_bus_id", g.pci_bus_id},
                           {"compute_capability", g.compute_capability == 0 ? nlohmann::json(nullptr)
                                                                            : nlohmann::json(g.compute_capability)},
                           {"memory_bytes", g.memory_bytes == 0 ? nlohmann::json(nullptr) : nlohmann::json(g.memory_bytes)},
                           {"cpu_affinity", g.cpu_affinity},
                           {"numa_affinity", g.numa_affinity},
                           {"numa_node", or_null(g.numa_node)},
                           {"gpu_numa_id", or_null(g.gpu_numa_id)}});
  }
  out["links"] = nlohmann::json::array();
  const auto n = static_cast<int>(t.gpu_count());
  for (int a = 0; a < n; ++a) {
    nlohmann::json row = nlohmann::json::array();
    for (int b = 0; b < n; ++b) {
      const auto& p = t.path(mgm::device_id{a}, mgm::device_id{b});
      nlohmann::json cell{{"label", p.label()}, {"nvlinks", p.nvlinks}};
      if (p.is_nvlink()) {
        const auto* g = t.nvlink_generation_of(mgm::device_id{a}, mgm::device_id{b});
        cell["nvlink_generation"] = g != nullptr ? std::string{g->name} : std::string{"unknown"};
      }
      if (bandwidth && a != b) {
        const auto bw = t.bandwidth(mgm::device_id{a}, mgm::device_id{b});
        cell["bandwidth_gb_per_s"] = bw.gbps;
        cell["bandwidth_source"] = std::string{mgm::provenance_name(bw.provenance)};
      }
      row.push_back(cell);
    }
    out["links"].push_back(row);
  }
  out["nics"] = nlohmann::json::array();
  for (std::size_t k = 0; k < t.nics().size(); ++k) {
    const auto& nic = t.nics()[k];
    nlohmann::json to_gpu = nlohmann::json::array();
    for (const auto& p : nic.to_gpu) to_gpu.push_back(p.label());
    nlohmann::json to_nic = nlohmann::json::array();
    for (std::size_t o = 0; o < t.nics().size(); ++o) {
      const auto p = t.nic_path(k, o);
      to_nic.push_back(p ? nlohmann::json(p->label()) : nlohmann::json(nullptr));
    }
    out["nics"].push_back({{"index", k}, {"name", nic.name}, {"device", or_null_text(nic.device)},
                           {"to_gpu", to_gpu}, {"to_nic", to_nic}});
  }
  return out;
}

}  // namespace

void add_topo(CLI::App& app, context& ctx) {
  auto* cmd = app.add_subcommand("topo", "The link matrix in nvidia-smi topo -m's layout, from this machine, the "
                                         "simulated one, or a topo -m / NCCL XML file");
  auto file = std::make_shared<std::string>();
  auto bandwidth = std::make_shared<bool>(false);
  cmd->add_option("--file", *file, "A saved `nvidia-smi topo -m` output or an NCCL topology XML");
  cmd->add_flag("--bandwidth", *bandwidth, "Add the per-direction bandwidth of each pair (GB/s, with its source)");
  cmd->footer("Example: mgm topo --file topo.txt --bandwidth    (or: mgm --sim dgx-h100 topo)");
  cmd->callback([&ctx, file, bandwidth] {
    const mgm::topology t = !file->empty() ? read_topology_file(*file) : view_of(ctx).links;
    if (!ctx.json) {
      std::printf("%s", t.to_smi_matrix(*bandwidth).c_str());
      return;
    }
    std::printf("%s\n", topology_json(t, *bandwidth).dump(2).c_str());
  });
}

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
  };
  auto o = std::make_shared<options>();
  cmd->add_option("--items", o->items, "How many items (samples, layers, shards)")->required()->check(count_at_least(0));
  cmd->add_option("--bytes-per-item", o->bytes_per_item, "Memory one item needs: 512MiB, 1.5GiB, 4096")->required();
  cmd->add_option("--policy", o->policy, "memory (by free memory), throughput (by --throughput), equal")
      ->check(CLI::IsMember({"memory", "throughput", "equal"}))
      ->capture_default_str();
  cmd->add_option("--reserve", o->reserve, "Memory kept free on every GPU")->capture_default_str();
  cmd->add_option("--overhead", o->overhead, "Memory needed once per GPU whatever the count (a model replica)");
  cmd->add_option("--throughput", o->throughput, "Items per second of each GPU, relative (one per GPU)")->delimiter(',');
  cmd->add_option("--granularity", o->granularity, "Counts are multiples of this (not the last device's)")
      ->check(count_at_least(1));
  cmd->footer("Example: mgm --sim pcie-4gpu-mixed plan --items 50000 --bytes-per-item 1MiB --reserve 2GiB");
  cmd->callback([&ctx, o] {
    const machine_view v = view_of(ctx);
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
    const std::size_t reserve = mgm::parse_bytes(o->reserve);
    const std::size_t overhead = mgm::parse_bytes(o->overhead);
    if (!o->throughput.empty() && o->throughput.size() != v.free_bytes.size()) {
      throw tool_error{exit_bad_input, "--throughput has " + std::to_string(o->throughput.size()) + " values for " +
                                           std::to_string(v.free_bytes.size()) + " GPUs"};
    }
    for (std::size_t i = 0; i < v.free_bytes.size(); ++i) {
      mgm::partition_device d;
      d.free_bytes = v.free_bytes[i];
      d.reserve_bytes = reserve;
      d.overhead_bytes = overhead;
      if (!o->throughput.empty()) d.throughput = o->throughput[i];
      r.devices.push_back(d);
    }
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
    if (ctx.json) {
      nlohmann::json out;
      out["machine"] = v.name;
      out["items"] = r.items;
      out["bytes_per_item"] = r.bytes_per_item;
      out["policy"] = o->policy;
      out["gpus"] = nlohmann::json::array();
      for (std::size_t i = 0; i < plan.counts.size(); ++i) {
        nlohmann::json spill = nlohmann::json::array();
        for (const auto& c : spills[i]) spill.push_back({{"where", c.where.to_string()}, {"path", c.path}, {"gbps", c.gbps}});
        out["gpus"].push_back({{"gpu", i}, {"name", v.gpu_names[i]}, {"free_bytes", v.free_bytes[i]},
                               {"items", plan.counts[i]}, {"capacity_items", plan.capacity[i]},
                               {"range", {plan.ranges[i].first, plan.ranges[i].second}}, {"spill_order", spill}});
      }
      std::printf("%s\n", out.dump(2).c_str());
      return;
    }
    std::printf("%zu items of %s on %s, policy %s, %s kept free per GPU\n\n", r.items,
                mgm::format_bytes(r.bytes_per_item).c_str(), v.name.c_str(), o->policy.c_str(),
                mgm::format_bytes(reserve).c_str());
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
  });
}

}  // namespace mgm_tool
