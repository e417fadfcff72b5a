// The Prometheus text exposition (version 0.0.4) of a batch of samples (`to_prometheus`), and
// what `mgm serve` adds to it: each process's pools, the sample's age, the sampling errors.
#include <mgm/telemetry/log_format.hpp>
#include <mgm/telemetry/publisher.hpp>

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>

namespace mgm::telemetry {
namespace {

// The shortest text that reads back as `v`.
std::string shortest(double v) {
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, v);
  return ec == std::errc{} ? std::string{buffer, end} : std::string{"NaN"};
}

std::string escape_label(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (const char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// The labels of a GPU's series: dcgm-exporter's `gpu` and `pci_bus_id`, its `UUID` and
// `modelName` in snake case (Prometheus's lint asks for it; a recording rule adds `UUID`).
std::string labels(const device_sample& s, std::span<const std::pair<std::string, std::string>> extra = {}) {
  std::string out = "gpu=\"" + std::to_string(s.index) + "\",uuid=\"" + escape_label(s.uuid) + "\",pci_bus_id=\"" +
                    escape_label(s.pci_bus_id) + "\",model_name=\"" + escape_label(s.name) + "\"";
  if (s.mig) {
    // dcgm-exporter's GPU_I_ID and GPU_I_PROFILE, in snake case.
    out += ",gpu_instance_id=\"" + std::to_string(s.mig->gpu_instance_id) + "\",compute_instance_id=\"" +
           std::to_string(s.mig->compute_instance_id) + "\",mig_profile=\"" + escape_label(s.mig->profile) + "\"";
  }
  for (const auto& [name, value] : extra) out += "," + name + "=\"" + escape_label(value) + "\"";
  return out;
}

void append_family(std::string& out, const char* name, const char* type, const char* help, const std::string& lines) {
  if (lines.empty()) return;
  out += std::string{"# HELP "} + name + ' ' + help + "\n# TYPE " + name + ' ' + type + '\n' + lines;
}

struct family {
  const char* name;
  const char* help;
  std::optional<std::string> (*value)(const device_sample&);
};

template <class T>
std::optional<std::string> as_text(const std::optional<T>& v, double scale = 1.0) {
  if (!v) return std::nullopt;
  if constexpr (std::is_same_v<T, std::uint64_t>) {
    return std::to_string(*v);
  } else {
    return shortest(static_cast<double>(*v) * scale);
  }
}

const family families[] = {
    {"mgm_gpu_memory_total_bytes", "Total memory of the GPU.", [](const device_sample& s) { return as_text(s.memory_total); }},
    {"mgm_gpu_memory_used_bytes", "GPU memory allocated by active contexts.",
     [](const device_sample& s) { return as_text(s.memory_used); }},
    {"mgm_gpu_memory_free_bytes", "Free GPU memory.", [](const device_sample& s) { return as_text(s.memory_free); }},
    {"mgm_gpu_memory_reserved_bytes", "GPU memory reserved by the driver and firmware.",
     [](const device_sample& s) { return as_text(s.memory_reserved); }},
    {"mgm_gpu_temperature_celsius", "GPU core temperature.", [](const device_sample& s) { return as_text(s.temperature_c); }},
    {"mgm_gpu_power_draw_watts", "Power draw of the board.", [](const device_sample& s) { return as_text(s.power_draw_w); }},
    {"mgm_gpu_power_limit_watts", "Power limit of the board.", [](const device_sample& s) { return as_text(s.power_limit_w); }},
    {"mgm_gpu_sm_clock_hertz", "SM clock.", [](const device_sample& s) { return as_text(s.clock_sm_mhz, 1e6); }},
    {"mgm_gpu_memory_clock_hertz", "Memory clock.", [](const device_sample& s) { return as_text(s.clock_mem_mhz, 1e6); }},
    {"mgm_gpu_pcie_link_gen", "Current PCIe link generation.", [](const device_sample& s) { return as_text(s.pcie_gen); }},
    {"mgm_gpu_pcie_link_width", "Current PCIe link width (lanes).", [](const device_sample& s) { return as_text(s.pcie_width); }},
    {"mgm_gpu_pcie_rx_bytes_per_second", "PCIe receive throughput.",
     [](const device_sample& s) { return as_text(s.pcie_rx_mb_s, 1e6); }},
    {"mgm_gpu_pcie_tx_bytes_per_second", "PCIe transmit throughput.",
     [](const device_sample& s) { return as_text(s.pcie_tx_mb_s, 1e6); }},
    {"mgm_gpu_nvlink_links_up", "NVLinks in the active state.", [](const device_sample& s) { return as_text(s.nvlink_up); }},
    {"mgm_gpu_utilization_ratio", "Fraction of time a kernel was running (0..1).",
     [](const device_sample& s) { return as_text(s.utilization_gpu_pct, 0.01); }},
    {"mgm_gpu_memory_utilization_ratio", "Fraction of time device memory was read or written (0..1).",
     [](const device_sample& s) { return as_text(s.utilization_mem_pct, 0.01); }},
};

// The pools' figures summed over the processes on each GPU, when no process's own are given.
const family pool_sums[] = {
    {"mgm_pool_allocated_bytes", "Bytes handed out by MultiGpuMem pools on the GPU.",
     [](const device_sample& s) { return as_text(s.pool_allocated); }},
    {"mgm_pool_reserved_bytes", "Bytes held by MultiGpuMem pools on the GPU.",
     [](const device_sample& s) { return as_text(s.pool_reserved); }},
};

void append_families(std::string& out, std::span<const family> which, std::span<const device_sample> batch,
                     std::span<const std::pair<std::string, std::string>> extra) {
  for (const auto& f : which) {
    std::string lines;
    for (const auto& s : batch) {
      if (const auto v = f.value(s)) lines += std::string{f.name} + '{' + labels(s, extra) + "} " + *v + '\n';
    }
    append_family(out, f.name, "gauge", f.help, lines);
  }
}

// Each publishing process's pools on each GPU, labelled with its pid and name, and its publisher
// id: two processes of different pid namespaces may write the same pid (each its container's 1),
// and their series must still differ.
void append_process_pools(std::string& out, std::span<const device_sample> batch,
                          const std::vector<published_process>& pools, bool simulated,
                          std::span<const std::pair<std::string, std::string>> extra) {
  std::string allocated;
  std::string reserved;
  for (const auto& s : batch) {
    for (const auto& p : pools) {
      for (const auto& d : p.devices) {
        if (!same_gpu(s, d, simulated)) continue;
        const std::string l = '{' + labels(s, extra) + ",pid=\"" + std::to_string(p.pid) + "\",process_name=\"" +
                              escape_label(p.name) + (p.id.empty() ? "" : "\",publisher=\"" + p.id) + "\"} ";
        if (d.figures.allocated) allocated += "mgm_pool_allocated_bytes" + l + std::to_string(*d.figures.allocated) + '\n';
        reserved += "mgm_pool_reserved_bytes" + l + std::to_string(d.figures.reserved) + '\n';
      }
    }
  }
  append_family(out, "mgm_pool_allocated_bytes", "gauge", "Bytes handed out by a process's MultiGpuMem pools on the GPU.",
                allocated);
  append_family(out, "mgm_pool_reserved_bytes", "gauge", "Bytes held by a process's MultiGpuMem pools on the GPU.",
                reserved);
}

}  // namespace

std::string to_prometheus(std::span<const device_sample> batch) { return to_prometheus(batch, prometheus_extras{}); }

std::string to_prometheus(std::span<const device_sample> batch, const prometheus_extras& extras) {
  const std::span<const std::pair<std::string, std::string>> extra{extras.labels};
  std::string out;
  append_families(out, families, batch, extra);
  if (extras.pools) {
    append_process_pools(out, batch, *extras.pools, extras.simulated, extra);
  } else {
    append_families(out, pool_sums, batch, extra);
  }
  std::string processes;
  for (const auto& s : batch) {
    for (const auto& p : s.processes) {
      if (!p.used_bytes) continue;
      processes += "mgm_gpu_process_memory_used_bytes{" + labels(s, extra) + ",pid=\"" + std::to_string(p.pid) +
                   "\",process_name=\"" + escape_label(p.name) + "\"} " + std::to_string(*p.used_bytes) + '\n';
    }
  }
  append_family(out, "mgm_gpu_process_memory_used_bytes", "gauge", "GPU memory used by a process.", processes);
  std::string own_labels;
  for (const auto& [name, value] : extras.labels) {
    own_labels += (own_labels.empty() ? "" : ",") + name + "=\"" + escape_label(value) + "\"";
  }
  const std::string braces = own_labels.empty() ? std::string{} : '{' + own_labels + '}';
  if (extras.sample_age_seconds) {
    append_family(out, "mgm_sample_age_seconds", "gauge", "Seconds since the GPUs shown were sampled.",
                  "mgm_sample_age_seconds" + braces + ' ' + shortest(*extras.sample_age_seconds) + '\n');
  }
  if (extras.sample_errors) {
    append_family(out, "mgm_sample_errors_total", "counter", "Samples of the GPUs that failed since the exporter started.",
                  "mgm_sample_errors_total" + braces + ' ' + std::to_string(*extras.sample_errors) + '\n');
  }
  return out;
}

}  // namespace mgm::telemetry
