// The reader of our JSON lines (`read_jsonl_log`): one object per line, as `to_json_line` writes
// it (jsonl_sink.cpp), and as logs written before the field names carried their units.
#include <mgm/error.hpp>
#include "jsonl_keys.hpp"
#include "text.hpp"

#include <mgm/telemetry/log_format.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace mgm::telemetry {
namespace {

constexpr std::uint64_t bytes_per_mib = 1024 * 1024;
namespace key = jsonl_keys;

// A value of a JSON line that is not what the field needs.
struct bad_value {
  std::string message;
};

const nlohmann::json* present_member(const nlohmann::json& j, const char* name) {
  const auto it = j.find(name);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

double number_of(const nlohmann::json& j, const char* name) {
  if (!j.is_number()) throw bad_value{std::string{name} + ": not a number"};
  const double v = j.get<double>();
  if (!std::isfinite(v)) throw bad_value{std::string{name} + ": not a finite number"};
  return v;
}

std::optional<double> get_double(const nlohmann::json& j, const char* name) {
  const auto* v = present_member(j, name);
  if (v == nullptr) return std::nullopt;
  return number_of(*v, name);
}

std::optional<unsigned> get_unsigned(const nlohmann::json& j, const char* name) {
  const auto v = get_double(j, name);
  if (!v) return std::nullopt;
  if (*v < 0 || *v > 4.3e9 || std::lround(*v) > static_cast<long>(std::numeric_limits<unsigned>::max())) {
    throw bad_value{std::string{name} + ": out of range"};
  }
  return static_cast<unsigned>(std::lround(*v));
}

std::optional<std::uint64_t> get_memory(const nlohmann::json& j, const char* name) {
  const auto v = get_double(j, name);
  if (!v) return std::nullopt;
  const double b = *v * static_cast<double>(bytes_per_mib);
  if (b < 0 || b >= 9.2e18) throw bad_value{std::string{name} + ": out of range"};
  return static_cast<std::uint64_t>(std::llround(b));
}

// A name with its unit (`memory.used_mib`), or the name that logs written before it used
// (`memory.used`): old JSON lines files read as they did.
const char* either(const nlohmann::json& j, const char* name, const char* older) {
  return present_member(j, name) != nullptr ? name : older;
}
std::optional<double> get_double(const nlohmann::json& j, const char* name, const char* older) {
  return get_double(j, either(j, name, older));
}
std::optional<unsigned> get_unsigned(const nlohmann::json& j, const char* name, const char* older) {
  return get_unsigned(j, either(j, name, older));
}
std::optional<std::uint64_t> get_memory(const nlohmann::json& j, const char* name, const char* older) {
  return get_memory(j, either(j, name, older));
}

std::string get_string(const nlohmann::json& j, const char* name) {
  const auto* v = present_member(j, name);
  if (v == nullptr) return {};
  if (!v->is_string()) throw bad_value{std::string{name} + ": not a string"};
  return v->get<std::string>();
}

device_sample sample_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw bad_value{"not a JSON object"};
  device_sample s;
  const auto* t = present_member(j, key::timestamp);
  if (t == nullptr) throw bad_value{"no timestamp"};
  if (t->is_string()) {
    const auto time = parse_log_time(t->get<std::string>());
    if (!time) throw bad_value{"timestamp: '" + t->get<std::string>() + "' is not a timestamp"};
    s.time = *time;
  } else {
    const double seconds = number_of(*t, key::timestamp);
    if (std::fabs(seconds) > 9e9) throw bad_value{"timestamp: out of range"};
    s.time = clock::time_point{std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>{seconds})};
  }
  if (const auto* i = present_member(j, key::index)) {
    const double v = number_of(*i, key::index);
    if (v < 0 || v > std::numeric_limits<int>::max() || v != std::floor(v)) throw bad_value{"index: not a GPU index"};
    s.index = static_cast<int>(v);
  }
  if (const auto* o = present_member(j, key::cuda_ordinal)) {
    const double v = number_of(*o, key::cuda_ordinal);
    if (v < 0 || v > std::numeric_limits<int>::max()) throw bad_value{"mgm.cuda_ordinal: out of range"};
    s.cuda_ordinal = static_cast<int>(v);
  }
  s.uuid = get_string(j, key::uuid);
  s.pci_bus_id = get_string(j, key::pci_bus_id);
  s.name = get_string(j, key::name);
  s.memory_total = get_memory(j, key::memory_total, "memory.total");
  s.memory_used = get_memory(j, key::memory_used, "memory.used");
  s.memory_free = get_memory(j, key::memory_free, "memory.free");
  s.memory_reserved = get_memory(j, key::memory_reserved, "memory.reserved");
  s.temperature_c = get_double(j, key::temperature, "temperature.gpu");
  s.power_draw_w = get_double(j, key::power_draw, "power.draw");
  s.power_limit_w = get_double(j, key::power_limit, "power.limit");
  s.clock_sm_mhz = get_unsigned(j, key::clock_sm, "clocks.current.sm");
  s.clock_mem_mhz = get_unsigned(j, key::clock_mem, "clocks.current.memory");
  s.pcie_gen = get_unsigned(j, key::pcie_gen);
  s.pcie_width = get_unsigned(j, key::pcie_width);
  s.utilization_gpu_pct = get_unsigned(j, key::utilization_gpu, "utilization.gpu");
  s.utilization_mem_pct = get_unsigned(j, key::utilization_mem, "utilization.memory");
  s.pcie_rx_mb_s = get_double(j, key::pcie_rx, "mgm.pcie.rx");
  s.pcie_tx_mb_s = get_double(j, key::pcie_tx, "mgm.pcie.tx");
  s.nvlink_up = get_unsigned(j, key::nvlink_up);
  if (const auto gi = get_unsigned(j, key::mig_gpu_instance)) {
    s.mig = mig_identity{*gi, get_unsigned(j, key::mig_compute_instance).value_or(0), get_string(j, key::mig_profile)};
  }
  s.pool_allocated = get_memory(j, key::pool_allocated, "mgm.pool.allocated");
  s.pool_reserved = get_memory(j, key::pool_reserved, "mgm.pool.reserved");
  if (const auto* ps = present_member(j, key::processes)) {
    if (!ps->is_array()) throw bad_value{"processes: not an array"};
    for (const auto& p : *ps) {
      if (!p.is_object()) throw bad_value{"processes: an element is not an object"};
      process_sample ps_sample;
      const auto pid = get_unsigned(p, key::pid);
      if (!pid) throw bad_value{"processes: an element has no pid"};
      ps_sample.pid = *pid;
      ps_sample.name = get_string(p, key::process_name);
      ps_sample.used_bytes = get_memory(p, key::used_gpu_memory, "used_gpu_memory");
      s.processes.push_back(std::move(ps_sample));
    }
  }
  if (const auto* m = present_member(j, key::missing)) {
    if (!m->is_array()) throw bad_value{"missing: not an array"};
    for (const auto& reason : *m) {
      if (!reason.is_string()) throw bad_value{"missing: an element is not a string"};
      s.missing.push_back(reason.get<std::string>());
    }
  }
  return s;
}

}  // namespace

gpu_log read_jsonl_log(std::string_view text, const log_read_options& options) {
  gpu_log log;
  log.format = "jsonl";
  log.assumed_interval = options.assumed_interval;
  for (const auto& line : detail::split_log_lines(text)) {
    if (detail::trim(line.text).empty()) continue;
    std::string why;
    try {
      const auto j = nlohmann::json::parse(line.text, nullptr, false);
      if (j.is_discarded()) {
        why = "not valid JSON";
      } else {
        log.samples.push_back(sample_from_json(j));
        continue;
      }
    } catch (const bad_value& e) {
      why = e.message;
    } catch (const nlohmann::json::exception& e) {
      why = e.what();
    }
    if (line.had_nul) why += " (NUL bytes cut the line)";
    if (options.strict) {
      throw parse_error{"JSON lines, line " + std::to_string(line.number) + ": " + why, line.number, 0};
    }
    log.issues.push_back({line.number, std::move(why)});
  }
  return log;
}

}  // namespace mgm::telemetry
