// Our JSON lines: one object per sample (`to_json_line`), and `jsonl_sink`.
#include "jsonl_keys.hpp"
#include "sink_shared.hpp"

#include <mgm/telemetry/log_format.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace mgm::telemetry {
namespace {

using ordered = nlohmann::ordered_json;
using sink_detail::emit;
using sink_detail::mib;
using sink_detail::open_for_writing;
namespace key = jsonl_keys;

void put_memory(ordered& j, const char* name, const std::optional<std::uint64_t>& bytes) {
  if (!bytes) return;
  if (*bytes % mib == 0) {
    j[name] = *bytes / mib;
  } else {
    j[name] = static_cast<double>(*bytes) / static_cast<double>(mib);  // exact below 2^53 bytes
  }
}

template <class T>
void put(ordered& j, const char* name, const std::optional<T>& v) {
  if (v) j[name] = *v;
}

}  // namespace

std::string to_json_line(const device_sample& s) {
  ordered j;
  j[key::timestamp] = format_iso_time(s.time);
  j[key::index] = s.index;
  if (!s.uuid.empty()) j[key::uuid] = s.uuid;
  if (!s.pci_bus_id.empty()) j[key::pci_bus_id] = s.pci_bus_id;
  j[key::name] = s.name;
  put(j, key::cuda_ordinal, s.cuda_ordinal);
  put_memory(j, key::memory_total, s.memory_total);
  put_memory(j, key::memory_used, s.memory_used);
  put_memory(j, key::memory_free, s.memory_free);
  put_memory(j, key::memory_reserved, s.memory_reserved);
  put(j, key::temperature, s.temperature_c);
  put(j, key::power_draw, s.power_draw_w);
  put(j, key::power_limit, s.power_limit_w);
  put(j, key::clock_sm, s.clock_sm_mhz);
  put(j, key::clock_mem, s.clock_mem_mhz);
  put(j, key::pcie_gen, s.pcie_gen);
  put(j, key::pcie_width, s.pcie_width);
  put(j, key::utilization_gpu, s.utilization_gpu_pct);
  put(j, key::utilization_mem, s.utilization_mem_pct);
  put(j, key::pcie_rx, s.pcie_rx_mb_s);
  put(j, key::pcie_tx, s.pcie_tx_mb_s);
  put(j, key::nvlink_up, s.nvlink_up);
  put_memory(j, key::pool_allocated, s.pool_allocated);
  put_memory(j, key::pool_reserved, s.pool_reserved);
  if (s.mig) {
    j[key::mig_gpu_instance] = s.mig->gpu_instance_id;
    j[key::mig_compute_instance] = s.mig->compute_instance_id;
    j[key::mig_profile] = s.mig->profile;
  }
  if (!s.processes.empty()) {
    auto& ps = j[key::processes] = ordered::array();
    for (const auto& p : s.processes) {
      ordered o;
      o[key::pid] = p.pid;
      o[key::process_name] = p.name;
      put_memory(o, key::used_gpu_memory, p.used_bytes);
      ps.push_back(std::move(o));
    }
  }
  if (!s.missing.empty()) j[key::missing] = s.missing;
  // Names from the OS or a file need not be UTF-8: replace what is not rather than throw.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

jsonl_sink::jsonl_sink(std::ostream& out) : out_{&out} {}
jsonl_sink::jsonl_sink(const std::filesystem::path& path)
    : owned_{open_for_writing(path, "jsonl_sink")}, out_{owned_.get()} {}
jsonl_sink::jsonl_sink(jsonl_sink&&) noexcept = default;
jsonl_sink& jsonl_sink::operator=(jsonl_sink&&) noexcept = default;
jsonl_sink::~jsonl_sink() = default;

void jsonl_sink::write(std::span<const device_sample> batch) {
  std::string text;
  for (const auto& s : batch) (text += to_json_line(s)) += '\n';
  emit(*out_, text, "jsonl_sink");
}

}  // namespace mgm::telemetry
