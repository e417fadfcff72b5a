// The pieces every log reader shares: lines (NUL runs, CR LF) and numbers with units.
#include <mgm/error.hpp>
#include "../detail/text.hpp"

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

// ---------------------------------------------------------------------------------------------
// Shared pieces
// ---------------------------------------------------------------------------------------------

namespace detail {

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

}  // namespace detail

}  // namespace mgm::telemetry
