// nvidia-smi CSV logs as people keep them: `--query-gpu` with or without units and header, a
// script's own columns, a human table before the CSV (or pasted with `|`, tabs or aligned blanks),
// NUL runs, GPUs interleaved; and `--query-compute-apps`.
//
// The reader is driven by one table, `known_columns`: each column name it knows (every alias),
// the member of the sample it fills and the unit its values may carry. A header's columns are
// looked up in it; a row fills, member by member in the table's order, the first column of each
// member (in rank order) whose value is not missing.
#include <mgm/error.hpp>
#include "log_internal.hpp"
#include "text.hpp"

#include <mgm/telemetry/log_format.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace mgm::telemetry {

using detail::separator;
using detail::split_fields;
using detail::trim;

// ---------------------------------------------------------------------------------------------
// nvidia-smi CSV
// ---------------------------------------------------------------------------------------------

namespace {

// What a column fills: a member of `device_sample` (read by its type: text, a memory size, a
// number, a whole number), or something the row loop reads itself (the time, the GPU's number,
// and the `--query-compute-apps` columns, which fill a `process_row`).
enum class special : std::uint8_t { timestamp, index, gpu, pid, process_name, used_memory };
using text_member = std::string device_sample::*;
using bytes_member = std::optional<std::uint64_t> device_sample::*;
using number_member = std::optional<double> device_sample::*;
using whole_member = std::optional<unsigned> device_sample::*;
using member = std::variant<special, text_member, bytes_member, number_member, whole_member>;

// The units a column's values may be written with, besides none. `memory`: any size unit that
// `bytes_per_memory_unit` knows (`B` to `GiB`) in the value, else the header's (`[MiB]`,
// `_mib`), else MiB; `bytes()` reads them.
using units = std::span<const std::string_view>;
constexpr std::array<std::string_view, 2> celsius{"C", "\xC2\xB0" "C"};
constexpr std::array<std::string_view, 1> watts{"W"};
constexpr std::array<std::string_view, 1> mhz{"MHz"};
constexpr std::array<std::string_view, 1> lanes{"x"};
constexpr std::array<std::string_view, 1> percent{"%"};
constexpr std::array<std::string_view, 1> mb_per_s{"MB/s"};
constexpr units no_unit{};
constexpr units memory{};

struct known_column {
  std::string_view name;  // lower case, `_` written as `.`, no unit
  int rank;               // the lower, the more preferred when several columns fill one member
  member fills;
  units values;
};

// Every column the reader knows. The first row of each member fixes the order in which a row's
// members are read (that order is the order of `device_sample::missing`).
constexpr std::array known_columns{
    known_column{"timestamp", 0, special::timestamp, no_unit},
    known_column{"time", 1, special::timestamp, no_unit},
    known_column{"name", 0, &device_sample::name, no_unit},
    known_column{"gpu.name", 1, &device_sample::name, no_unit},
    known_column{"uuid", 0, &device_sample::uuid, no_unit},
    known_column{"gpu.uuid", 1, &device_sample::uuid, no_unit},
    known_column{"pci.bus.id", 0, &device_sample::pci_bus_id, no_unit},
    known_column{"gpu.bus.id", 1, &device_sample::pci_bus_id, no_unit},
    known_column{"index", 0, special::index, no_unit},
    known_column{"gpu", 0, special::gpu, no_unit},
    known_column{"gpu.id", 0, special::gpu, no_unit},
    known_column{"gpu.index", 0, special::gpu, no_unit},
    known_column{"memory.total", 0, &device_sample::memory_total, memory},
    known_column{"memory.used", 0, &device_sample::memory_used, memory},
    known_column{"memory.free", 0, &device_sample::memory_free, memory},
    known_column{"memory.reserved", 0, &device_sample::memory_reserved, memory},
    known_column{"temperature.gpu", 0, &device_sample::temperature_c, celsius},
    known_column{"power.draw", 0, &device_sample::power_draw_w, watts},
    known_column{"power.draw.average", 1, &device_sample::power_draw_w, watts},
    known_column{"power.draw.instant", 2, &device_sample::power_draw_w, watts},
    known_column{"power.limit", 0, &device_sample::power_limit_w, watts},
    known_column{"enforced.power.limit", 1, &device_sample::power_limit_w, watts},
    known_column{"clocks.sm", 0, &device_sample::clock_sm_mhz, mhz},
    known_column{"clocks.current.sm", 0, &device_sample::clock_sm_mhz, mhz},
    known_column{"clocks.mem", 0, &device_sample::clock_mem_mhz, mhz},
    known_column{"clocks.current.memory", 0, &device_sample::clock_mem_mhz, mhz},
    known_column{"pcie.link.gen.current", 0, &device_sample::pcie_gen, no_unit},
    known_column{"pcie.link.gen.gpucurrent", 1, &device_sample::pcie_gen, no_unit},
    known_column{"pcie.link.width.current", 0, &device_sample::pcie_width, lanes},
    known_column{"utilization.gpu", 0, &device_sample::utilization_gpu_pct, percent},
    known_column{"utilization.memory", 0, &device_sample::utilization_mem_pct, percent},
    known_column{"utilization.mem", 0, &device_sample::utilization_mem_pct, percent},
    known_column{"mgm.pcie.rx", 0, &device_sample::pcie_rx_mb_s, mb_per_s},
    known_column{"mgm.pcie.tx", 0, &device_sample::pcie_tx_mb_s, mb_per_s},
    known_column{"mgm.nvlink.up", 0, &device_sample::nvlink_up, no_unit},
    known_column{"mgm.pool.allocated", 0, &device_sample::pool_allocated, memory},
    known_column{"mgm.pool.reserved", 0, &device_sample::pool_reserved, memory},
    known_column{"pid", 0, special::pid, no_unit},
    known_column{"process.name", 0, special::process_name, no_unit},
    known_column{"used.gpu.memory", 0, special::used_memory, memory},
    known_column{"used.memory", 1, special::used_memory, memory},
};

static_assert(
    [] {
      for (std::size_t i = 0; i < known_columns.size(); ++i) {
        for (std::size_t j = i + 1; j < known_columns.size(); ++j) {
          if (known_columns[i].name == known_columns[j].name) return false;
        }
      }
      return true;
    }(),
    "a column name of known_columns names one member only");

// A member's place in the reader: the row of `known_columns` that first names it.
using slot = std::size_t;
constexpr slot no_slot = known_columns.size();

constexpr slot slot_of(const member& m) {
  for (slot i = 0; i < known_columns.size(); ++i) {
    if (known_columns[i].fills == m) return i;
  }
  return no_slot;
}

// Whether a row of `known_columns` is the first to name its member (else an alias of it).
constexpr std::array<bool, known_columns.size()> first_of_member = [] {
  std::array<bool, known_columns.size()> first{};
  for (slot i = 0; i < known_columns.size(); ++i) first[i] = slot_of(known_columns[i].fills) == i;
  return first;
}();

constexpr slot timestamp_slot = slot_of(special::timestamp);
constexpr slot index_slot = slot_of(special::index);
constexpr slot gpu_slot = slot_of(special::gpu);
constexpr slot pid_slot = slot_of(special::pid);
constexpr slot process_name_slot = slot_of(special::process_name);
constexpr slot used_memory_slot = slot_of(special::used_memory);
constexpr slot uuid_slot = slot_of(&device_sample::uuid);

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
  slot target{no_slot};
  int rank{0};
  std::string unit;  // from `[unit]` or a name suffix
};

