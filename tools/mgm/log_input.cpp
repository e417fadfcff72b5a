// Reading GPU logs for `mgm leak` and `mgm plot`.
#include "log_input.hpp"

#include <mgm/error.hpp>
#include <mgm/telemetry/log_format.hpp>

#include <cstdio>

namespace mgm_tool {

namespace tel = mgm::telemetry;

void add_log_options(CLI::App* cmd, log_options& o) {
  cmd->add_option("--interval", o.interval, "Time between rows of one GPU, for logs without timestamps")->capture_default_str();
  cmd->add_flag("--strict", o.strict, "Stop at the first line that cannot be read (default: skip it and say so)");
  cmd->add_option("--columns", o.columns, "Column names of a CSV without a header (noheader), comma-separated")->delimiter(',');
}

tel::gpu_log read_log(const std::string& path, const log_options& o) {
  require_file(path);
  tel::log_read_options ro;
  ro.strict = o.strict;
  ro.assumed_interval = parse_duration(o.interval);
  ro.columns = o.columns;
  try {
    return tel::read_gpu_log_file(path, ro);
  } catch (const mgm::parse_error& e) {
    throw tool_error{exit_bad_input, path + ":" + std::to_string(e.line()) + ": " + e.what()};
  } catch (const mgm::logic_error& e) {
    throw tool_error{exit_bad_input, e.what()};
  }
}

void report_issues(const std::string& path, const tel::gpu_log& log) {
  if (log.issues.empty()) return;
  std::fprintf(stderr, "mgm: %s: %zu line%s skipped", path.c_str(), log.issues.size(), log.issues.size() == 1 ? "" : "s");
  for (std::size_t i = 0; i < log.issues.size() && i < 3; ++i) {
    std::fprintf(stderr, "%s line %zu: %s", i == 0 ? ":" : ";", log.issues[i].line, log.issues[i].message.c_str());
  }
  std::fprintf(stderr, "%s\n", log.issues.size() > 3 ? "; ..." : "");
}

}  // namespace mgm_tool
