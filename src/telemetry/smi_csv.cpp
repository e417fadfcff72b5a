// nvidia-smi CSV logs as people keep them: `--query-gpu` with or without units and header, a
// script's own columns, a human table before the CSV (or pasted with `|`, tabs or aligned blanks),
// NUL runs, GPUs interleaved; and `--query-compute-apps`.
#include <mgm/error.hpp>
#include "../detail/text.hpp"
#include "log_internal.hpp"

#include <mgm/telemetry/log_format.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <istream>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace mgm::telemetry {

using detail::trim;

// ---------------------------------------------------------------------------------------------
// nvidia-smi CSV
// ---------------------------------------------------------------------------------------------

namespace {

enum class field : std::uint8_t {
  none,
  timestamp,
  index,
  gpu,
  name,
  uuid,
  bus_id,
  memory_total,
  memory_used,
  memory_free,
  memory_reserved,
  temperature,
  power_draw,
  power_limit,
  clock_sm,
  clock_mem,
  pcie_gen,
  pcie_width,
  utilization_gpu,
  utilization_mem,
  pcie_rx,
  pcie_tx,
  nvlink_up,
  pool_allocated,
  pool_reserved,
  pid,
  process_name,
  used_memory,
  count
};

struct alias {
  std::string_view name;  // lower case, `_` written as `.`, no unit
  field target;
  int rank;  // the lower, the more preferred when several columns fill one field
};

constexpr std::array aliases{
    alias{"timestamp", field::timestamp, 0},
    alias{"time", field::timestamp, 1},
    alias{"index", field::index, 0},
    alias{"gpu", field::gpu, 0},
    alias{"gpu.id", field::gpu, 0},
    alias{"gpu.index", field::gpu, 0},
    alias{"name", field::name, 0},
    alias{"gpu.name", field::name, 1},
    alias{"uuid", field::uuid, 0},
    alias{"gpu.uuid", field::uuid, 1},
    alias{"pci.bus.id", field::bus_id, 0},
    alias{"gpu.bus.id", field::bus_id, 1},
    alias{"memory.total", field::memory_total, 0},
    alias{"memory.used", field::memory_used, 0},
    alias{"memory.free", field::memory_free, 0},
    alias{"memory.reserved", field::memory_reserved, 0},
    alias{"temperature.gpu", field::temperature, 0},
    alias{"power.draw", field::power_draw, 0},
    alias{"power.draw.average", field::power_draw, 1},
    alias{"power.draw.instant", field::power_draw, 2},
    alias{"power.limit", field::power_limit, 0},
    alias{"enforced.power.limit", field::power_limit, 1},
    alias{"clocks.sm", field::clock_sm, 0},
    alias{"clocks.current.sm", field::clock_sm, 0},
    alias{"clocks.mem", field::clock_mem, 0},
    alias{"clocks.current.memory", field::clock_mem, 0},
    alias{"pcie.link.gen.current", field::pcie_gen, 0},
    alias{"pcie.link.gen.gpucurrent", field::pcie_gen, 1},
    alias{"pcie.link.width.current", field::pcie_width, 0},
    alias{"utilization.gpu", field::utilization_gpu, 0},
    alias{"utilization.memory", field::utilization_mem, 0},
    alias{"utilization.mem", field::utilization_mem, 0},
    alias{"mgm.pcie.rx", field::pcie_rx, 0},
    alias{"mgm.pcie.tx", field::pcie_tx, 0},
    alias{"mgm.nvlink.up", field::nvlink_up, 0},
    alias{"mgm.pool.allocated", field::pool_allocated, 0},
    alias{"mgm.pool.reserved", field::pool_reserved, 0},
    alias{"pid", field::pid, 0},
    alias{"process.name", field::process_name, 0},
    alias{"used.gpu.memory", field::used_memory, 0},
    alias{"used.memory", field::used_memory, 1},
};

// Unit suffixes of scripts' own column names (`memory_used_mib`), with the unit they stand for.
constexpr std::array<std::pair<std::string_view, std::string_view>, 7> name_units{{
    {".mib", "MiB"},
    {".mb", "MiB"},
    {".gib", "GiB"},
    {".pct", "%"},
    {".mhz", "MHz"},
    {".w", "W"},
    {".c", "C"},
}};

struct column {
  std::string spelled;  // as in the header, trimmed
  field target{field::none};
  int rank{0};
  std::string unit;  // from `[unit]` or a name suffix
};

const alias* find_alias(std::string_view name) {
  for (const auto& a : aliases) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

column classify(std::string_view spelled) {
  column c;
  c.spelled = std::string{trim(spelled)};
  std::string_view base = c.spelled;
  if (const auto open = base.find('['); open != std::string_view::npos) {
    const auto close = base.find(']', open);
    c.unit = std::string{trim(base.substr(open + 1, close == std::string_view::npos ? std::string_view::npos : close - open - 1))};
    base = trim(base.substr(0, open));
  }
  std::string key;
  key.reserve(base.size());
  for (const char ch : base) {
    key.push_back(ch == '_' ? '.' : static_cast<char>(std::tolower(static_cast<unsigned char>(ch))));
  }
  const alias* a = find_alias(key);
  if (a == nullptr) {
    for (const auto& [suffix, unit] : name_units) {
      if (key.size() > suffix.size() && key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0) {
        a = find_alias(std::string_view{key}.substr(0, key.size() - suffix.size()));
        if (a != nullptr) {
          if (c.unit.empty()) c.unit = std::string{unit};
          break;
        }
      }
    }
  }
  if (a != nullptr) {
    c.target = a->target;
    c.rank = a->rank;
  }
  return c;
}

// What separates the fields of a table: nvidia-smi's commas, or what a paste has instead.
enum class separator : std::uint8_t { comma, bar, tab, blanks };

// The trimmed fields of `line` (views into it) as `sep` separates them. `bar`: the outer bars are
// optional; `tab`: a run of tabs is one separator (tables aligned with several); `blanks`: a tab,
// or a run of two spaces or more (one space stays inside a value: `1094 MiB`).
std::vector<std::string_view> split_fields(std::string_view line, separator sep = separator::comma) {
  if (sep == separator::comma) return mgm::detail::split_trimmed_fields(line);
  std::string_view body = trim(line);
  std::vector<std::string_view> out;
  if (sep == separator::bar) {
    if (!body.empty() && body.front() == '|') body.remove_prefix(1);
    if (!body.empty() && body.back() == '|') body.remove_suffix(1);
    for (std::size_t start = 0;;) {
      const auto bar = body.find('|', start);
      out.push_back(trim(body.substr(start, bar == std::string_view::npos ? std::string_view::npos : bar - start)));
      if (bar == std::string_view::npos) break;
      start = bar + 1;
    }
    return out;
  }
  std::size_t start = 0;
  std::size_t i = 0;
  while (i < body.size()) {
    std::size_t run = i;
    bool has_tab = false;
    for (; run < body.size() && (body[run] == ' ' || body[run] == '\t'); ++run) {
      if (body[run] == '\t') has_tab = true;
    }
    const std::size_t width = run - i;
    const bool splits = sep == separator::tab ? has_tab : (has_tab || width >= 2);
    if (width > 0 && splits) {
      out.push_back(trim(body.substr(start, i - start)));
      start = run;
    }
    i = width > 0 ? run : i + 1;
  }
  out.push_back(trim(body.substr(start)));
  return out;
}

// A Markdown or hand-drawn rule under a table's header: `|---|:---:|`, `-----  ----`.
bool rule_line(std::string_view body) {
  return body.size() >= 3 && body.find_first_not_of("-=+|: \t") == std::string_view::npos &&
         body.find_first_of("-=") != std::string_view::npos;
}

// The separators a line without commas might use, most likely first.
std::vector<separator> other_separators(std::string_view line) {
  std::vector<separator> out;
  if (line.find('|') != std::string_view::npos) {
    out.push_back(separator::bar);
    return out;  // a `|` inside a blank-separated field is a table border: not a header
  }
  if (line.find('\t') != std::string_view::npos) out.push_back(separator::tab);
  out.push_back(separator::blanks);
  return out;
}

bool starts_like_number(std::string_view s) {
  return !s.empty() && (std::isdigit(static_cast<unsigned char>(s.front())) != 0 || s.front() == '-' ||
                        s.front() == '+' || s.front() == '.');
}

// A header: two names or more, none empty, a number or a bracketed value, `min_known` of them
// known columns (two for a table without commas: a human nvidia-smi table has `Name` in it).
std::optional<std::vector<column>> as_header(const std::vector<std::string_view>& fields, int min_known = 1) {
  if (fields.size() < 2) return std::nullopt;
  std::vector<column> columns;
  int known = 0;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const auto f = fields[i];
    if (f.empty()) {
      if (i + 1 == fields.size() && i >= 2) break;  // a trailing comma
      return std::nullopt;
    }
    if (starts_like_number(f) || f.front() == '[') return std::nullopt;
    columns.push_back(classify(f));
    if (columns.back().target != field::none) ++known;
  }
  if (known < min_known) return std::nullopt;
  return columns;
}

struct header_found {
  std::vector<column> columns;
  separator sep;
};

// The line as a header with commas, else with the separator of a pasted table.
std::optional<header_found> find_header(std::string_view line) {
  if (line.find(',') != std::string_view::npos) {
    if (auto h = as_header(split_fields(line))) return header_found{std::move(*h), separator::comma};
    return std::nullopt;
  }
  for (const auto sep : other_separators(line)) {
    if (auto h = as_header(split_fields(line, sep), 2)) return header_found{std::move(*h), sep};
  }
  return std::nullopt;
}

bool is_missing(std::string_view v) {
  return v.empty() || (v.front() == '[' && v.back() == ']') || v == "N/A" || v == "n/a" || v == "NA" ||
         v == "Not Supported";
}

// The reader's view of one header.
struct layout {
  std::vector<column> columns;
  std::size_t line{0};
  // Per field, its columns in preference order.
  std::array<std::vector<std::size_t>, static_cast<std::size_t>(field::count)> by_field;
  bool apps{false};
  bool has_time{false};
  bool mgm{false};
  separator sep{separator::comma};
  bool sep_known{true};  // false for `options.columns`: the first row tells

