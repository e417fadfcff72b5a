// The nvidia-smi CSV reader (and the format detection in front of it) on arbitrary bytes, lenient
// and strict: a log, or mgm::parse_error naming a line of the text. Anything else escaping, or a
// lenient issue on a line the text does not have, is a crash.
#include <mgm/error.hpp>
#include <mgm/telemetry/log_format.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

void check(const mgm::telemetry::gpu_log& log, std::size_t lines) {
  for (const auto& issue : log.issues) {
    if (issue.line < 1 || issue.line > lines) std::abort();
  }
  // What was read writes out and reads back (the writer never produces a bad line).
  for (const auto& s : log.samples) {
    const auto row = mgm::telemetry::csv_row(s);
    if (row.find('\n') != std::string::npos) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text{reinterpret_cast<const char*>(data), size};
  std::size_t lines = 1;
  for (const char c : text) lines += c == '\n' ? 1 : 0;
  for (const bool strict : {false, true}) {
    mgm::telemetry::log_read_options options;
    options.strict = strict;
    try {
      check(mgm::telemetry::read_smi_csv(text, options), lines);
    } catch (const mgm::parse_error& e) {
      if (e.line() < 1 || e.line() > lines) std::abort();
    }
    try {
      check(mgm::telemetry::read_gpu_log(text, options), lines);
    } catch (const mgm::parse_error& e) {
      if (e.line() < 1 || e.line() > lines) std::abort();
    }
    // As a noheader log with a column set given.
    options.columns = {"index", "name", "memory.used [MiB]", "power.draw [W]", "timestamp"};
    try {
      check(mgm::telemetry::read_smi_csv(text, options), lines);
    } catch (const mgm::parse_error& e) {
      if (e.line() < 1 || e.line() > lines) std::abort();
    }
  }
  return 0;
}
