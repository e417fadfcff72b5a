// `nvidia-smi -q -x` logs: the XML documents one after another (see smi_query_shared.hpp).
#include "smi_query_shared.hpp"

#include <pugixml.hpp>

namespace mgm::telemetry {

using namespace smi_query_detail;

namespace {

// ---------------------------------------------------------------------------------------------
// XML (`nvidia-smi -q -x`)
// ---------------------------------------------------------------------------------------------

// Paths below `<gpu>`. Drivers from 535 on moved power into `gpu_power_readings` and renamed the
// limit `current_power_limit`; 545 on split the draw into `average_power_draw` and
// `instant_power_draw`.
constexpr std::array<metric_paths, 18> xml_table{{
    {metric::name, "name", {"product_name"}},
    {metric::uuid, "uuid", {"uuid"}},
    {metric::bus_id, "pci.bus_id", {"pci/pci_bus_id"}},
    {metric::memory_total, "memory.total", {"fb_memory_usage/total"}},
    {metric::memory_reserved, "memory.reserved", {"fb_memory_usage/reserved"}},
    {metric::memory_used, "memory.used", {"fb_memory_usage/used"}},
    {metric::memory_free, "memory.free", {"fb_memory_usage/free"}},
    {metric::utilization_gpu, "utilization.gpu", {"utilization/gpu_util"}},
    {metric::utilization_mem, "utilization.memory", {"utilization/memory_util"}},
    {metric::temperature, "temperature.gpu", {"temperature/gpu_temp"}},
    {metric::power_draw,
     "power.draw",
     {"power_readings/power_draw", "gpu_power_readings/power_draw", "gpu_power_readings/average_power_draw"}},
    {metric::power_limit,
     "power.limit",
     {"power_readings/power_limit", "gpu_power_readings/current_power_limit", "power_readings/enforced_power_limit"}},
    {metric::clock_sm, "clocks.sm", {"clocks/sm_clock"}},
    {metric::clock_mem, "clocks.mem", {"clocks/mem_clock"}},
    {metric::pcie_gen, "pcie.link.gen.current", {"pci/pci_gpu_link_info/pcie_gen/current_link_gen"}},
    {metric::pcie_width, "pcie.link.width.current", {"pci/pci_gpu_link_info/link_widths/current_link_width"}},
    {metric::pcie_tx, "pcie.tx", {"pci/tx_util"}},
    {metric::pcie_rx, "pcie.rx", {"pci/rx_util"}},
}};

// Line numbers of offsets into the whole text.
class line_index {
 public:
  explicit line_index(std::string_view text) {
    starts_.push_back(0);
    for (std::size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '\n') starts_.push_back(i + 1);
    }
  }
  [[nodiscard]] std::size_t line_of(std::size_t offset) const {
    return static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), offset) - starts_.begin());
  }
  [[nodiscard]] std::size_t column_of(std::size_t offset) const { return offset - starts_[line_of(offset) - 1] + 1; }

 private:
  std::vector<std::size_t> starts_;
};

std::string element_text(const pugi::xml_node& n) { return std::string{trim(n.child_value())}; }

// Every element with text below `node`, by path; `processes` and `supported_clocks` (hundreds of
// entries nobody samples) are not walked.
void flatten(const pugi::xml_node& node, const std::string& prefix, flat_gpu& out, const line_index& lines,
             std::size_t base, int depth) {
  if (depth > 32) return;
  for (const auto& child : node.children()) {
    if (child.type() != pugi::node_element) continue;
    const std::string name = child.name();
    if (depth == 0 && (name == "processes" || name == "supported_clocks" || name == "accounted_processes")) continue;
    const std::string path = prefix.empty() ? name : prefix + '/' + name;
    if (child.first_child().type() == pugi::node_element) {
      flatten(child, path, out, lines, base, depth + 1);
    } else {
      out.add(path, element_text(child), lines.line_of(base + static_cast<std::size_t>(child.offset_debug())));
    }
  }
}

