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
#include <mgm/error.hpp>

#include <mgm/telemetry/log_format.hpp>

#include <pugixml.hpp>

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

namespace mgm::telemetry {
namespace {

using detail::trim;

// ---------------------------------------------------------------------------------------------
// What both forms share
// ---------------------------------------------------------------------------------------------

// `Sat Mar  4 04:55:00 2023`: ctime's form, nvidia-smi's local time (taken as UTC, as every
// zone-less time of a log is).
std::optional<clock::time_point> parse_ctime(std::string_view text) {
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
bool no_value(std::string_view v) {
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

std::optional<std::uint64_t> memory_bytes(std::string_view text) {
  const auto n = detail::parse_number_and_unit(text);
  if (!n || n->value < 0) return std::nullopt;
  double factor = 0;
  const auto unit = n->unit;
  if (unit.empty() || unit == "MiB" || unit == "MB") {
    factor = 1024.0 * 1024.0;
  } else if (unit == "GiB" || unit == "GB") {
    factor = 1024.0 * 1024.0 * 1024.0;
  } else if (unit == "KiB" || unit == "KB") {
    factor = 1024.0;
  } else if (unit == "B") {
    factor = 1.0;
  } else {
    return std::nullopt;
  }
  const double b = n->value * factor;
  if (b >= 9.2e18) return std::nullopt;
  return static_cast<std::uint64_t>(std::llround(b));
}

std::optional<double> number_in(std::string_view text, std::initializer_list<std::string_view> units) {
  const auto n = detail::parse_number_and_unit(text);
  if (!n) return std::nullopt;
  if (!n->unit.empty() && std::find(units.begin(), units.end(), n->unit) == units.end()) return std::nullopt;
  return n->value;
}

std::optional<unsigned> whole_in(std::string_view text, std::initializer_list<std::string_view> units) {
  const auto v = number_in(text, units);
  if (!v || *v < 0 || *v > 4.0e9) return std::nullopt;
  return static_cast<unsigned>(std::lround(*v));
}

// Sets one metric from its text; false when the text is not a value of that metric.
bool set_metric(device_sample& s, metric m, std::string_view text) {
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
std::variant<device_sample, bad_value> build_sample(const flat_gpu& g, std::span<const metric_paths> table) {
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

// ---------------------------------------------------------------------------------------------
// XML (`nvidia-smi -q -x`)
// ---------------------------------------------------------------------------------------------

// Paths below `<gpu>`. Drivers from 535 on moved power into `gpu_power_readings` and renamed the
// limit `current_power_limit`; 545 on split the draw into `average_power_draw` and
// `instant_power_draw`.
constexpr std::array<metric_paths, 18> xml_table{{
    {metric::name, "name", {"product_name"}},
    {metric::uuid, "uuid", {"uuid"}},
    {metric::bus_id, "pci.bus_id", {"pci/pci_bus_id"}},
    {metric::memory_total, "memory.total", {"fb_memory_usage/total"}},
    {metric::memory_reserved, "memory.reserved", {"fb_memory_usage/reserved"}},
    {metric::memory_used, "memory.used", {"fb_memory_usage/used"}},
    {metric::memory_free, "memory.free", {"fb_memory_usage/free"}},
    {metric::utilization_gpu, "utilization.gpu", {"utilization/gpu_util"}},
    {metric::utilization_mem, "utilization.memory", {"utilization/memory_util"}},
    {metric::temperature, "temperature.gpu", {"temperature/gpu_temp"}},
    {metric::power_draw,
     "power.draw",
     {"power_readings/power_draw", "gpu_power_readings/power_draw", "gpu_power_readings/average_power_draw"}},
    {metric::power_limit,
     "power.limit",
     {"power_readings/power_limit", "gpu_power_readings/current_power_limit", "power_readings/enforced_power_limit"}},
    {metric::clock_sm, "clocks.sm", {"clocks/sm_clock"}},
    {metric::clock_mem, "clocks.mem", {"clocks/mem_clock"}},
    {metric::pcie_gen, "pcie.link.gen.current", {"pci/pci_gpu_link_info/pcie_gen/current_link_gen"}},
    {metric::pcie_width, "pcie.link.width.current", {"pci/pci_gpu_link_info/link_widths/current_link_width"}},
    {metric::pcie_tx, "pcie.tx", {"pci/tx_util"}},
    {metric::pcie_rx, "pcie.rx", {"pci/rx_util"}},
}};

// Line numbers of offsets into the whole text.
class line_index {
 public:
  explicit line_index(std::string_view text) {
    starts_.push_back(0);
    for (std::size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '\n') starts_.push_back(i + 1);
    }
  }
  [[nodiscard]] std::size_t line_of(std::size_t offset) const {
    return static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), offset) - starts_.begin());
  }
  [[nodiscard]] std::size_t column_of(std::size_t offset) const { return offset - starts_[line_of(offset) - 1] + 1; }

 private:
  std::vector<std::size_t> starts_;
};

std::string element_text(const pugi::xml_node& n) { return std::string{trim(n.child_value())}; }

// Every element with text below `node`, by path; `processes` and `supported_clocks` (hundreds of
// entries nobody samples) are not walked.
void flatten(const pugi::xml_node& node, const std::string& prefix, flat_gpu& out, const line_index& lines,
             std::size_t base, int depth) {
  if (depth > 32) return;
  for (const auto& child : node.children()) {
    if (child.type() != pugi::node_element) continue;
    const std::string name = child.name();
    if (depth == 0 && (name == "processes" || name == "supported_clocks" || name == "accounted_processes")) continue;
    const std::string path = prefix.empty() ? name : prefix + '/' + name;
    if (child.first_child().type() == pugi::node_element) {
      flatten(child, path, out, lines, base, depth + 1);
    } else {
      out.add(path, element_text(child), lines.line_of(base + static_cast<std::size_t>(child.offset_debug())));
    }
  }
}

// The documents of a `-q -x -l` file: each starts at `<?xml` (or, without a declaration, at its
// root element). Offsets into `text`.
std::vector<std::pair<std::size_t, std::size_t>> xml_documents(std::string_view text) {
  std::vector<std::size_t> starts;
  for (std::size_t p = text.find("<?xml"); p != std::string_view::npos; p = text.find("<?xml", p + 5)) starts.push_back(p);
  if (starts.empty()) {
    for (std::size_t p = text.find("<nvidia_smi_log"); p != std::string_view::npos;
         p = text.find("<nvidia_smi_log", p + 15)) {
      starts.push_back(p);
    }
  }
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (std::size_t i = 0; i < starts.size(); ++i) {
    out.emplace_back(starts[i], i + 1 < starts.size() ? starts[i + 1] : text.size());
  }
  return out;
}

}  // namespace

gpu_log read_smi_query_xml(std::string_view text, const log_read_options& options) {
  // NUL bytes (a preallocated file) are not XML; drop them as every reader does.
  std::string clean;
  if (text.find('\0') != std::string_view::npos) {
    clean.reserve(text.size());
    for (const char c : text) {
      if (c != '\0') clean.push_back(c);
    }
    text = clean;
  }
  const line_index lines{text};
  log_builder builder{"nvidia-smi-xml", "nvidia-smi XML", options};
  const auto docs = xml_documents(text);
  if (docs.empty()) {
    throw parse_error::at("nvidia-smi XML", 1, 0, "no <nvidia_smi_log> document (the output of nvidia-smi -q -x)");
  }
  for (const auto& [begin, end] : docs) {
    const std::string_view chunk = text.substr(begin, end - begin);
    pugi::xml_document doc;
    const auto result = doc.load_buffer(chunk.data(), chunk.size(), pugi::parse_default, pugi::encoding_utf8);
    if (!result) {
      const auto at = begin + static_cast<std::size_t>(std::max<std::ptrdiff_t>(result.offset, 0));
      builder.issue(lines.line_of(at), lines.column_of(at),
                    std::string{"not well-formed XML ("} + result.description() +
                        "); a document cut short where logging stopped?");
      continue;
    }
    const auto root = doc.document_element();
    if (std::string_view{root.name()} != "nvidia_smi_log") {
      builder.issue(lines.line_of(begin + static_cast<std::size_t>(root.offset_debug())), 0,
                    std::string{"root element <"} + root.name() + "> is not <nvidia_smi_log>");
      continue;
    }
    std::optional<clock::time_point> time;
    if (const auto ts = root.child("timestamp")) {
      const auto t = element_text(ts);
      time = parse_ctime(t);
      if (!time) time = parse_log_time(t);
      if (!time) {
        builder.issue(lines.line_of(begin + static_cast<std::size_t>(ts.offset_debug())), 0,
                      "timestamp: '" + t + "' is not a time");
        continue;
      }
    }
    std::vector<flat_gpu> gpus;
    for (const auto& gpu : root.children("gpu")) {
      flat_gpu g;
      g.line = lines.line_of(begin + static_cast<std::size_t>(gpu.offset_debug()));
      g.bus_id = gpu.attribute("id").value();
      flatten(gpu, "", g, lines, begin, 0);
      for (const auto& info : gpu.child("processes").children("process_info")) {
        process_at p;
        p.line = lines.line_of(begin + static_cast<std::size_t>(info.offset_debug()));
        const auto pid_text = element_text(info.child("pid"));
        std::uint32_t pid = 0;
        const auto [ptr, ec] = std::from_chars(pid_text.data(), pid_text.data() + pid_text.size(), pid);
        if (ec != std::errc{} || ptr != pid_text.data() + pid_text.size()) continue;  // no process id: not a process
        p.process.pid = pid;
        p.process.name = element_text(info.child("process_name"));
        p.used_text = element_text(info.child("used_memory"));
        g.processes.push_back(std::move(p));
      }
      gpus.push_back(std::move(g));
    }
    builder.document(time, gpus, xml_table);
  }
  return builder.take();
}

namespace {

// ---------------------------------------------------------------------------------------------
// Text (`nvidia-smi -q`, `-q -d MEMORY,...`)
// ---------------------------------------------------------------------------------------------

// Paths below `GPU <bus id>`, as section names joined by `/`. Newer drivers say `GPU Power
// Readings`, `Current Power Limit`, `Average Power Draw`.
constexpr std::array<metric_paths, 18> text_table{{
    {metric::name, "name", {"Product Name"}},
    {metric::uuid, "uuid", {"GPU UUID"}},
    {metric::bus_id, "pci.bus_id", {"PCI/Bus Id"}},
    {metric::memory_total, "memory.total", {"FB Memory Usage/Total"}},
    {metric::memory_reserved, "memory.reserved", {"FB Memory Usage/Reserved"}},
    {metric::memory_used, "memory.used", {"FB Memory Usage/Used"}},
    {metric::memory_free, "memory.free", {"FB Memory Usage/Free"}},
    {metric::utilization_gpu, "utilization.gpu", {"Utilization/Gpu", "Utilization/GPU"}},
    {metric::utilization_mem, "utilization.memory", {"Utilization/Memory"}},
    {metric::temperature, "temperature.gpu", {"Temperature/GPU Current Temp"}},
    {metric::power_draw,
     "power.draw",
     {"Power Readings/Power Draw", "GPU Power Readings/Power Draw", "GPU Power Readings/Average Power Draw"}},
    {metric::power_limit,
     "power.limit",
     {"Power Readings/Power Limit", "GPU Power Readings/Current Power Limit", "Power Readings/Enforced Power Limit"}},
    {metric::clock_sm, "clocks.sm", {"Clocks/SM"}},
    {metric::clock_mem, "clocks.mem", {"Clocks/Memory"}},
    {metric::pcie_gen, "pcie.link.gen.current", {"PCI/GPU Link Info/PCIe Generation/Current"}},
    {metric::pcie_width, "pcie.link.width.current", {"PCI/GPU Link Info/Link Width/Current"}},
    {metric::pcie_tx, "pcie.tx", {"PCI/Tx Throughput"}},
    {metric::pcie_rx, "pcie.rx", {"PCI/Rx Throughput"}},
}};

std::size_t indent_of(std::string_view line) {
  std::size_t width = 0;
  for (const char c : line) {
    if (c == ' ') {
      ++width;
    } else if (c == '\t') {
      width += 4;
    } else {
      break;
    }
  }
  return width;
}

// `GPU 00000000:07:00.0` (domain of 4 or 8 hex digits, as older drivers print `0000:01:00.0`).
std::optional<std::string_view> gpu_head(std::string_view body) {
  if (body.size() < 4 || body.substr(0, 4) != "GPU ") return std::nullopt;
  const auto id = trim(body.substr(4));
  const auto colon = id.find(':');
  if (colon == std::string_view::npos || (colon != 4 && colon != 8) || id.find(' ') != std::string_view::npos) {
    return std::nullopt;
  }
  for (std::size_t i = 0; i < colon; ++i) {
    if (std::isxdigit(static_cast<unsigned char>(id[i])) == 0) return std::nullopt;
  }
  return id;
}

bool banner(std::string_view body) { return body.find("NVSMI LOG") != std::string_view::npos && body.front() == '='; }

}  // namespace

bool detail::is_smi_query_text_line(std::string_view line) noexcept {
  const auto body = trim(line);
  if (body.empty()) return false;
  if (banner(body)) return true;
  return indent_of(line) == 0 && gpu_head(body).has_value();
}

gpu_log read_smi_query_text(std::string_view text, const log_read_options& options) {
  log_builder builder{"nvidia-smi-q", "nvidia-smi -q", options};
  struct open_section {
    std::size_t indent;
    std::string name;
  };
  std::vector<open_section> stack;  // the sections the current line is inside, below the GPU
  std::vector<flat_gpu> gpus;
  std::optional<clock::time_point> time;
  bool in_document = false;
  bool in_gpu = false;
  bool any = false;

  bool bad_time = false;  // a document whose Timestamp cannot be read is left out (lenient mode)
  auto close_document = [&] {
    if (in_document && !gpus.empty() && !bad_time) builder.document(time, gpus, text_table);
    gpus.clear();
    time.reset();
    bad_time = false;
    in_gpu = false;
    in_document = false;
  };

  for (const auto& line : detail::split_log_lines(text)) {
    const std::string_view body = trim(line.text);
    if (body.empty()) continue;
    const std::size_t indent = indent_of(line.text);
    if (banner(body)) {
      close_document();
      in_document = true;
      any = true;
      continue;
    }
    const auto colon = body.find(':');
    const std::string_view key = trim(body.substr(0, colon));
    const std::string_view value = colon == std::string_view::npos ? std::string_view{} : trim(body.substr(colon + 1));
    if (indent == 0) {
      if (const auto id = gpu_head(body)) {
        if (!in_document) {  // a paste without the banner
          in_document = true;
          any = true;
        }
        flat_gpu g;
        g.line = line.number;
        g.bus_id = std::string{*id};
        gpus.push_back(std::move(g));
        stack.clear();
        in_gpu = true;
        continue;
      }
      in_gpu = false;
      if (key == "Timestamp" && colon != std::string_view::npos) {
        // A timestamp after GPUs starts the next document even without the banner.
        if (!gpus.empty()) close_document();
        in_document = true;
        any = true;
        time = parse_ctime(value);
        if (!time) time = parse_log_time(value);
        if (!time) {
          builder.issue(line.number, 0, "Timestamp: '" + std::string{value} + "' is not a time");
          bad_time = true;
        }
      }
      continue;  // Driver Version, CUDA Version, Attached GPUs, or text around a paste
    }
    if (!in_gpu) continue;
    while (!stack.empty() && stack.back().indent >= indent) stack.pop_back();
    std::string path;
    for (const auto& s : stack) {
      path += s.name;
      path += '/';
    }
    path += key;
    stack.push_back({indent, std::string{key}});
    if (colon == std::string_view::npos) continue;  // a section head
    auto& g = gpus.back();
    if (path == "Processes/Process ID") {
      process_at p;
      p.line = line.number;
      std::uint32_t pid = 0;
      const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), pid);
      if (ec != std::errc{} || ptr != value.data() + value.size()) {
        builder.issue(line.number, 0, "Process ID: '" + std::string{value} + "' is not a process id");
        continue;
      }
      p.process.pid = pid;
      g.processes.push_back(std::move(p));
    } else if (path == "Processes/Process ID/Name" && !g.processes.empty()) {
      g.processes.back().process.name = std::string{value};
    } else if (path == "Processes/Process ID/Used GPU Memory" && !g.processes.empty()) {
      g.processes.back().used_text = std::string{value};
    } else {
      g.add(std::move(path), std::string{value}, line.number);
    }
  }
  close_document();
  if (!any) {
    throw parse_error::at("nvidia-smi -q", 1, 0,
                          "no '==============NVSMI LOG==============' banner and no 'GPU 00000000:xx:00.0' section");
  }
  return builder.take();
}

}  // namespace mgm::telemetry
