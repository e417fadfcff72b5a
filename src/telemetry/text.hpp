// The text module of the log readers: lines (NUL runs, CR LF, a BOM), fields (nvidia-smi's
// commas, or the `|`, tabs or aligned blanks of a pasted table) and numbers with units
// (`1094 MiB`, `359.75 W`). Every reader of src/telemetry splits and reads its text with these,
// so that a field means the same in each. Internal: not installed.
//
// No reader quotes: nvidia-smi and GPU-Z never do, so a `"` is a character of its field and a
// comma always separates (a process name with a comma makes its line one field too long).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mgm::telemetry::detail {

/// One line of a log as the readers see it: NUL bytes and a final CR removed.
struct log_line {
  std::string text;
  std::size_t number{0};  ///< 1-based
  bool had_nul{false};
};

/// The lines of `text` (a final line end does not start another line; a UTF-8 BOM is dropped).
[[nodiscard]] std::vector<log_line> split_log_lines(std::string_view text);

/// `text` without leading and trailing spaces, tabs and carriage returns.
[[nodiscard]] std::string_view trim(std::string_view text) noexcept;

/// What separates the fields of a line: nvidia-smi's and GPU-Z's commas, or what a pasted table
/// has instead.
enum class separator : std::uint8_t {
  comma,   ///< every comma
  bar,     ///< every `|`; the outer bars of `| a | b |` are optional
  tab,     ///< a run of tabs (and the blanks around it) is one separator
  blanks,  ///< a tab, or a run of two spaces or more (one space stays inside a value: `1094 MiB`)
};

/// The trimmed fields of `line`, views into it, as `sep` separates them. A line without a
/// separator is one field (an empty line: one empty field); a trailing comma makes a last, empty
/// field, which the caller may drop.
[[nodiscard]] std::vector<std::string_view> split_fields(std::string_view line, separator sep = separator::comma);

/// A finite number at the start of `text` (after blanks; a leading `+` allowed) and what follows
/// it, trimmed; empty when `text` does not start with one.
struct number_and_unit {
  double value{0.0};
  std::string_view unit;
};
[[nodiscard]] std::optional<number_and_unit> parse_number_and_unit(std::string_view text) noexcept;

/// Bytes per unit of a memory size as logs write it (`MiB`/`MB`, `GiB`/`GB`, `KiB`/`KB`, `B`;
/// none: MiB, nvidia-smi's unit); empty for any other unit.
[[nodiscard]] std::optional<double> bytes_per_memory_unit(std::string_view unit) noexcept;

}  // namespace mgm::telemetry::detail
