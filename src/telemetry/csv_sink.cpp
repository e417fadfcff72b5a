// Our nvidia-smi `--query-gpu` CSV (DESIGN.md §7): its header, its rows, and `csv_sink`.
#include "sink_shared.hpp"

#include <mgm/telemetry/log_format.hpp>

#include "../detail/fmt.hpp"

#include <string>

namespace mgm::telemetry {
namespace {

using sink_detail::csv_cell;
using sink_detail::emit;
using sink_detail::open_for_writing;

// Two decimals, as nvidia-smi prints watts.
std::string fixed2(double v) { return fmt::format("{:.2f}", v); }

// At most two decimals, trailing zeros dropped: `70`, `56.6`.
std::string trimmed2(double v) {
  std::string s = fixed2(v);
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

}  // namespace

std::string csv_header() {
  return "timestamp, index, uuid, name, memory.total [MiB], memory.used [MiB], memory.free [MiB], "
         "memory.reserved [MiB], temperature.gpu, power.draw [W], power.limit [W], clocks.current.sm [MHz], "
         "clocks.current.memory [MHz], pcie.link.gen.current, pcie.link.width.current, utilization.gpu [%], "
         "mgm.pcie.rx [MB/s], mgm.pcie.tx [MB/s], mgm.nvlink.up, mgm.pool.allocated [MiB], mgm.pool.reserved [MiB]";
}

std::string csv_row(const device_sample& s, bool units) {
  std::string row = format_smi_time(s.time);
  csv_cell c{units, row};
  c.sep();
  row += std::to_string(s.index);
  c.text(s.uuid);
  c.text(s.name);
  c.memory(s.memory_total);
  c.memory(s.memory_used);
  c.memory(s.memory_free);
  c.memory(s.memory_reserved);
  c.number(s.temperature_c, trimmed2, "");
  c.number(s.power_draw_w, fixed2, "W");
  c.number(s.power_limit_w, fixed2, "W");
  c.whole(s.clock_sm_mhz, "MHz");
  c.whole(s.clock_mem_mhz, "MHz");
  c.whole(s.pcie_gen, "");
  c.whole(s.pcie_width, "");
  c.whole(s.utilization_gpu_pct, "%");
  c.number(s.pcie_rx_mb_s, fixed2, "MB/s");
  c.number(s.pcie_tx_mb_s, fixed2, "MB/s");
  c.whole(s.nvlink_up, "");
  c.memory(s.pool_allocated);
  c.memory(s.pool_reserved);
  return row;
}

csv_sink::csv_sink(std::ostream& out, bool units) : out_{&out}, units_{units} {
  emit(*out_, csv_header() + '\n', "csv_sink");
}
csv_sink::csv_sink(const std::filesystem::path& path, bool units)
    : owned_{open_for_writing(path, "csv_sink")}, out_{owned_.get()}, units_{units} {
  emit(*out_, csv_header() + '\n', "csv_sink");
}
csv_sink::csv_sink(csv_sink&&) noexcept = default;
csv_sink& csv_sink::operator=(csv_sink&&) noexcept = default;
csv_sink::~csv_sink() = default;

void csv_sink::write(std::span<const device_sample> batch) {
  std::string text;
  for (const auto& s : batch) (text += csv_row(s, units_)) += '\n';
  emit(*out_, text, "csv_sink");
}

}  // namespace mgm::telemetry