  explicit layout(std::vector<column> cols, std::size_t at, separator s = separator::comma)
      : columns{std::move(cols)}, line{at}, sep{s} {
    for (std::size_t i = 0; i < columns.size(); ++i) {
      if (columns[i].target != field::none) by_field[static_cast<std::size_t>(columns[i].target)].push_back(i);
      if (columns[i].spelled.size() >= 4 && (columns[i].spelled.compare(0, 4, "mgm.") == 0)) mgm = true;
    }
    for (auto& list : by_field) {
      std::stable_sort(list.begin(), list.end(), [&](std::size_t a, std::size_t b) { return columns[a].rank < columns[b].rank; });
    }
    apps = has(field::pid);
    has_time = has(field::timestamp);
  }
  [[nodiscard]] bool has(field f) const { return !by_field[static_cast<std::size_t>(f)].empty(); }
  [[nodiscard]] const std::vector<std::size_t>& of(field f) const { return by_field[static_cast<std::size_t>(f)]; }
};

// A bad line: its message and the 1-based column in the (NUL-free) line, 0 when none.
struct line_error {
  std::string message;
  std::size_t column{0};
};

class row_reader {
 public:
  row_reader(const layout& l, const std::string& text, std::vector<std::string_view> fields)
      : layout_{l}, text_{text}, fields_{std::move(fields)} {}

