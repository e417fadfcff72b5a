// GPU-Z "Sensor Log" files: `" , "`-separated fields padded to the width of their header, a
// trailing `" ,"`, Windows-1252 (the degree sign is the byte 0xB0), CRLF; columns that differ by
// GPU-Z version and vendor, and on AMD a column name that appears twice.
#include <mgm/error.hpp>
#include "text.hpp"

#include <mgm/telemetry/log_format.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mgm::telemetry {
namespace {

using detail::trim;

enum class gpuz_metric : std::uint8_t { none, clock_sm, clock_mem, temperature, memory_used, power_draw, load_gpu, load_mem };

struct gpuz_alias {
  std::string_view name;  // lower case, without the `[unit]`
  gpuz_metric target;
};

constexpr std::array gpuz_aliases{
    gpuz_alias{"gpu clock", gpuz_metric::clock_sm},
    gpuz_alias{"gpu core clock", gpuz_metric::clock_sm},
    gpuz_alias{"memory clock", gpuz_metric::clock_mem},
    gpuz_alias{"gpu memory clock", gpuz_metric::clock_mem},
    gpuz_alias{"gpu temperature", gpuz_metric::temperature},
    gpuz_alias{"memory used", gpuz_metric::memory_used},
    gpuz_alias{"memory used (dedicated)", gpuz_metric::memory_used},
    gpuz_alias{"memory usage (dedicated)", gpuz_metric::memory_used},
    gpuz_alias{"board power draw", gpuz_metric::power_draw},
    gpuz_alias{"gpu load", gpuz_metric::load_gpu},
    gpuz_alias{"memory controller load", gpuz_metric::load_mem},
};

constexpr std::size_t gpuz_metric_count = 8;

// Windows-1252's 0x80..0x9F; the rest of 0xA0..0xFF is Latin-1.
constexpr std::array<char16_t, 32> cp1252_high{
    0x20AC, 0xFFFD, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160,
    0x2039, 0x0152, 0xFFFD, 0x017D, 0xFFFD, 0xFFFD, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022,
    0x2013, 0x2014, 0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0xFFFD, 0x017E, 0x0178};

bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    if (c < 0x80) {
      n = 0;
    } else if ((c & 0xE0) == 0xC0 && c >= 0xC2) {
      n = 1;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
    } else if ((c & 0xF8) == 0xF0 && c <= 0xF4) {
      n = 3;
    } else {
      return false;
    }
    if (n > 0 && i + n >= s.size()) return false;
    for (std::size_t k = 1; k <= n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n + 1;
  }
  return true;
}

// Column names as UTF-8: GPU-Z writes Windows-1252 (`[°C]` is `[` 0xB0 `C]`); text that is
// already valid UTF-8 is kept.
std::string to_utf8(std::string_view s) {
  if (valid_utf8(s)) return std::string{s};
  std::string out;
  out.reserve(s.size() + 8);
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    const char16_t u = c < 0x80 ? c : c < 0xA0 ? cp1252_high[c - 0x80] : static_cast<char16_t>(c);
    if (u < 0x80) {
      out.push_back(static_cast<char>(u));
    } else if (u < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (u >> 6)));
      out.push_back(static_cast<char>(0x80 | (u & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xE0 | (u >> 12)));
      out.push_back(static_cast<char>(0x80 | ((u >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (u & 0x3F)));
    }
  }
  return out;
}

// The comma-separated fields without the empty one after the trailing " ,".
std::vector<std::string_view> gpuz_fields(std::string_view line) {
  auto out = detail::split_fields(line);
  if (out.size() > 1 && out.back().empty()) out.pop_back();
  return out;
}

bool is_gpuz_header(const std::vector<std::string_view>& fields) {
  if (fields.size() < 2) return false;
  const auto first = fields.front();
  return first.size() == 4 && std::tolower(static_cast<unsigned char>(first[0])) == 'd' &&
         std::tolower(static_cast<unsigned char>(first[1])) == 'a' &&
         std::tolower(static_cast<unsigned char>(first[2])) == 't' &&
         std::tolower(static_cast<unsigned char>(first[3])) == 'e';
}

struct gpuz_layout {
  std::vector<std::string> names;                  // UTF-8, as in the header
  std::array<std::size_t, gpuz_metric_count> column{};  // 0: absent (column 0 is the date)
  std::size_t line{0};
};

