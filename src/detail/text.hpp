// Small text helpers shared by the readers (RMM traces, layer tables, GPU logs).
#pragma once

#include <string_view>
#include <vector>

namespace mgm::detail {

/// `s` without leading and trailing spaces, tabs and carriage returns.
inline std::string_view trim_blanks(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

/// The comma-separated fields of `line`, each trimmed (an empty line is one empty field).
inline std::vector<std::string_view> split_trimmed_fields(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (;;) {
    const auto comma = line.find(',', start);
    out.push_back(trim_blanks(line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace mgm::detail