  std::optional<line_error> error;

  // The first non-missing value among the field's columns, or empty.
  std::optional<std::string_view> raw(field f) {
    for (const auto i : layout_.of(f)) {
      const auto v = fields_[i];
      if (!is_missing(v)) {
        column_ = i;
        return v;
      }
      if (v.size() > 2 && v != "[N/A]" && v.front() == '[') missing_.push_back(metric_name(i) + ": " + std::string{v});
    }
    return std::nullopt;
  }

  std::optional<double> number(field f, std::initializer_list<std::string_view> units) {
    const auto v = raw(f);
    if (!v || error) return std::nullopt;
    const auto n = detail::parse_number_and_unit(*v);
    if (!n) return fail("'" + std::string{*v} + "' is not a number");
    if (!n->unit.empty() && std::find(units.begin(), units.end(), n->unit) == units.end()) {
      return fail("unexpected unit in '" + std::string{*v} + "'");
    }
    return n->value;
  }

  std::optional<unsigned> whole(field f, std::initializer_list<std::string_view> units) {
    const auto v = number(f, units);
    if (!v) return std::nullopt;
    if (*v < 0 || *v > 4.3e9 || std::lround(*v) > static_cast<long>(std::numeric_limits<unsigned>::max())) {
      fail("'" + std::string{fields_[column_]} + "' is out of range");
      return std::nullopt;
    }
    return static_cast<unsigned>(std::lround(*v));
  }

