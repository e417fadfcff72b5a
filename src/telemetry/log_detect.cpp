// Which reader a log needs, and the entry points that pick it (read_gpu_log, read_gpu_log_file).
#include <mgm/error.hpp>
#include "log_internal.hpp"
#include "text.hpp"

#include <mgm/telemetry/log_format.hpp>

#include <fstream>
#include <istream>
#include <iterator>
#include <string>
#include <string_view>

namespace mgm::telemetry {

using detail::trim;

// ---------------------------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------------------------

log_format detect_log_format(std::string_view text) noexcept {
  try {
    std::size_t seen = 0;
    for (const auto& line : detail::split_log_lines(text)) {
      const auto body = trim(line.text);
      if (body.empty()) continue;
      if (seen++ == 0) {
        if (body.starts_with("<?xml") || body.starts_with("<nvidia_smi_log") || body.starts_with("<!DOCTYPE nvidia_smi_log")) {
          return log_format::smi_xml;
        }
        if (body.front() == '{') return log_format::jsonl;
        const auto first = trim(body.substr(0, body.find(',')));
        if (body.find(',') != std::string_view::npos && (first == "Date" || first == "date")) return log_format::gpuz;
      }
      if (detail::is_smi_query_text_line(line.text)) return log_format::smi_text;
      if (body.find(',') != std::string_view::npos) return log_format::smi_csv;
      if (detail::is_smi_table_header(line.text)) return log_format::smi_csv;  // a table pasted with other separators
    }
    return log_format::unknown;
  } catch (...) {  // only std::bad_alloc can get here
    return log_format::unknown;
  }
}

gpu_log read_gpu_log(std::string_view text, const log_read_options& options) {
  if (!options.columns.empty()) return read_smi_csv(text, options);
  switch (detect_log_format(text)) {
    case log_format::smi_csv:
      return read_smi_csv(text, options);
    case log_format::gpuz:
      return read_gpuz_log(text, options);
    case log_format::jsonl:
      return read_jsonl_log(text, options);
    case log_format::smi_xml:
      return read_smi_query_xml(text, options);
    case log_format::smi_text:
      return read_smi_query_text(text, options);
    case log_format::unknown:
      break;
  }
  throw parse_error{"GPU log, line 1: unknown format (expected nvidia-smi --query-gpu CSV or a table of it, "
                    "nvidia-smi -q or -q -x output, a GPU-Z sensor log or JSON lines); for a table without "
                    "a header line, give its column names with --columns",
                    1, 0};
}

gpu_log read_gpu_log(std::istream& in, const log_read_options& options) {
  const std::string text{std::istreambuf_iterator<char>{in}, std::istreambuf_iterator<char>{}};
  return read_gpu_log(std::string_view{text}, options);
}

gpu_log read_gpu_log_file(const std::filesystem::path& path, const log_read_options& options) {
  std::ifstream in{path, std::ios::binary};
  if (!in) throw logic_error{"cannot open the GPU log '" + path.string() + "'"};
  const std::string text{std::istreambuf_iterator<char>{in}, std::istreambuf_iterator<char>{}};
  if (in.bad()) throw logic_error{"cannot read the GPU log '" + path.string() + "'"};
  if (options.device_name.empty() && detect_log_format(text) == log_format::gpuz) {
    log_read_options named = options;
    named.device_name = path.stem().string();
    return read_gpuz_log(text, named);
  }
  return read_gpu_log(std::string_view{text}, options);
}

}  // namespace mgm::telemetry
