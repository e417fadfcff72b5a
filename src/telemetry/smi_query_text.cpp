// `nvidia-smi -q` and `-q -d MEMORY,...` text logs, runs one after another (see smi_query_shared.hpp).
#include "log_internal.hpp"
#include "smi_query_shared.hpp"

namespace mgm::telemetry {

using namespace smi_query_detail;

namespace {

// ---------------------------------------------------------------------------------------------
// Text (`nvidia-smi -q`, `-q -d MEMORY,...`)
// ---------------------------------------------------------------------------------------------

// Paths below `GPU <bus id>`, as section names joined by `/`. Newer drivers say `GPU Power
// Readings`, `Current Power Limit`, `Average Power Draw`.
constexpr std::array<metric_paths, 18> text_table{{
    {metric::name, "name", {"Product Name"}},
    {metric::uuid, "uuid", {"GPU UUID"}},
    {metric::bus_id, "pci.bus_id", {"PCI/Bus Id"}},
    {metric::memory_total, "memory.total", {"FB Memory Usage/Total"}},
    {metric::memory_reserved, "memory.reserved", {"FB Memory Usage/Reserved"}},
    {metric::memory_used, "memory.used", {"FB Memory Usage/Used"}},
    {metric::memory_free, "memory.free", {"FB Memory Usage/Free"}},
    {metric::utilization_gpu, "utilization.gpu", {"Utilization/Gpu", "Utilization/GPU"}},
    {metric::utilization_mem, "utilization.memory", {"Utilization/Memory"}},
    {metric::temperature, "temperature.gpu", {"Temperature/GPU Current Temp"}},
    {metric::power_draw,
     "power.draw",
     {"Power Readings/Power Draw", "GPU Power Readings/Power Draw", "GPU Power Readings/Average Power Draw"}},
    {metric::power_limit,
     "power.limit",
     {"Power Readings/Power Limit", "GPU Power Readings/Current Power Limit", "Power Readings/Enforced Power Limit"}},
    {metric::clock_sm, "clocks.sm", {"Clocks/SM"}},
    {metric::clock_mem, "clocks.mem", {"Clocks/Memory"}},
    {metric::pcie_gen, "pcie.link.gen.current", {"PCI/GPU Link Info/PCIe Generation/Current"}},
    {metric::pcie_width, "pcie.link.width.current", {"PCI/GPU Link Info/Link Width/Current"}},
    {metric::pcie_tx, "pcie.tx", {"PCI/Tx Throughput"}},
    {metric::pcie_rx, "pcie.rx", {"PCI/Rx Throughput"}},
}};

std::size_t indent_of(std::string_view line) {
  std::size_t width = 0;
  for (const char c : line) {
    if (c == ' ') {
      ++width;
    } else if (c == '\t') {
      width += 4;
    } else {
      break;
    }
  }
  return width;
}

// `GPU 00000000:07:00.0` (domain of 4 or 8 hex digits, as older drivers print `0000:01:00.0`).
std::optional<std::string_view> gpu_head(std::string_view body) {
  if (body.size() < 4 || body.substr(0, 4) != "GPU ") return std::nullopt;
  const auto id = trim(body.substr(4));
  const auto colon = id.find(':');
  if (colon == std::string_view::npos || (colon != 4 && colon != 8) || id.find(' ') != std::string_view::npos) {
    return std::nullopt;
  }
  for (std::size_t i = 0; i < colon; ++i) {
    if (std::isxdigit(static_cast<unsigned char>(id[i])) == 0) return std::nullopt;
  }
  return id;
}

bool banner(std::string_view body) { return body.find("NVSMI LOG") != std::string_view::npos && body.front() == '='; }

}  // namespace

bool detail::is_smi_query_text_line(std::string_view line) noexcept {
  const auto body = trim(line);
  if (body.empty()) return false;
  if (banner(body)) return true;
  return indent_of(line) == 0 && gpu_head(body).has_value();
}

gpu_log read_smi_query_text(std::string_view text, const log_read_options& options) {
  log_builder builder{"nvidia-smi-q", "nvidia-smi -q", options};
  struct open_section {
    std::size_t indent;
    std::string name;
  };
  std::vector<open_section> stack;  // the sections the current line is inside, below the GPU
  std::vector<flat_gpu> gpus;
  std::optional<clock::time_point> time;
  bool in_document = false;
  bool in_gpu = false;
  bool any = false;

  bool bad_time = false;  // a document whose Timestamp cannot be read is left out (lenient mode)
  auto close_document = [&] {
    if (in_document && !gpus.empty() && !bad_time) builder.document(time, gpus, text_table);
    gpus.clear();
    time.reset();
    bad_time = false;
    in_gpu = false;
    in_document = false;
  };

  for (const auto& line : detail::split_log_lines(text)) {
    const std::string_view body = trim(line.text);
    if (body.empty()) continue;
    const std::size_t indent = indent_of(line.text);
    if (banner(body)) {
      close_document();
      in_document = true;
      any = true;
      continue;
    }
    const auto colon = body.find(':');
    const std::string_view key = trim(body.substr(0, colon));
    const std::string_view value = colon == std::string_view::npos ? std::string_view{} : trim(body.substr(colon + 1));
    if (indent == 0) {
      if (const auto id = gpu_head(body)) {
        if (!in_document) {  // a paste without the banner
          in_document = true;
          any = true;
        }
        flat_gpu g;
        g.line = line.number;
        g.bus_id = std::string{*id};
        gpus.push_back(std::move(g));
        stack.clear();
        in_gpu = true;
        continue;
      }
      in_gpu = false;
      if (key == "Timestamp" && colon != std::string_view::npos) {
        // A timestamp after GPUs starts the next document even without the banner.
        if (!gpus.empty()) close_document();
        in_document = true;
        any = true;
        time = parse_ctime(value);
        if (!time) time = parse_log_time(value);
        if (!time) {
          builder.issue(line.number, 0, "Timestamp: '" + std::string{value} + "' is not a time");
          bad_time = true;
        }
      }
      continue;  // Driver Version, CUDA Version, Attached GPUs, or text around a paste
    }
    if (!in_gpu) continue;
    while (!stack.empty() && stack.back().indent >= indent) stack.pop_back();
    std::string path;
    for (const auto& s : stack) {
      path += s.name;
      path += '/';
    }
    path += key;
    stack.push_back({indent, std::string{key}});
    if (colon == std::string_view::npos) continue;  // a section head
    auto& g = gpus.back();
    if (path == "Processes/Process ID") {
      process_at p;
      p.line = line.number;
      std::uint32_t pid = 0;
      const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), pid);
      if (ec != std::errc{} || ptr != value.data() + value.size()) {
        builder.issue(line.number, 0, "Process ID: '" + std::string{value} + "' is not a process id");
        continue;
      }
      p.process.pid = pid;
      g.processes.push_back(std::move(p));
    } else if (path == "Processes/Process ID/Name" && !g.processes.empty()) {
      g.processes.back().process.name = std::string{value};
    } else if (path == "Processes/Process ID/Used GPU Memory" && !g.processes.empty()) {
      g.processes.back().used_text = std::string{value};
    } else {
      g.add(std::move(path), std::string{value}, line.number);
    }
  }
  close_document();
  if (!any) {
    throw parse_error::at("nvidia-smi -q", 1, 0,
                          "no '==============NVSMI LOG==============' banner and no 'GPU 00000000:xx:00.0' section");
  }
  return builder.take();
}

}  // namespace mgm::telemetry
