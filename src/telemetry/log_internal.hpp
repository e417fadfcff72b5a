// What the log readers tell the format detection (log_detect.cpp) beyond log_format.hpp.
// Internal: not installed.
#pragma once

#include <string_view>

namespace mgm::telemetry::detail {

/// @brief The line is the header of an nvidia-smi table (`--query-gpu` names, comma-, `|`-, tab- or
/// blank-separated): the format detection routes the file to the CSV reader (smi_csv.cpp).
[[nodiscard]] bool is_smi_table_header(std::string_view line);

/// @brief A line only `nvidia-smi -q` text has: its `=...NVSMI LOG...=` banner, or a
/// `GPU 00000000:07:00.0` section head at the left margin (smi_query_text.cpp).
[[nodiscard]] bool is_smi_query_text_line(std::string_view line) noexcept;

}  // namespace mgm::telemetry::detail