const known_column* find_known(std::string_view name) {
  for (const auto& k : known_columns) {
    if (k.name == name) return &k;
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
  const known_column* k = find_known(key);
  if (k == nullptr) {
    for (const auto& [suffix, name_unit] : name_units) {
      if (key.size() > suffix.size() && key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0) {
        k = find_known(std::string_view{key}.substr(0, key.size() - suffix.size()));
        if (k != nullptr) {
          if (c.unit.empty()) c.unit = std::string{name_unit};
          break;
        }
      }
    }
  }
  if (k != nullptr) {
    c.target = slot_of(k->fills);
    c.rank = k->rank;
  }
  return c;
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
    if (columns.back().target != no_slot) ++known;
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
  // Per slot, its columns in preference order.
  std::array<std::vector<std::size_t>, known_columns.size()> by_slot;
  bool apps{false};
  bool has_time{false};
  bool mgm{false};
  separator sep{separator::comma};
  bool sep_known{true};  // false for `options.columns`: the first row tells

  explicit layout(std::vector<column> cols, std::size_t at, separator s = separator::comma)
      : columns{std::move(cols)}, line{at}, sep{s} {
    for (std::size_t i = 0; i < columns.size(); ++i) {
      if (columns[i].target != no_slot) by_slot[columns[i].target].push_back(i);
      if (columns[i].spelled.size() >= 4 && (columns[i].spelled.compare(0, 4, "mgm.") == 0)) mgm = true;
    }
    for (auto& list : by_slot) {
      std::stable_sort(list.begin(), list.end(), [&](std::size_t a, std::size_t b) { return columns[a].rank < columns[b].rank; });
    }
    apps = has(pid_slot);
    has_time = has(timestamp_slot);
  }
  [[nodiscard]] bool has(slot s) const { return !by_slot[s].empty(); }
  [[nodiscard]] const std::vector<std::size_t>& of(slot s) const { return by_slot[s]; }
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

  // The first non-missing value among the slot's columns, or empty.
  std::optional<std::string_view> raw(slot s) {
    for (const auto i : layout_.of(s)) {
      const auto v = fields_[i];
      if (!is_missing(v)) {
        column_ = i;
        return v;
      }
      if (v.size() > 2 && v != "[N/A]" && v.front() == '[') missing_.push_back(metric_name(i) + ": " + std::string{v});
    }
    return std::nullopt;
  }

  std::optional<double> number(slot s, units allowed) {
    const auto v = raw(s);
    if (!v || error) return std::nullopt;
    const auto n = detail::parse_number_and_unit(*v);
    if (!n) return fail("'" + std::string{*v} + "' is not a number");
    if (!n->unit.empty() && std::find(allowed.begin(), allowed.end(), n->unit) == allowed.end()) {
      return fail("unexpected unit in '" + std::string{*v} + "'");
    }
    return n->value;
  }

  std::optional<unsigned> whole(slot s, units allowed) {
    const auto v = number(s, allowed);
    if (!v) return std::nullopt;
    if (*v < 0 || *v > 4.3e9 || std::lround(*v) > static_cast<long>(std::numeric_limits<unsigned>::max())) {
      fail("'" + std::string{fields_[column_]} + "' is out of range");
      return std::nullopt;
    }
    return static_cast<unsigned>(std::lround(*v));
  }

  std::optional<std::uint64_t> bytes(slot s) {
    const auto v = raw(s);
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

  std::string text(slot s) {
    const auto v = raw(s);
    return v ? std::string{*v} : std::string{};
  }

  // The GPU's number: its `gpu` column (scripts' own formats) takes precedence over `index`;
  // empty when the layout has neither. A row without one, or with a bad one, is an error.
  std::optional<int> gpu_index() {
    const slot from = layout_.has(gpu_slot) ? gpu_slot : index_slot;
    if (!layout_.has(from)) return std::nullopt;
    const auto v = raw(from);
    if (!v) return fail_row("no GPU index");
    int value = 0;
    const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), value);
    if (ec != std::errc{} || end != v->data() + v->size() || value < 0) {
      return fail_row("'" + std::string{*v} + "' is not a GPU index");
    }
    return value;
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
  // An error of the row rather than of a value: no column, no column name.
  std::nullopt_t fail_row(std::string message) {
    if (!error) error = line_error{std::move(message), 0};
    return std::nullopt;
  }
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

// Fills the members of `s` from the row, in the order of `known_columns` (the GPU's number where
// the table names `index`), until the first error, which is left in `r.error`.
void read_sample(row_reader& r, device_sample& s, std::optional<int>& index) {
  for (slot i = 0; i < known_columns.size() && !r.error; ++i) {
    if (!first_of_member[i]) continue;  // an alias: its member is read at the member's first row
    const units values = known_columns[i].values;
    std::visit(
        [&](auto m) {
          using type = decltype(m);
          if constexpr (std::is_same_v<type, special>) {
            if (m == special::index) index = r.gpu_index();  // the others are not a device's
          } else if constexpr (std::is_same_v<type, text_member>) {
            s.*m = r.text(i);
          } else if constexpr (std::is_same_v<type, bytes_member>) {
            s.*m = r.bytes(i);
          } else if constexpr (std::is_same_v<type, number_member>) {
            s.*m = r.number(i, values);
          } else {
            s.*m = r.whole(i, values);
          }
        },
        known_columns[i].fills);
  }
}

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
    if (!current->has(timestamp_slot)) log.has_timestamps = false;
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
        if (!current->has(timestamp_slot)) log.has_timestamps = false;
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
      const auto t = r.raw(timestamp_slot);
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
      row.gpu_uuid = r.text(uuid_slot);
      const auto pid = r.raw(pid_slot);
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
      row.process.name = r.text(process_name_slot);
      row.process.used_bytes = r.bytes(used_memory_slot);
      if (r.error) {
        issue(line, *r.error);
        continue;
      }
      log.process_rows.push_back(std::move(row));
      continue;
    }

    device_sample s;
    std::optional<int> index;
    read_sample(r, s, index);
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
