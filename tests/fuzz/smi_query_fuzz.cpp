// The `nvidia-smi -q -x` and `nvidia-smi -q` readers on arbitrary bytes, lenient and strict: a
// log, or mgm::parse_error naming a line of the text. Anything else escaping, or an issue on a
// line the text does not have, is a crash.
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
  for (const auto& s : log.samples) {
    if (mgm::telemetry::csv_row(s).find('\n') != std::string::npos) std::abort();
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
    for (const auto reader : {&mgm::telemetry::read_smi_query_xml, &mgm::telemetry::read_smi_query_text}) {
      try {
        check(reader(text, options), lines);
      } catch (const mgm::parse_error& e) {
        if (e.line() < 1 || e.line() > lines) std::abort();
      }
    }
  }
  return 0;
}
