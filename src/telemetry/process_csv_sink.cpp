// Our nvidia-smi `--query-compute-apps` CSV: its header, its rows, and `process_csv_sink`.
#include "sink_shared.hpp"

#include <mgm/telemetry/log_format.hpp>

#include <string>

namespace mgm::telemetry {
namespace {

using sink_detail::csv_cell;
using sink_detail::emit;
using sink_detail::open_for_writing;

std::string process_csv_row(clock::time_point time, const std::string& uuid, const process_sample& p, bool units) {
  std::string row = format_smi_time(time);
  csv_cell c{units, row};
  c.text(uuid);
  c.sep();
  row += std::to_string(p.pid);
  c.text(p.name);
  c.memory(p.used_bytes);
  return row;
}

}  // namespace

std::string process_csv_header() { return "timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]"; }

process_csv_sink::process_csv_sink(std::ostream& out, bool units) : out_{&out}, units_{units} {
  emit(*out_, process_csv_header() + '\n', "process_csv_sink");
}
process_csv_sink::process_csv_sink(const std::filesystem::path& path, bool units)
    : owned_{open_for_writing(path, "process_csv_sink")}, out_{owned_.get()}, units_{units} {
  emit(*out_, process_csv_header() + '\n', "process_csv_sink");
}
process_csv_sink::process_csv_sink(process_csv_sink&&) noexcept = default;
process_csv_sink& process_csv_sink::operator=(process_csv_sink&&) noexcept = default;
process_csv_sink::~process_csv_sink() = default;

void process_csv_sink::write(std::span<const device_sample> batch) {
  std::string text;
  for (const auto& s : batch) {
    for (const auto& p : s.processes) (text += process_csv_row(s.time, s.uuid, p, units_)) += '\n';
  }
  emit(*out_, text, "process_csv_sink");
}

void process_csv_sink::write(std::span<const process_row> rows) {
  std::string text;
  for (const auto& r : rows) (text += process_csv_row(r.time, r.gpu_uuid, r.process, units_)) += '\n';
  emit(*out_, text, "process_csv_sink");
}

}  // namespace mgm::telemetry
