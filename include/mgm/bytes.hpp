/// @file
/// @brief Byte sizes as people write them: `parse_bytes("24GiB")`, `format_bytes(1536)`.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace mgm {

/// @brief Parses a size: a non-negative number (digits, optionally a fraction) followed by an
/// optional unit `B`, `KiB`, `MiB`, `GiB` or `TiB` (binary multiples; a space may separate them).
/// A plain number is bytes. Fractions are rounded down to whole bytes: `"1.5KiB"` is 1536.
/// @throws mgm::parse_error naming the column, for anything else: an empty string, a sign, a
/// decimal unit such as `GB` (ambiguous: the message suggests `GiB`), or a value above `SIZE_MAX`.
[[nodiscard]] std::size_t parse_bytes(std::string_view text);

/// @brief `bytes` with a binary unit and two decimals: "512 B", "1.50 KiB", "80.00 GiB".
[[nodiscard]] std::string format_bytes(std::size_t bytes);

}  // namespace mgm
