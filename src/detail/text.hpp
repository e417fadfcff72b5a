// Small text helpers shared by the readers of every layer (RMM traces, layer tables, GPU logs; the
// log readers split their fields with src/telemetry/text.hpp).
#pragma once

#include <cctype>
#include <string>
#include <string_view>

namespace mgm::detail {

/// `s` without leading and trailing spaces, tabs and carriage returns.
inline std::string_view trim_blanks(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

/// `s` in ASCII lower case (PCI bus ids, HTTP header names).
inline std::string ascii_lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace mgm::detail