// The documents of a `-q -x -l` file: each starts at `<?xml` (or, without a declaration, at its
// root element). Offsets into `text`.
std::vector<std::pair<std::size_t, std::size_t>> xml_documents(std::string_view text) {
  std::vector<std::size_t> starts;
  for (std::size_t p = text.find("<?xml"); p != std::string_view::npos; p = text.find("<?xml", p + 5)) starts.push_back(p);
  if (starts.empty()) {
    for (std::size_t p = text.find("<nvidia_smi_log"); p != std::string_view::npos;
         p = text.find("<nvidia_smi_log", p + 15)) {
      starts.push_back(p);
    }
  }
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (std::size_t i = 0; i < starts.size(); ++i) {
    out.emplace_back(starts[i], i + 1 < starts.size() ? starts[i + 1] : text.size());
  }
  return out;
}

}  // namespace

gpu_log read_smi_query_xml(std::string_view text, const log_read_options& options) {
  // NUL bytes (a preallocated file) are not XML; drop them as every reader does.
  std::string clean;
  if (text.find('\0') != std::string_view::npos) {
    clean.reserve(text.size());
    for (const char c : text) {
      if (c != '\0') clean.push_back(c);
    }
    text = clean;
  }
  const line_index lines{text};
  log_builder builder{"nvidia-smi-xml", "nvidia-smi XML", options};
  const auto docs = xml_documents(text);
  if (docs.empty()) {
    throw parse_error::at("nvidia-smi XML", 1, 0, "no <nvidia_smi_log> document (the output of nvidia-smi -q -x)");
  }
  for (const auto& [begin, end] : docs) {
    const std::string_view chunk = text.substr(begin, end - begin);
    pugi::xml_document doc;
    const auto result = doc.load_buffer(chunk.data(), chunk.size(), pugi::parse_default, pugi::encoding_utf8);
    if (!result) {
      const auto at = begin + static_cast<std::size_t>(std::max<std::ptrdiff_t>(result.offset, 0));
      builder.issue(lines.line_of(at), lines.column_of(at),
                    std::string{"not well-formed XML ("} + result.description() +
                        "); a document cut short where logging stopped?");
      continue;
    }
    const auto root = doc.document_element();
    if (std::string_view{root.name()} != "nvidia_smi_log") {
      builder.issue(lines.line_of(begin + static_cast<std::size_t>(root.offset_debug())), 0,
                    std::string{"root element <"} + root.name() + "> is not <nvidia_smi_log>");
      continue;
    }
    std::optional<clock::time_point> time;
    if (const auto ts = root.child("timestamp")) {
      const auto t = element_text(ts);
      time = parse_ctime(t);
      if (!time) time = parse_log_time(t);
      if (!time) {
        builder.issue(lines.line_of(begin + static_cast<std::size_t>(ts.offset_debug())), 0,
                      "timestamp: '" + t + "' is not a time");
        continue;
      }
    }
    std::vector<flat_gpu> gpus;
    for (const auto& gpu : root.children("gpu")) {
      flat_gpu g;
      g.line = lines.line_of(begin + static_cast<std::size_t>(gpu.offset_debug()));
      g.bus_id = gpu.attribute("id").value();
      flatten(gpu, "", g, lines, begin, 0);
      for (const auto& info : gpu.child("processes").children("process_info")) {
        process_at p;
        p.line = lines.line_of(begin + static_cast<std::size_t>(info.offset_debug()));
        const auto pid_text = element_text(info.child("pid"));
        std::uint32_t pid = 0;
        const auto [ptr, ec] = std::from_chars(pid_text.data(), pid_text.data() + pid_text.size(), pid);
        if (ec != std::errc{} || ptr != pid_text.data() + pid_text.size()) continue;  // no process id: not a process
        p.process.pid = pid;
        p.process.name = element_text(info.child("process_name"));
        p.used_text = element_text(info.child("used_memory"));
        g.processes.push_back(std::move(p));
      }
      gpus.push_back(std::move(g));
    }
    builder.document(time, gpus, xml_table);
  }
  return builder.take();
}

}  // namespace mgm::telemetry