  std::optional<std::uint64_t> bytes(field f) {
    const auto v = raw(f);
    if (!v || error) return std::nullopt;
    const auto n = detail::parse_number_and_unit(*v);
    if (!n) return fail_bytes("'" + std::string{*v} + "' is not a memory size");
    const std::string_view unit = n->unit.empty() ? std::string_view{layout_.columns[column_].unit} : n->unit;
    const auto factor = detail::bytes_per_memory_unit(unit);
    if (!factor) return fail_bytes("unexpected unit in '" + std::string{*v} + "'");
    const double b = n->value * *factor;
    if (b < 0 || b >= 9.2e18) return fail_bytes("'" + std::string{*v} + "' is out of range");
    return static_cast<std::uint64_t>(std::llround(b));
  }

  std::string text(field f) {
    const auto v = raw(f);
    return v ? std::string{*v} : std::string{};
  }

  std::vector<std::string> take_missing() { return std::move(missing_); }

 private:
  std::string metric_name(std::size_t i) const {
    const std::string& s = layout_.columns[i].spelled;
    const auto open = s.find(" [");
    return open == std::string::npos ? s : s.substr(0, open);
  }
  std::nullopt_t fail(std::string message) {
    if (!error) error = line_error{layout_.columns[column_].spelled + ": " + std::move(message), column_of(column_)};
    return std::nullopt;
  }
  std::optional<std::uint64_t> fail_bytes(std::string message) { return fail(std::move(message)); }
  std::size_t column_of(std::size_t field_index) const {
    if (field_index >= fields_.size() || fields_[field_index].empty()) return 0;
    return static_cast<std::size_t>(fields_[field_index].data() - text_.data()) + 1;
  }

  const layout& layout_;
  const std::string& text_;
  std::vector<std::string_view> fields_;
  std::vector<std::string> missing_;
  std::size_t column_{0};
};

[[noreturn]] void fail_csv(std::size_t line, std::size_t column, const std::string& why) {
  throw parse_error::at("nvidia-smi CSV", line, column, why);
}

}  // namespace

bool detail::is_smi_table_header(std::string_view line) { return find_header(line).has_value(); }

