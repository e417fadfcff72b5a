// `nvidia-smi -q` logs, in both of its forms: the XML of `-q -x` and the indented text of `-q`
// (whole, or one section such as `-q -d MEMORY`). With `-l N` nvidia-smi appends one document
// after another to the same file; each document is one time point of every GPU it lists.
//
// Both readers flatten a GPU's part of a document into `path -> value` pairs (`fb_memory_usage/used`
// in XML, `FB Memory Usage/Used` in text) and then build the sample from a table of paths per
// metric, so that the preference between spellings of one metric (old and new drivers) is written
// once per form. A path is the chain of elements (XML) or indented section names (text) below the
// GPU, so the memory of a MIG instance (`mig_devices/mig_device/fb_memory_usage/used`) is never
// taken for the GPU's.
//
// This header: what the two readers (smi_query_xml.cpp, smi_query_text.cpp) share: times, values
// with units, the table of paths per metric, and the builder of the log. Internal: not installed.
#pragma once

#include <mgm/error.hpp>
#include "text.hpp"

#include <mgm/telemetry/log_format.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace mgm::telemetry::smi_query_detail {

using detail::trim;

// ---------------------------------------------------------------------------------------------
// What both forms share
// ---------------------------------------------------------------------------------------------

// `Sat Mar  4 04:55:00 2023`: ctime's form, nvidia-smi's local time (taken as UTC, as every
// zone-less time of a log is).
inline std::optional<clock::time_point> parse_ctime(std::string_view text) {
  using namespace std::chrono;
  static constexpr std::array<std::string_view, 12> months{"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                           "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  std::vector<std::string_view> words;
  for (std::size_t p = 0; p < text.size();) {
    while (p < text.size() && (text[p] == ' ' || text[p] == '\t')) ++p;
    const std::size_t start = p;
    while (p < text.size() && text[p] != ' ' && text[p] != '\t') ++p;
    if (p > start) words.push_back(text.substr(start, p - start));
  }
  if (words.size() != 5) return std::nullopt;  // weekday month day HH:MM:SS year
  const auto month_it = std::find(months.begin(), months.end(), words[1]);
  if (month_it == months.end()) return std::nullopt;
  auto number = [](std::string_view s, int& out) {
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc{} && end == s.data() + s.size();
  };
  int day = 0;
  int y = 0;
  int hh = 0;
  int mm = 0;
  int ss = 0;
  const auto clock_text = words[3];
  if (!number(words[2], day) || !number(words[4], y) || clock_text.size() != 8 || clock_text[2] != ':' ||
      clock_text[5] != ':' || !number(clock_text.substr(0, 2), hh) || !number(clock_text.substr(3, 2), mm) ||
      !number(clock_text.substr(6, 2), ss)) {
    return std::nullopt;
  }
  const year_month_day date{year{y}, month{static_cast<unsigned>(month_it - months.begin() + 1)},
                            std::chrono::day{static_cast<unsigned>(day)}};
  if (y < 1700 || y > 2200 || !date.ok() || hh > 23 || mm > 59 || ss > 60) return std::nullopt;
  return clock::time_point{sys_days{date} + hours{hh} + minutes{mm} + seconds{ss}};
}

// A value that says "no value": empty metric, never 0.
inline bool no_value(std::string_view v) {
  if (v.size() >= 2 && v.front() == '[' && v.back() == ']') v = v.substr(1, v.size() - 2);
  return v.empty() || v == "N/A" || v == "n/a" || v == "Not Supported" || v == "Unknown Error" ||
         v == "Insufficient Permissions" || v == "Not Available";
}

enum class metric : std::uint8_t {
  name,
  uuid,
  bus_id,
  memory_total,
  memory_reserved,
  memory_used,
  memory_free,
  utilization_gpu,
  utilization_mem,
  temperature,
  power_draw,
  power_limit,
  clock_sm,
  clock_mem,
  pcie_gen,
  pcie_width,
  pcie_tx,
  pcie_rx,
};

// Where a form keeps one metric: its paths, most preferred first (the first with a value wins).
struct metric_paths {
  metric target;
  std::string_view csv_name;  // for `device_sample::missing`, in the CSV's spelling
  std::array<std::string_view, 3> paths;
};

struct value_at {
  std::string text;
  std::size_t line{0};
};

struct process_at {
  process_sample process;
  std::string used_text;  // read with the metrics, so that a bad one is an issue like them
  std::size_t line{0};
};

// One GPU of one document, flattened.
struct flat_gpu {
  std::size_t line{0};  // where the GPU starts
  std::string bus_id;   // from the section head (`GPU 00000000:07:00.0`, `<gpu id="...">`)
  std::map<std::string, value_at, std::less<>> values;  // the first value of each path
  std::vector<process_at> processes;

  void add(std::string path, std::string text, std::size_t line_number) {
    values.try_emplace(std::move(path), value_at{std::move(text), line_number});
  }
};

struct bad_value {
  std::size_t line;
  std::string message;
};

inline std::optional<std::uint64_t> memory_bytes(std::string_view text) {
  const auto n = detail::parse_number_and_unit(text);
  if (!n || n->value < 0) return std::nullopt;
  const auto factor = detail::bytes_per_memory_unit(n->unit);
  if (!factor) return std::nullopt;
  const double b = n->value * *factor;
  if (b >= 9.2e18) return std::nullopt;
  return static_cast<std::uint64_t>(std::llround(b));
}

inline std::optional<double> number_in(std::string_view text, std::initializer_list<std::string_view> units) {
  const auto n = detail::parse_number_and_unit(text);
  if (!n) return std::nullopt;
  if (!n->unit.empty() && std::find(units.begin(), units.end(), n->unit) == units.end()) return std::nullopt;
  return n->value;
}

inline std::optional<unsigned> whole_in(std::string_view text, std::initializer_list<std::string_view> units) {
  const auto v = number_in(text, units);
  if (!v || *v < 0 || *v > 4.0e9) return std::nullopt;
  return static_cast<unsigned>(std::lround(*v));
}

// Sets one metric from its text; false when the text is not a value of that metric.
inline bool set_metric(device_sample& s, metric m, std::string_view text) {
  switch (m) {
    case metric::name: s.name = std::string{text}; return true;
    case metric::uuid: s.uuid = std::string{text}; return true;
    case metric::bus_id: s.pci_bus_id = std::string{text}; return true;
    case metric::memory_total: return (s.memory_total = memory_bytes(text)).has_value();
    case metric::memory_reserved: return (s.memory_reserved = memory_bytes(text)).has_value();
    case metric::memory_used: return (s.memory_used = memory_bytes(text)).has_value();
    case metric::memory_free: return (s.memory_free = memory_bytes(text)).has_value();
    case metric::utilization_gpu: return (s.utilization_gpu_pct = whole_in(text, {"%"})).has_value();
    case metric::utilization_mem: return (s.utilization_mem_pct = whole_in(text, {"%"})).has_value();
    case metric::temperature: return (s.temperature_c = number_in(text, {"C"})).has_value();
    case metric::power_draw: return (s.power_draw_w = number_in(text, {"W"})).has_value();
    case metric::power_limit: return (s.power_limit_w = number_in(text, {"W"})).has_value();
    case metric::clock_sm: return (s.clock_sm_mhz = whole_in(text, {"MHz"})).has_value();
    case metric::clock_mem: return (s.clock_mem_mhz = whole_in(text, {"MHz"})).has_value();
    case metric::pcie_gen: return (s.pcie_gen = whole_in(text, {})).has_value();
    case metric::pcie_width: return (s.pcie_width = whole_in(text, {"x"})).has_value();
    case metric::pcie_tx:
    case metric::pcie_rx: {
      const auto n = detail::parse_number_and_unit(text);
      if (!n || n->value < 0) return false;
      double mb_s = 0;  // MB = 10^6 B, as NVML's KB/s are 10^3 B/s
      if (n->unit == "KB/s") {
        mb_s = n->value / 1000.0;
      } else if (n->unit == "MB/s") {
        mb_s = n->value;
      } else if (n->unit == "GB/s") {
        mb_s = n->value * 1000.0;
      } else {
        return false;
      }
      (m == metric::pcie_tx ? s.pcie_tx_mb_s : s.pcie_rx_mb_s) = mb_s;
      return true;
    }
  }
  return false;
}

// The sample of one flattened GPU, or why it cannot be read.
inline std::variant<device_sample, bad_value> build_sample(const flat_gpu& g, std::span<const metric_paths> table) {
  device_sample s;
  s.pci_bus_id = g.bus_id;
  for (const auto& entry : table) {
    const value_at* found = nullptr;
    std::string_view reason;
    for (const auto path : entry.paths) {
      if (path.empty()) break;
      const auto it = g.values.find(path);
      if (it == g.values.end()) continue;
      const std::string_view v = trim(it->second.text);
      if (no_value(v)) {
        if (reason.empty() && v != "N/A" && v != "[N/A]" && !v.empty()) reason = v;
        continue;
      }
      found = &it->second;
      break;
    }
    if (found == nullptr) {
      if (!reason.empty()) s.missing.push_back(std::string{entry.csv_name} + ": " + std::string{reason});
      continue;
    }
    const std::string_view v = trim(found->text);
    if (!set_metric(s, entry.target, v)) {
      return bad_value{found->line, std::string{entry.csv_name} + ": '" + std::string{v} + "' is not a value of it"};
    }
  }
  for (const auto& p : g.processes) {
    process_sample ps = p.process;
    const auto used = trim(p.used_text);
    if (!no_value(used)) {
      ps.used_bytes = memory_bytes(used);
      if (!ps.used_bytes) return bad_value{p.line, "used_memory: '" + std::string{used} + "' is not a memory size"};
    }
    s.processes.push_back(std::move(ps));
  }
  return s;
}

// Collects the samples of a log's documents: times, GPU numbers, issues.
class log_builder {
 public:
  log_builder(std::string format, std::string_view source, const log_read_options& options)
      : source_{source}, options_{options} {
    log_.format = std::move(format);
    log_.assumed_interval = options.assumed_interval;
  }

  void issue(std::size_t line, std::size_t column, std::string message) {
    if (options_.strict) throw parse_error::at(source_, line, column, message);
    log_.issues.push_back({line, std::move(message)});
  }

  // One document: its time (empty when it has none) and its GPUs in the order listed (which is
  // nvidia-smi's index order).
  void document(std::optional<clock::time_point> time, const std::vector<flat_gpu>& gpus,
                std::span<const metric_paths> table) {
    if (!time) {
      log_.has_timestamps = false;
      time = clock::time_point{std::chrono::duration_cast<clock::duration>(options_.assumed_interval *
                                                                           static_cast<double>(documents_))};
    }
    ++documents_;
    int index = 0;
    for (const auto& g : gpus) {
      auto built = build_sample(g, table);
      const int this_index = index++;
      if (auto* bad = std::get_if<bad_value>(&built)) {
        issue(bad->line, 0, std::move(bad->message));
        continue;
      }
      auto& s = std::get<device_sample>(built);
      s.index = this_index;
      s.time = *time;
      log_.samples.push_back(std::move(s));
    }
  }

  [[nodiscard]] std::size_t documents() const { return documents_; }
  gpu_log take() { return std::move(log_); }

 private:
  gpu_log log_;
  std::string_view source_;
  const log_read_options& options_;
  std::size_t documents_{0};
};

}  // namespace mgm::telemetry::smi_query_detail