gpuz_layout layout_of(const std::vector<std::string_view>& fields, std::size_t line) {
  gpuz_layout l;
  l.line = line;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    l.names.push_back(to_utf8(fields[i]));
    if (i == 0) continue;
    std::string_view base = fields[i];
    if (const auto open = base.find('['); open != std::string_view::npos) base = trim(base.substr(0, open));
    std::string key;
    for (const char c : base) key.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    for (const auto& a : gpuz_aliases) {
      auto& first = l.column[static_cast<std::size_t>(a.target)];
      if (a.name == key && first == 0) first = i;  // a repeated name keeps its first column
    }
  }
  return l;
}

[[noreturn]] void fail_gpuz(std::size_t line, std::size_t column, const std::string& why) {
  throw parse_error::at("GPU-Z sensor log", line, column, why);
}

}  // namespace

gpu_log read_gpuz_log(std::string_view text, const log_read_options& options) {
  gpu_log log;
  log.format = "gpuz";
  log.assumed_interval = options.assumed_interval;
  const std::string name = options.device_name.empty() ? std::string{"GPU-Z"} : options.device_name;
  std::optional<gpuz_layout> current;
  bool any_header = false;

  auto issue = [&](const detail::log_line& line, std::size_t column, std::string why) {
    if (options.strict) fail_gpuz(line.number, column, why);
    log.issues.push_back({line.number, std::move(why)});
  };

  for (const auto& line : detail::split_log_lines(text)) {
    if (trim(line.text).empty()) continue;
    const auto fields = gpuz_fields(line.text);
    if (is_gpuz_header(fields)) {
      current = layout_of(fields, line.number);
      any_header = true;
      continue;
    }
    if (!current) {
      issue(line, 0, "a row before the header line (a first field 'Date')");
      continue;
    }
    const auto& l = *current;
    if (fields.size() != l.names.size()) {
      std::string why = "expected " + std::to_string(l.names.size()) + " fields (as the header on line " +
                        std::to_string(l.line) + "), found " + std::to_string(fields.size());
      if (line.had_nul) why += " (NUL bytes cut the line)";
      issue(line, 0, std::move(why));
      continue;
    }
    const auto column_of = [&](std::size_t i) {
      return fields[i].empty() ? std::size_t{0} : static_cast<std::size_t>(fields[i].data() - line.text.data()) + 1;
    };
    const auto time = parse_log_time(fields[0]);
    if (!time) {
      issue(line, column_of(0), "'" + std::string{fields[0]} + "' is not a date (YYYY-MM-DD HH:MM:SS)");
      continue;
    }
    std::array<std::optional<double>, gpuz_metric_count> values{};
    std::optional<std::string> error;
    std::size_t error_column = 0;
    for (std::size_t m = 1; m < gpuz_metric_count && !error; ++m) {
      const std::size_t c = l.column[m];
      if (c == 0) continue;
      const auto v = fields[c];
      if (v.empty() || v == "-" || v == "N/A" || (v.front() == '[' && v.back() == ']')) continue;
      const auto n = detail::parse_number_and_unit(v);
      if (!n || !n->unit.empty() || n->value < 0 || n->value > 1e9) {
        error = l.names[c] + ": '" + to_utf8(v) + "' is not a number";
        error_column = column_of(c);
      } else {
        values[m] = n->value;
      }
    }
    if (error) {
      issue(line, error_column, std::move(*error));
      continue;
    }
    const auto get = [&](gpuz_metric m) { return values[static_cast<std::size_t>(m)]; };
    const auto whole = [&](gpuz_metric m) -> std::optional<unsigned> {
      const auto v = get(m);
      if (!v) return std::nullopt;  // at most 1e9: checked above
      return static_cast<unsigned>(std::lround(*v));
    };
    device_sample s;
    s.time = *time;
    s.index = 0;
    s.name = name;
    s.clock_sm_mhz = whole(gpuz_metric::clock_sm);
    s.clock_mem_mhz = whole(gpuz_metric::clock_mem);
    s.temperature_c = get(gpuz_metric::temperature);
    if (const auto mb = get(gpuz_metric::memory_used)) {
      s.memory_used = static_cast<std::uint64_t>(std::llround(*mb * 1024.0 * 1024.0));  // GPU-Z's MB are MiB
    }
    s.power_draw_w = get(gpuz_metric::power_draw);
    s.utilization_gpu_pct = whole(gpuz_metric::load_gpu);
    s.utilization_mem_pct = whole(gpuz_metric::load_mem);
    log.samples.push_back(std::move(s));
  }
  if (!any_header) fail_gpuz(1, 0, "no header line (a first field 'Date'): not a GPU-Z sensor log");
  return log;
}

}  // namespace mgm::telemetry
