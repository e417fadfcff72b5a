// mgm topo: the link matrix.
#include "mgm_tool.hpp"
#include "slurm_gres.hpp"

#include <mgm/bytes.hpp>
#include <mgm/device.hpp>
#include <mgm/error.hpp>
#include <mgm/topology/discovery.hpp>
#include <mgm/telemetry/nvml.hpp>
#include <mgm/topology/topology.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <sstream>

namespace mgm_tool {

namespace {

// The links of the machine the options name (no memory sizes needed).
mgm::topology links_of(const context& ctx) {
  if (ctx.simulated()) return make_sim_links(ctx).links;
  if (mgm::device_count() == 0) no_gpu("the CUDA runtime sees no GPU");
  return mgm::discover_topology();
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

// gres.conf's extra figures: on the live machine, NVML's minor numbers and /sys's cores; for a
// file or a simulated machine, the reasons they are unknown.
gres_input gres_facts(const mgm::topology& t, const context& ctx, const std::string& file) {
  gres_input in;
  in.gpus.resize(t.gpu_count());
  if (!file.empty() || ctx.simulated()) {
    in.source = !file.empty() ? file : make_sim_links(ctx).name;
    in.minor_note = !file.empty() ? "a topology file does not say" : "a simulated machine has no NVML";
    in.cores_note = "topo -m's CPU lists are logical CPUs, not Slurm's core indices; run mgm topo --format slurm "
                    "on the node itself";
    return in;
  }
  in.source = "this machine";
  std::string why;
  const auto nvml = mgm::telemetry::nvml_library::acquire(&why);
  in.minor_note = nvml ? "NVML did not give it" : "NVML is not available: " + why;
  for (std::size_t g = 0; g < t.gpu_count(); ++g) {
    const std::string bus = t.gpus()[g].pci_bus_id.empty()
                                ? std::string{}
                                : mgm::telemetry::normalise_pci_bus_id(t.gpus()[g].pci_bus_id);
    for (unsigned i = 0; nvml && !bus.empty() && i < nvml->device_count(); ++i) {
      const auto s = nvml->sample(i, false);
      if (s.pci_bus_id == bus) in.gpus[g].minor = s.minor_number;
    }
    std::string cores_why;
    in.gpus[g].cores = slurm_cores(t.gpus()[g].pci_bus_id, "/sys", &cores_why);
    if (!in.gpus[g].cores) in.cores_note = cores_why;
  }
  return in;
}

}  // namespace

void add_topo(CLI::App& app, context& ctx) {
  auto* cmd = app.add_subcommand("topo", "The link matrix in nvidia-smi topo -m's layout, from this machine, the "
                                         "simulated one, or a topo -m / NCCL XML file");
  auto file = std::make_shared<std::string>();
  auto bandwidth = std::make_shared<bool>(false);
  auto format = std::make_shared<std::string>("smi");
  cmd->add_option("file,--file", *file, "A saved `nvidia-smi topo -m` output or an NCCL topology XML (also as the one argument)");
  cmd->add_flag("--bandwidth", *bandwidth, "Add the per-direction bandwidth of each pair (GB/s, with its source)");
  cmd->add_option("--format", *format, "smi: nvidia-smi topo -m's matrix; slurm: gres.conf lines (Links=, Cores=)")
      ->check(CLI::IsMember({"smi", "slurm"}))
      ->capture_default_str();
  cmd->footer("Example: mgm topo topo.txt --bandwidth    (or: mgm topo --file topo.xml; mgm --sim dgx-h100 topo --format slurm)");
  cmd->callback([&ctx, file, bandwidth, format] {
    if (*format == "slurm" && (ctx.json || *bandwidth)) {
      throw tool_error{exit_usage, "--format slurm writes gres.conf lines: it takes neither --json nor --bandwidth"};
    }
    const mgm::topology t = !file->empty() ? read_topology_file(*file) : links_of(ctx);
    if (*format == "slurm") {
      std::printf("%s", gres_conf(t, gres_facts(t, ctx, *file)).c_str());
      return;
    }
    if (!ctx.json) {
      std::printf("%s", t.to_smi_matrix(*bandwidth).c_str());
      return;
    }
    std::printf("%s\n", topology_json(t, *bandwidth).dump(2).c_str());
  });
}

}  // namespace mgm_tool
