// What the sampler writes: nvidia-smi-style CSV (devices and processes), JSON lines, and the
// Prometheus text exposition; and the reader of our JSON lines, beside its writer so that the two
// share one list of field names.
#include <mgm/error.hpp>
#include <mgm/telemetry/log_format.hpp>

#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mgm::telemetry {
namespace {

constexpr std::uint64_t mib = 1024 * 1024;

// ---------------------------------------------------------------------------------------------
// Number formatting
// ---------------------------------------------------------------------------------------------

// Two decimals, as nvidia-smi prints watts.
std::string fixed2(double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.2f", v);
  return buffer;
}

// At most two decimals, trailing zeros dropped: `70`, `56.6`.
std::string trimmed2(double v) {
  std::string s = fixed2(v);
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

// The shortest text that reads back as `v`.
std::string shortest(double v) {
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, v);
  return ec == std::errc{} ? std::string{buffer, end} : std::string{"NaN"};
}

std::string clean_text(std::string s) {
  for (char& c : s) {
    if (c == ',' || c == '\n' || c == '\r' || c == '\0') c = ' ';
  }
  return s;
}

struct csv_cell {
  bool units;
  std::string& row;

  void sep() { row += ", "; }
  void missing() {
    sep();
    row += "[N/A]";
  }
  void text(const std::string& s) {
    sep();
    row += s.empty() ? std::string{"[N/A]"} : clean_text(s);
  }
  void memory(const std::optional<std::uint64_t>& bytes) {
    if (!bytes) return missing();
    sep();
    row += std::to_string(*bytes / mib);
    if (units) row += " MiB";
  }
  void number(const std::optional<double>& v, std::string (*format)(double), std::string_view unit) {
    if (!v || !std::isfinite(*v)) return missing();
    sep();
    row += format(*v);
    if (units && !unit.empty()) (row += ' ') += unit;
  }
  void whole(const std::optional<unsigned>& v, std::string_view unit) {
    if (!v) return missing();
    sep();
    row += std::to_string(*v);
    if (units && !unit.empty()) (row += ' ') += unit;
  }
};

std::unique_ptr<std::ostream> open_for_writing(const std::filesystem::path& path, const char* who) {
  auto file = std::make_unique<std::ofstream>(path, std::ios::binary | std::ios::trunc);
  if (!*file) throw logic_error{std::string{who} + ": cannot create '" + path.string() + "'"};
  return file;
}

void emit(std::ostream& out, const std::string& text, const char* who) {
  out << text;
  out.flush();
  if (!out) throw std::runtime_error{std::string{who} + ": writing failed"};
}

// ---------------------------------------------------------------------------------------------
// JSON
// ---------------------------------------------------------------------------------------------

using ordered = nlohmann::ordered_json;

void put_memory(ordered& j, const char* key, const std::optional<std::uint64_t>& bytes) {
  if (!bytes) return;
  if (*bytes % mib == 0) {
    j[key] = *bytes / mib;
  } else {
    j[key] = static_cast<double>(*bytes) / static_cast<double>(mib);  // exact below 2^53 bytes
  }
}

template <class T>
void put(ordered& j, const char* key, const std::optional<T>& v) {
  if (v) j[key] = *v;
}

// A value of a JSON line that is not what the field needs.
struct bad_value {
  std::string message;
};

const nlohmann::json* member(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

double number_of(const nlohmann::json& j, const char* key) {
  if (!j.is_number()) throw bad_value{std::string{key} + ": not a number"};
  const double v = j.get<double>();
  if (!std::isfinite(v)) throw bad_value{std::string{key} + ": not a finite number"};
  return v;
}

std::optional<double> get_double(const nlohmann::json& j, const char* key) {
  const auto* v = member(j, key);
  if (v == nullptr) return std::nullopt;
  return number_of(*v, key);
}

std::optional<unsigned> get_unsigned(const nlohmann::json& j, const char* key) {
  const auto v = get_double(j, key);
  if (!v) return std::nullopt;
  if (*v < 0 || *v > 4.3e9 || std::lround(*v) > static_cast<long>(std::numeric_limits<unsigned>::max())) {
    throw bad_value{std::string{key} + ": out of range"};
  }
  return static_cast<unsigned>(std::lround(*v));
}

std::optional<std::uint64_t> get_memory(const nlohmann::json& j, const char* key) {
  const auto v = get_double(j, key);
  if (!v) return std::nullopt;
  const double b = *v * static_cast<double>(mib);
  if (b < 0 || b >= 9.2e18) throw bad_value{std::string{key} + ": out of range"};
  return static_cast<std::uint64_t>(std::llround(b));
}

// A key with its unit (`memory.used_mib`), or the name that logs written before it used
// (`memory.used`): old JSON lines files read as they did.
const char* either(const nlohmann::json& j, const char* key, const char* older) {
  return member(j, key) != nullptr ? key : older;
}
std::optional<double> get_double(const nlohmann::json& j, const char* key, const char* older) {
  return get_double(j, either(j, key, older));
}
std::optional<unsigned> get_unsigned(const nlohmann::json& j, const char* key, const char* older) {
  return get_unsigned(j, either(j, key, older));
}
std::optional<std::uint64_t> get_memory(const nlohmann::json& j, const char* key, const char* older) {
  return get_memory(j, either(j, key, older));
}

std::string get_string(const nlohmann::json& j, const char* key) {
  const auto* v = member(j, key);
  if (v == nullptr) return {};
  if (!v->is_string()) throw bad_value{std::string{key} + ": not a string"};
  return v->get<std::string>();
}

device_sample sample_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw bad_value{"not a JSON object"};
  device_sample s;
  const auto* t = member(j, "timestamp");
  if (t == nullptr) throw bad_value{"no timestamp"};
  if (t->is_string()) {
    const auto time = parse_log_time(t->get<std::string>());
    if (!time) throw bad_value{"timestamp: '" + t->get<std::string>() + "' is not a timestamp"};
    s.time = *time;
  } else {
    const double seconds = number_of(*t, "timestamp");
    if (std::fabs(seconds) > 9e9) throw bad_value{"timestamp: out of range"};
    s.time = clock::time_point{std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>{seconds})};
  }
  if (const auto* i = member(j, "index")) {
    const double v = number_of(*i, "index");
    if (v < 0 || v > std::numeric_limits<int>::max() || v != std::floor(v)) throw bad_value{"index: not a GPU index"};
    s.index = static_cast<int>(v);
  }
  if (const auto* o = member(j, "mgm.cuda_ordinal")) {
    const double v = number_of(*o, "mgm.cuda_ordinal");
    if (v < 0 || v > std::numeric_limits<int>::max()) throw bad_value{"mgm.cuda_ordinal: out of range"};
    s.cuda_ordinal = static_cast<int>(v);
  }
  s.uuid = get_string(j, "uuid");
  s.pci_bus_id = get_string(j, "pci.bus_id");
  s.name = get_string(j, "name");
  s.memory_total = get_memory(j, "memory.total_mib", "memory.total");
  s.memory_used = get_memory(j, "memory.used_mib", "memory.used");
  s.memory_free = get_memory(j, "memory.free_mib", "memory.free");
  s.memory_reserved = get_memory(j, "memory.reserved_mib", "memory.reserved");
  s.temperature_c = get_double(j, "temperature.gpu_c", "temperature.gpu");
  s.power_draw_w = get_double(j, "power.draw_w", "power.draw");
  s.power_limit_w = get_double(j, "power.limit_w", "power.limit");
  s.clock_sm_mhz = get_unsigned(j, "clocks.current.sm_mhz", "clocks.current.sm");
  s.clock_mem_mhz = get_unsigned(j, "clocks.current.memory_mhz", "clocks.current.memory");
  s.pcie_gen = get_unsigned(j, "pcie.link.gen.current");
  s.pcie_width = get_unsigned(j, "pcie.link.width.current");
  s.utilization_gpu_pct = get_unsigned(j, "utilization.gpu_pct", "utilization.gpu");
  s.utilization_mem_pct = get_unsigned(j, "utilization.memory_pct", "utilization.memory");
  s.pcie_rx_mb_s = get_double(j, "mgm.pcie.rx_mb_per_s", "mgm.pcie.rx");
  s.pcie_tx_mb_s = get_double(j, "mgm.pcie.tx_mb_per_s", "mgm.pcie.tx");
  s.nvlink_up = get_unsigned(j, "mgm.nvlink.up");
  s.pool_allocated = get_memory(j, "mgm.pool.allocated_mib", "mgm.pool.allocated");
  s.pool_reserved = get_memory(j, "mgm.pool.reserved_mib", "mgm.pool.reserved");
  if (const auto* ps = member(j, "processes")) {
    if (!ps->is_array()) throw bad_value{"processes: not an array"};
    for (const auto& p : *ps) {
      if (!p.is_object()) throw bad_value{"processes: an element is not an object"};
      process_sample ps_sample;
      const auto pid = get_unsigned(p, "pid");
      if (!pid) throw bad_value{"processes: an element has no pid"};
      ps_sample.pid = *pid;
      ps_sample.name = get_string(p, "process_name");
      ps_sample.used_bytes = get_memory(p, "used_gpu_memory_mib", "used_gpu_memory");
      s.processes.push_back(std::move(ps_sample));
    }
  }
  if (const auto* m = member(j, "missing")) {
    if (!m->is_array()) throw bad_value{"missing: not an array"};
    for (const auto& reason : *m) {
      if (!reason.is_string()) throw bad_value{"missing: an element is not a string"};
      s.missing.push_back(reason.get<std::string>());
    }
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// Prometheus
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// CSV
// ---------------------------------------------------------------------------------------------

std::string csv_header() {
  return "timestamp, index, uuid, name, memory.total [MiB], memory.used [MiB], memory.free [MiB], "
         "memory.reserved [MiB], temperature.gpu, power.draw [W], power.limit [W], clocks.current.sm [MHz], "
         "clocks.current.memory [MHz], pcie.link.gen.current, pcie.link.width.current, utilization.gpu [%], "
         "mgm.pcie.rx [MB/s], mgm.pcie.tx [MB/s], mgm.nvlink.up, mgm.pool.allocated [MiB], mgm.pool.reserved [MiB]";
}

std::string csv_row(const device_sample& s, bool units) {
  std::string row = format_smi_time(s.time);
  csv_cell c{units, row};
  c.sep();
  row += std::to_string(s.index);
  c.text(s.uuid);
  c.text(s.name);
  c.memory(s.memory_total);
  c.memory(s.memory_used);
  c.memory(s.memory_free);
  c.memory(s.memory_reserved);
  c.number(s.temperature_c, trimmed2, "");
  c.number(s.power_draw_w, fixed2, "W");
  c.number(s.power_limit_w, fixed2, "W");
  c.whole(s.clock_sm_mhz, "MHz");
  c.whole(s.clock_mem_mhz, "MHz");
  c.whole(s.pcie_gen, "");
  c.whole(s.pcie_width, "");
  c.whole(s.utilization_gpu_pct, "%");
  c.number(s.pcie_rx_mb_s, fixed2, "MB/s");
  c.number(s.pcie_tx_mb_s, fixed2, "MB/s");
  c.whole(s.nvlink_up, "");
  c.memory(s.pool_allocated);
  c.memory(s.pool_reserved);
  return row;
}

std::string process_csv_header() { return "timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]"; }

namespace {
std::string process_csv_row(clock::time_point time, const std::string& uuid, const process_sample& p, bool units) {
  std::string row = format_smi_time(time);
  csv_cell c{units, row};
  c.text(uuid);
  c.sep();
  row += std::to_string(p.pid);
  c.text(p.name);
  c.memory(p.used_bytes);
  return row;
}
}  // namespace

csv_sink::csv_sink(std::ostream& out, bool units) : out_{&out}, units_{units} {
  emit(*out_, csv_header() + '\n', "csv_sink");
}
csv_sink::csv_sink(const std::filesystem::path& path, bool units)
    : owned_{open_for_writing(path, "csv_sink")}, out_{owned_.get()}, units_{units} {
  emit(*out_, csv_header() + '\n', "csv_sink");
}
csv_sink::csv_sink(csv_sink&&) noexcept = default;
csv_sink& csv_sink::operator=(csv_sink&&) noexcept = default;
csv_sink::~csv_sink() = default;

void csv_sink::write(std::span<const device_sample> batch) {
  std::string text;
  for (const auto& s : batch) (text += csv_row(s, units_)) += '\n';
  emit(*out_, text, "csv_sink");
}

process_csv_sink::process_csv_sink(std::ostream& out, bool units) : out_{&out}, units_{units} {
  emit(*out_, process_csv_header() + '\n', "process_csv_sink");
}
process_csv_sink::process_csv_sink(const std::filesystem::path& path, bool units)
    : owned_{open_for_writing(path, "process_csv_sink")}, out_{owned_.get()}, units_{units} {
  emit(*out_, process_csv_header() + '\n', "process_csv_sink");
}
process_csv_sink::process_csv_sink(process_csv_sink&&) noexcept = default;
process_csv_sink& process_csv_sink::operator=(process_csv_sink&&) noexcept = default;
process_csv_sink::~process_csv_sink() = default;

void process_csv_sink::write(std::span<const device_sample> batch) {
  std::string text;
  for (const auto& s : batch) {
    for (const auto& p : s.processes) (text += process_csv_row(s.time, s.uuid, p, units_)) += '\n';
  }
  emit(*out_, text, "process_csv_sink");
}

void process_csv_sink::write(std::span<const process_row> rows) {
  std::string text;
  for (const auto& r : rows) (text += process_csv_row(r.time, r.gpu_uuid, r.process, units_)) += '\n';
  emit(*out_, text, "process_csv_sink");
}

// ---------------------------------------------------------------------------------------------
// JSON lines
// ---------------------------------------------------------------------------------------------

std::string to_json_line(const device_sample& s) {
  ordered j;
  j["timestamp"] = format_iso_time(s.time);
  j["index"] = s.index;
  if (!s.uuid.empty()) j["uuid"] = s.uuid;
  if (!s.pci_bus_id.empty()) j["pci.bus_id"] = s.pci_bus_id;
  j["name"] = s.name;
  put(j, "mgm.cuda_ordinal", s.cuda_ordinal);
  put_memory(j, "memory.total_mib", s.memory_total);
  put_memory(j, "memory.used_mib", s.memory_used);
  put_memory(j, "memory.free_mib", s.memory_free);
  put_memory(j, "memory.reserved_mib", s.memory_reserved);
  put(j, "temperature.gpu_c", s.temperature_c);
  put(j, "power.draw_w", s.power_draw_w);
  put(j, "power.limit_w", s.power_limit_w);
  put(j, "clocks.current.sm_mhz", s.clock_sm_mhz);
  put(j, "clocks.current.memory_mhz", s.clock_mem_mhz);
  put(j, "pcie.link.gen.current", s.pcie_gen);
  put(j, "pcie.link.width.current", s.pcie_width);
  put(j, "utilization.gpu_pct", s.utilization_gpu_pct);
  put(j, "utilization.memory_pct", s.utilization_mem_pct);
  put(j, "mgm.pcie.rx_mb_per_s", s.pcie_rx_mb_s);
  put(j, "mgm.pcie.tx_mb_per_s", s.pcie_tx_mb_s);
  put(j, "mgm.nvlink.up", s.nvlink_up);
  put_memory(j, "mgm.pool.allocated_mib", s.pool_allocated);
  put_memory(j, "mgm.pool.reserved_mib", s.pool_reserved);
  if (!s.processes.empty()) {
    auto& ps = j["processes"] = ordered::array();
    for (const auto& p : s.processes) {
      ordered o;
      o["pid"] = p.pid;
      o["process_name"] = p.name;
      put_memory(o, "used_gpu_memory_mib", p.used_bytes);
      ps.push_back(std::move(o));
    }
  }
  if (!s.missing.empty()) j["missing"] = s.missing;
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

// ---------------------------------------------------------------------------------------------
// Prometheus
// ---------------------------------------------------------------------------------------------

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