gpu_log read_smi_csv(std::string_view text, const log_read_options& options) {
  gpu_log log;
  log.format = "nvidia-smi-csv";
  log.assumed_interval = options.assumed_interval;
  const auto lines = detail::split_log_lines(text);

  std::optional<layout> current;
  if (!options.columns.empty()) {
    std::vector<column> cols;
    for (const auto& c : options.columns) cols.push_back(classify(c));
    current.emplace(std::move(cols), 0);
    current->sep_known = false;
    if (!current->has(field::timestamp)) log.has_timestamps = false;
    if (current->mgm) log.format = "mgm-csv";
  }
  std::map<std::string, std::size_t> rows_per_gpu;      // for logs without timestamps
  std::map<std::string, int> first_seen;                 // GPU numbers when there is no index column

  auto issue = [&](const detail::log_line& line, line_error e) {
    if (options.strict) fail_csv(line.number, e.column, e.message);
    log.issues.push_back({line.number, std::move(e.message)});
  };

  for (const auto& line : lines) {
    const std::string_view body = trim(line.text);
    if (body.empty() || body.front() == '#') continue;
    if (auto head = find_header(line.text)) {
      if (options.columns.empty()) {
        current.emplace(std::move(head->columns), line.number, head->sep);
        if (!current->has(field::timestamp)) log.has_timestamps = false;
        if (current->mgm) log.format = "mgm-csv";
      }
      continue;  // with `columns` given, the file's header is skipped
    }
    if (!current) continue;  // before the header: a human table, a banner
    if (!current->sep_known) {
      current->sep = body.find(',') != std::string_view::npos ? separator::comma : other_separators(body).front();
      current->sep_known = true;
    }
    const auto& l = *current;
    if (l.sep != separator::comma && rule_line(body)) continue;
    auto fields = split_fields(line.text, l.sep);
    std::size_t count = fields.size();
    if (count == l.columns.size() + 1 && fields.back().empty()) --count;  // a trailing comma
    if (count != l.columns.size()) {
      std::string why = "expected " + std::to_string(l.columns.size()) + " fields";
      if (l.line > 0) why += " (as the header on line " + std::to_string(l.line) + ")";
      why += ", found " + std::to_string(count);
      if (line.had_nul) why += " (NUL bytes cut the line)";
      issue(line, {why, 0});
      continue;
    }
    fields.resize(count);
    row_reader r{l, line.text, std::move(fields)};

    std::optional<clock::time_point> time;
    if (l.has_time) {
      const auto t = r.raw(field::timestamp);
      if (!t) {
        issue(line, {"no timestamp", 0});
        continue;
      }
      time = parse_log_time(*t);
      if (!time) {
        issue(line, {"'" + std::string{*t} + "' is not a timestamp", 0});
        continue;
      }
    }

    if (l.apps) {
      process_row row;
      row.time = time.value_or(clock::time_point{});
      row.gpu_uuid = r.text(field::uuid);
      const auto pid = r.raw(field::pid);
      std::uint32_t value = 0;
      if (!pid) {
        issue(line, {"no pid", 0});
        continue;
      }
      const auto [end, ec] = std::from_chars(pid->data(), pid->data() + pid->size(), value);
      if (ec != std::errc{} || end != pid->data() + pid->size()) {
        issue(line, {"pid: '" + std::string{*pid} + "' is not a process id", 0});
        continue;
      }
      row.process.pid = value;
      row.process.name = r.text(field::process_name);
      row.process.used_bytes = r.bytes(field::used_memory);
      if (r.error) {
        issue(line, *r.error);
        continue;
      }
      log.process_rows.push_back(std::move(row));
      continue;
    }

    device_sample s;
    s.name = r.text(field::name);
    s.uuid = r.text(field::uuid);
    s.pci_bus_id = r.text(field::bus_id);
    const field index_field = l.has(field::gpu) ? field::gpu : field::index;
    std::optional<int> index;
    if (l.has(index_field)) {
      const auto v = r.raw(index_field);
      int value = 0;
      if (!v) {
        issue(line, {"no GPU index", 0});
        continue;
      }
      const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), value);
      if (ec != std::errc{} || end != v->data() + v->size() || value < 0) {
        issue(line, {"'" + std::string{*v} + "' is not a GPU index", 0});
        continue;
      }
      index = value;
    }
    s.memory_total = r.bytes(field::memory_total);
    s.memory_used = r.bytes(field::memory_used);
    s.memory_free = r.bytes(field::memory_free);
    s.memory_reserved = r.bytes(field::memory_reserved);
    s.temperature_c = r.number(field::temperature, {"C", "\xC2\xB0" "C"});
    s.power_draw_w = r.number(field::power_draw, {"W"});
    s.power_limit_w = r.number(field::power_limit, {"W"});
    s.clock_sm_mhz = r.whole(field::clock_sm, {"MHz"});
    s.clock_mem_mhz = r.whole(field::clock_mem, {"MHz"});
    s.pcie_gen = r.whole(field::pcie_gen, {});
    s.pcie_width = r.whole(field::pcie_width, {"x"});
    s.utilization_gpu_pct = r.whole(field::utilization_gpu, {"%"});
    s.utilization_mem_pct = r.whole(field::utilization_mem, {"%"});
    s.pcie_rx_mb_s = r.number(field::pcie_rx, {"MB/s"});
    s.pcie_tx_mb_s = r.number(field::pcie_tx, {"MB/s"});
    s.nvlink_up = r.whole(field::nvlink_up, {});
    s.pool_allocated = r.bytes(field::pool_allocated);
    s.pool_reserved = r.bytes(field::pool_reserved);
    if (r.error) {
      issue(line, *r.error);
      continue;
    }
    s.missing = r.take_missing();
    if (index) {
      s.index = *index;
    } else {
      const std::string id = !s.uuid.empty() ? s.uuid : !s.pci_bus_id.empty() ? s.pci_bus_id : s.name;
      s.index = first_seen.emplace(id, static_cast<int>(first_seen.size())).first->second;
    }
    if (time) {
      s.time = *time;
    } else {
      const std::size_t k = rows_per_gpu[s.key()]++;
      s.time = clock::time_point{std::chrono::duration_cast<clock::duration>(options.assumed_interval *
                                                                             static_cast<double>(k))};
    }
    log.samples.push_back(std::move(s));
  }
  if (!current) {
    fail_csv(1, 0,
             "no header line found (a line of column names such as 'timestamp, index, memory.used [MiB]', "
             "separated by commas, '|', tabs or two spaces); for a log without one, give its column names "
             "with --columns (e.g. --columns 'timestamp,index,memory.used [MiB]')");
  }
  return log;
}

}  // namespace mgm::telemetry
