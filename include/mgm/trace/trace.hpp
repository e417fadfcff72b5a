/// @file
/// @brief Allocation traces: RMM's CSV log format read and written, and the compiled form a
/// replay walks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace mgm {

/// @brief One row of RMM's `logging_resource_adaptor` log: `Thread,Time,Action,Pointer,Size,Stream`.
struct trace_event {
  enum class action_type { allocate, free, allocate_failure };
  std::uint64_t thread{0};
  double seconds{0.0};        ///< time of day, from `HH:MM:SS.ffffff`
  action_type action{action_type::allocate};
  std::uint64_t pointer{0};
  std::size_t bytes{0};
  std::uint64_t stream{0};
  std::size_t line{0};        ///< the line of the file it came from (1-based), 0 if none
};

/// @brief One allocation or free of a compiled trace: `slot` names the allocation, 0-based.
struct replay_op {
  std::uint32_t slot{0};
  std::uint32_t stream{0};    ///< index into `compiled_trace::streams`
  std::size_t bytes{0};
  bool is_free{false};
};

/// @brief A trace turned into what a replay needs: ops over dense slots (no pointer lookups at
/// replay time), the distinct streams, and what a perfect allocator would need.
struct compiled_trace {
  std::string name;
  std::vector<replay_op> ops;                 ///< leftover live allocations are freed at the end
  std::vector<std::uint64_t> streams;
  std::size_t slots{0};
  std::size_t allocations{0};
  std::size_t peak_live_bytes{0};             ///< the most requested bytes live at once
  std::size_t total_bytes{0};                 ///< requested bytes over all allocations
  std::size_t failures_skipped{0};            ///< `allocate failure` rows of the log
  std::size_t leftovers_freed{0};             ///< allocations the log never freed
};

/// @brief A trace as read.
struct trace {
  std::string name;
  std::vector<trace_event> events;

  /// @brief The replayable form. @throws mgm::parse_error naming the line of a free of a pointer
  /// that is not live, or of an allocation at a pointer that is still live.
  [[nodiscard]] compiled_trace compile() const;
};

/// @brief Reads RMM's CSV log. The header line is required; `Pointer` and `Stream` may be hex
/// (`0x...`) or decimal; CRLF line ends and a trailing empty line are accepted.
/// @throws mgm::parse_error naming the line (and column) of the first bad row.
[[nodiscard]] trace read_rmm_csv(std::istream& in, std::string name = "trace");
/// @throws mgm::parse_error as above; mgm::logic_error when the file cannot be opened.
[[nodiscard]] trace read_rmm_csv_file(const std::string& path);
/// @brief Writes RMM's CSV log (the `logging_adaptor`'s format).
void write_rmm_csv(std::ostream& out, const trace& t);

}  // namespace mgm
