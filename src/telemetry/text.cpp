// The text module of the log readers (text.hpp): lines, fields, numbers with units.
#include "text.hpp"

#include "../detail/text.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <system_error>

namespace mgm::telemetry::detail {

std::vector<log_line> split_log_lines(std::string_view text) {
  if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  std::vector<log_line> lines;
  std::size_t number = 0;
  for (std::size_t start = 0; start < text.size();) {
    const std::size_t nl = std::min(text.find('\n', start), text.size());
    log_line line;
    line.number = ++number;
    const auto raw = text.substr(start, nl - start);
    line.text.reserve(raw.size());
    for (const char c : raw) {
      if (c == '\0') {
        line.had_nul = true;
      } else {
        line.text.push_back(c);
      }
    }
    if (!line.text.empty() && line.text.back() == '\r') line.text.pop_back();
    lines.push_back(std::move(line));
    start = nl + 1;
  }
  return lines;
}

std::string_view trim(std::string_view text) noexcept { return mgm::detail::trim_blanks(text); }

namespace {

// Fields between single characters (`,` or `|`), each trimmed.
void split_at(std::string_view body, char sep, std::vector<std::string_view>& out) {
  for (std::size_t start = 0;;) {
    const auto at = body.find(sep, start);
    out.push_back(trim(body.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start)));
    if (at == std::string_view::npos) break;
    start = at + 1;
  }
}

// Fields between runs of blanks: `tab` splits at a run with a tab in it, `blanks` also at a run
// of two spaces or more.
void split_at_runs(std::string_view body, separator sep, std::vector<std::string_view>& out) {
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
}

}  // namespace

std::vector<std::string_view> split_fields(std::string_view line, separator sep) {
  std::vector<std::string_view> out;
  switch (sep) {
    case separator::comma:
      split_at(line, ',', out);
      break;
    case separator::bar: {
      std::string_view body = trim(line);
      if (!body.empty() && body.front() == '|') body.remove_prefix(1);
      if (!body.empty() && body.back() == '|') body.remove_suffix(1);
      split_at(body, '|', out);
      break;
    }
    case separator::tab:
    case separator::blanks:
      split_at_runs(trim(line), sep, out);
      break;
  }
  return out;
}

std::optional<double> bytes_per_memory_unit(std::string_view unit) noexcept {
  if (unit.empty() || unit == "MiB" || unit == "MB") return 1024.0 * 1024.0;
  if (unit == "GiB" || unit == "GB") return 1024.0 * 1024.0 * 1024.0;
  if (unit == "KiB" || unit == "KB") return 1024.0;
  if (unit == "B") return 1.0;
  return std::nullopt;
}

std::optional<number_and_unit> parse_number_and_unit(std::string_view text) noexcept {
  text = trim(text);
  if (text.empty()) return std::nullopt;
  // from_chars takes neither a leading '+' nor "inf"/"nan" spelled as words we want.
  if (text.front() == '+') text.remove_prefix(1);
  if (text.empty() || !(std::isdigit(static_cast<unsigned char>(text.front())) != 0 || text.front() == '-' ||
                        text.front() == '.')) {
    return std::nullopt;
  }
  double value = 0.0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end == text.data() || !std::isfinite(value)) return std::nullopt;
  return number_and_unit{value, trim(text.substr(static_cast<std::size_t>(end - text.data())))};
}

}  // namespace mgm::telemetry::detail
