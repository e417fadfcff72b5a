// What the sinks share (csv_sink.cpp, process_csv_sink.cpp, jsonl_sink.cpp): the file they create,
// the write-and-flush of a batch, and the cells of nvidia-smi's CSV. Internal: not installed.
#pragma once

#include <mgm/error.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace mgm::telemetry::sink_detail {

inline constexpr std::uint64_t mib = 1024 * 1024;

/// `path` created (truncated) for a sink named `who`. @throws mgm::logic_error naming the path.
inline std::unique_ptr<std::ostream> open_for_writing(const std::filesystem::path& path, const char* who) {
  auto file = std::make_unique<std::ofstream>(path, std::ios::binary | std::ios::trunc);
  if (!*file) throw logic_error{std::string{who} + ": cannot create '" + path.string() + "'"};
  return file;
}

/// Writes `text` and flushes, so that the file is complete after each batch.
inline void emit(std::ostream& out, const std::string& text, const char* who) {
  out << text;
  out.flush();
  if (!out) throw std::runtime_error{std::string{who} + ": writing failed"};
}

/// A name in a CSV cell: what would cut the cell or the line becomes a space.
inline std::string clean_text(std::string s) {
  for (char& c : s) {
    if (c == ',' || c == '\n' || c == '\r' || c == '\0') c = ' ';
  }
  return s;
}

/// Appends the cells of one CSV row to `row` as nvidia-smi prints them: `, ` before each, a
/// missing value as `[N/A]`, memory in whole MiB, units after the value unless `units` is false.
struct csv_cell {
  bool units;
  std::string& row;

  void sep() { row += ", "; }
  void missing() {
    sep();
    row += "[N/A]";
  }
  void text(const std::string& s) {
    sep();
    row += s.empty() ? std::string{"[N/A]"} : clean_text(s);
  }
  void memory(const std::optional<std::uint64_t>& bytes) {
    if (!bytes) return missing();
    sep();
    row += std::to_string(*bytes / mib);
    if (units) row += " MiB";
  }
  void number(const std::optional<double>& v, std::string (*format)(double), std::string_view unit) {
    if (!v || !std::isfinite(*v)) return missing();
    sep();
    row += format(*v);
    if (units && !unit.empty()) (row += ' ') += unit;
  }
  void whole(const std::optional<unsigned>& v, std::string_view unit) {
    if (!v) return missing();
    sep();
    row += std::to_string(*v);
    if (units && !unit.empty()) (row += ' ') += unit;
  }
};

}  // namespace mgm::telemetry::sink_detail
