// What the log readers tell each other beyond log_format.hpp. Internal: not installed.
#pragma once

#include <string_view>

namespace mgm::telemetry::detail {

/// @brief The line is the header of an nvidia-smi table (`--query-gpu` names, comma-, `|`-, tab- or
/// blank-separated): the format detection routes the file to the CSV reader (smi_csv.cpp).
[[nodiscard]] bool is_smi_table_header(std::string_view line);

}  // namespace mgm::telemetry::detail
