#include <mgm/bytes.hpp>
#include <mgm/error.hpp>

#include "detail/fmt.hpp"

#include <array>
#include <limits>
#include <string>

namespace mgm {
namespace {

[[noreturn]] void fail(std::string_view text, std::size_t column, const std::string& why) {
  throw parse_error{"size '" + std::string{text} + "', column " + std::to_string(column) + ": " + why, 1, column};
}

__extension__ using uint128 = unsigned __int128;  // exact fraction arithmetic (GCC and clang)

struct unit {
  std::string_view name;
  std::size_t shift;
};
constexpr std::array<unit, 5> units{{{"B", 0}, {"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}}};

}  // namespace

std::size_t parse_bytes(std::string_view text) {
  constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
  std::size_t i = 0;
  while (i < text.size() && text[i] == ' ') ++i;
  if (i == text.size()) fail(text, i + 1, "expected a number of bytes such as 512, 64KiB or 1.5GiB");
  if (text[i] < '0' || text[i] > '9') fail(text, i + 1, "expected a digit");
  std::size_t whole = 0;
  bool overflow = false;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    const auto digit = static_cast<std::size_t>(text[i] - '0');
    if (whole > (max - digit) / 10) overflow = true;
    else whole = whole * 10 + digit;
  }
  // Fraction as numerator / 10^k, at most 18 digits kept (more cannot change whole bytes below 1 TiB units).
  std::size_t fraction = 0;
  std::size_t scale = 1;
  if (i < text.size() && text[i] == '.') {
    const std::size_t dot = i++;
    if (i == text.size() || text[i] < '0' || text[i] > '9') fail(text, dot + 2, "expected a digit after '.'");
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
      if (scale < 1'000'000'000'000'000'000ULL) {
        fraction = fraction * 10 + static_cast<std::size_t>(text[i] - '0');
        scale *= 10;
      }
    }
  }
  const std::size_t unit_column = i + 1;
  while (i < text.size() && text[i] == ' ') ++i;
  std::string_view suffix = text.substr(i);
  while (!suffix.empty() && suffix.back() == ' ') suffix.remove_suffix(1);
  std::size_t shift = 0;
  if (!suffix.empty()) {
    bool found = false;
    for (const auto& u : units) {
      if (suffix == u.name) {
        shift = u.shift;
        found = true;
      }
    }
    if (!found) {
      std::string hint;
      if (suffix.size() == 2 && (suffix[1] == 'B' || suffix[1] == 'b')) {
        for (const auto& u : units) {
          if (u.name.size() == 3 && (u.name[0] == suffix[0] || u.name[0] == suffix[0] - 'a' + 'A')) {
            hint = " (decimal units are ambiguous here: did you mean " + std::string{u.name} + "?)";
          }
        }
      }
      fail(text, i + 1 > unit_column ? i + 1 : unit_column,
           "unknown unit '" + std::string{suffix} + "'; use B, KiB, MiB, GiB or TiB" + hint);
    }
  }
  if (overflow || whole > (max >> shift)) fail(text, 1, "larger than the largest size (" + std::to_string(max) + " bytes)");
  std::size_t bytes = whole << shift;
  if (fraction != 0) {
    // fraction / scale * 2^shift, exact in 128 bits, rounded down.
    const auto part = static_cast<std::size_t>((static_cast<uint128>(fraction) << shift) / scale);
    if (bytes > max - part) fail(text, 1, "larger than the largest size");
    bytes += part;
  }
  return bytes;
}

std::string format_bytes(std::size_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  std::size_t u = 1;
  while (u + 1 < units.size() && bytes >= (std::size_t{1} << units[u + 1].shift)) ++u;
  return fmt::format("{:.2f} {}", static_cast<double>(bytes) / static_cast<double>(std::size_t{1} << units[u].shift),
                     units[u].name);
}

}  // namespace mgm
