// The Prometheus text exposition (version 0.0.4) of a batch of samples (`to_prometheus`).
#include <mgm/telemetry/log_format.hpp>

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

std::string labels(const device_sample& s) {
  return "gpu=\"" + std::to_string(s.index) + "\",uuid=\"" + escape_label(s.uuid) + "\",name=\"" +
         escape_label(s.name) + "\"";
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
    {"mgm_pool_allocated_bytes", "Bytes handed out by MultiGpuMem pools on the GPU.",
     [](const device_sample& s) { return as_text(s.pool_allocated); }},
    {"mgm_pool_reserved_bytes", "Bytes held by MultiGpuMem pools on the GPU.",
     [](const device_sample& s) { return as_text(s.pool_reserved); }},
};

}  // namespace

std::string to_prometheus(std::span<const device_sample> batch) {
  std::string out;
  for (const auto& f : families) {
    std::string lines;
    for (const auto& s : batch) {
      if (const auto v = f.value(s)) lines += std::string{f.name} + '{' + labels(s) + "} " + *v + '\n';
    }
    if (lines.empty()) continue;
    out += std::string{"# HELP "} + f.name + ' ' + f.help + "\n# TYPE " + f.name + " gauge\n" + lines;
  }
  std::string processes;
  for (const auto& s : batch) {
    for (const auto& p : s.processes) {
      if (!p.used_bytes) continue;
      processes += "mgm_gpu_process_memory_used_bytes{" + labels(s) + ",pid=\"" + std::to_string(p.pid) +
                   "\",process_name=\"" + escape_label(p.name) + "\"} " + std::to_string(*p.used_bytes) + '\n';
    }
  }
  if (!processes.empty()) {
    out += "# HELP mgm_gpu_process_memory_used_bytes GPU memory used by a process.\n"
           "# TYPE mgm_gpu_process_memory_used_bytes gauge\n" +
           processes;
  }
  return out;
}

}  // namespace mgm::telemetry
