// `mgm leak` and `mgm plot`: the options that say how to read a GPU log, and the reading.
#pragma once

#include "mgm_tool.hpp"

#include <mgm/telemetry/sample.hpp>

#include <string>
#include <vector>

namespace mgm_tool {

/// @brief How to read a log: the interval of rows without timestamps, strictness, column names
/// of a CSV without a header.
struct log_options {
  std::string interval{"1s"};
  bool strict{false};
  std::vector<std::string> columns;
};

/// @brief `--interval`, `--strict`, `--columns` on `cmd`.
void add_log_options(CLI::App* cmd, log_options& o);

/// @brief The log at `path`, in whichever format it is. @throws tool_error (2) naming the line.
[[nodiscard]] mgm::telemetry::gpu_log read_log(const std::string& path, const log_options& o);

/// @brief The lines skipped, on stderr (at most three of them named).
void report_issues(const std::string& path, const mgm::telemetry::gpu_log& log);

}  // namespace mgm_tool
