// The text of `nvidia-smi topo -m`, as people paste it: prompts, tabs and spaces however aligned,
// NIC rows, the legend and the NIC legend, old and new column sets.
#include <mgm/error.hpp>
#include <mgm/topology/topology.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>
#include <vector>

namespace mgm {
namespace {

struct token {
  std::string_view text;
  std::size_t column;  // 1-based
};

std::vector<token> split(std::string_view line) {
  std::vector<token> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    const std::size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') ++i;
    if (i > start) out.push_back({line.substr(start, i - start), start + 1});
  }
  return out;
}

bool is_gpu_name(std::string_view t) {
  return t.size() > 3 && t.substr(0, 3) == "GPU" &&
         std::all_of(t.begin() + 3, t.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; });
}

[[noreturn]] void fail(std::size_t line, std::size_t column, const std::string& why) {
  throw parse_error::at("nvidia-smi topo -m text", line, column, why);
}

std::optional<int> first_number(std::string_view s) {
  int v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end == s.data()) return std::nullopt;
  return v;
}

}  // namespace

topology parse_smi_topology(std::string_view text) {
  std::vector<std::string_view> lines;
  for (std::size_t start = 0; start <= text.size();) {
    const std::size_t nl = std::min(text.find('\n', start), text.size());
    lines.push_back(text.substr(start, nl - start));
    if (nl == text.size()) break;
    start = nl + 1;
  }
  if (lines.size() > 1 && lines.back().empty()) lines.pop_back();  // the final newline ends a line
  // The header: the first line whose first token is GPU0.
  std::size_t header = lines.size();
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto t = split(lines[i]);
    if (!t.empty() && t[0].text == "GPU0") {
      header = i;
      break;
    }
  }
  if (header == lines.size()) {
    fail(std::max<std::size_t>(lines.size(), 1), 0,
         "no nvidia-smi topo -m matrix found (expected a header line starting with GPU0)");
  }
  const auto head = split(lines[header]);
  std::vector<std::string> columns;  // device columns: GPUn, NICn, mlx5_n, ...
  std::size_t k = 0;
  for (; k < head.size() && head[k].text != "CPU" && head[k].text != "NUMA" && head[k].text != "GPU"; ++k) {
    columns.emplace_back(head[k].text);
  }
  std::vector<std::string> extras;  // "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"
  for (; k < head.size(); ++k) {
    const bool after_gpu = !extras.empty() && extras.back() == "GPU";
    if (head[k].text == "CPU" || (head[k].text == "NUMA" && !after_gpu) ||
        (head[k].text == "GPU" && k + 1 < head.size() && head[k + 1].text == "NUMA")) {
      extras.emplace_back(head[k].text);
    } else if (!extras.empty()) {
      extras.back() += " " + std::string{head[k].text};
    }
  }
  std::size_t gpus = 0;
  while (gpus < columns.size() && is_gpu_name(columns[gpus])) ++gpus;
  if (gpus == 0) fail(header + 1, 1, "the header names no GPU");
  for (std::size_t g = 0; g < gpus; ++g) {
    if (columns[g] != "GPU" + std::to_string(g)) fail(header + 1, head[g].column, "expected GPU" + std::to_string(g));
  }

  std::vector<std::vector<std::string_view>> labels(columns.size());
  std::vector<std::vector<std::string_view>> extra_values(columns.size());
  std::vector<bool> seen(columns.size(), false);
  std::vector<std::pair<std::string, std::string>> nic_legend;
  std::size_t i = header + 1;
  for (; i < lines.size(); ++i) {
    const auto t = split(lines[i]);
    if (t.empty()) continue;
    if (t[0].text == "Legend:" || t[0].text == "NIC") break;
    const auto row = std::find(columns.begin(), columns.end(), t[0].text);
    if (row == columns.end()) fail(i + 1, t[0].column, "'" + std::string{t[0].text} + "' is not a column of the header");
    const auto r = static_cast<std::size_t>(row - columns.begin());
    if (seen[r]) fail(i + 1, t[0].column, "a second row for " + std::string{t[0].text});
    seen[r] = true;
    if (t.size() < 1 + columns.size()) {
      fail(i + 1, t.back().column, "expected " + std::to_string(columns.size()) + " labels, found " + std::to_string(t.size() - 1));
    }
    for (std::size_t c = 0; c < columns.size(); ++c) labels[r].push_back(t[1 + c].text);
    for (std::size_t e = 1 + columns.size(); e < t.size(); ++e) extra_values[r].push_back(t[e].text);
  }
  for (; i < lines.size(); ++i) {  // the NIC legend: "  NIC0: mlx5_0"
    const auto t = split(lines[i]);
    if (t.size() == 2 && t[0].text.size() > 4 && t[0].text.substr(0, 3) == "NIC" && t[0].text.back() == ':') {
      nic_legend.emplace_back(std::string{t[0].text.substr(0, t[0].text.size() - 1)}, std::string{t[1].text});
    }
  }
  for (std::size_t r = 0; r < columns.size(); ++r) {
    if (!seen[r]) fail(header + 1, 0, "no row for " + columns[r]);
  }

  std::vector<gpu_info> infos(gpus);
  for (std::size_t g = 0; g < gpus; ++g) {
    infos[g].ordinal = static_cast<int>(g);
    for (std::size_t e = 0; e < extras.size() && e < extra_values[g].size(); ++e) {
      const std::string_view v = extra_values[g][e];
      if (extras[e] == "CPU Affinity") {
        infos[g].cpu_affinity = v == "N/A" ? "" : std::string{v};
      } else if (extras[e] == "NUMA Affinity") {
        infos[g].numa_affinity = v == "N/A" ? "" : std::string{v};
        if (v != "N/A") infos[g].numa_node = first_number(v);
      } else if (extras[e] == "GPU NUMA ID" && v != "N/A") {
        infos[g].gpu_numa_id = first_number(v);
      }
    }
  }
  topology t{std::move(infos)};
  std::vector<std::vector<std::string_view>> gpu_labels(gpus);
  for (std::size_t r = 0; r < gpus; ++r) gpu_labels[r].assign(labels[r].begin(), labels[r].begin() + static_cast<long>(gpus));
  try {
    t.set_paths_from_labels(gpu_labels);
  } catch (const logic_error& e) {
    fail(header + 1, 0, e.what());
  }
  for (std::size_t c = gpus; c < columns.size(); ++c) {
    nic_info nic;
    nic.name = columns[c];
    for (const auto& [alias, dev] : nic_legend) {
      if (alias == columns[c]) nic.device = dev;
    }
    if (nic.device.empty() && columns[c].rfind("NIC", 0) != 0) nic.device = columns[c];
    for (std::size_t g = 0; g < gpus; ++g) {
      try {
        nic.to_gpu.push_back(gpu_path::from_label(labels[g][c]));
      } catch (const logic_error& e) {
        fail(header + 1, 0, columns[c] + ": " + e.what());
      }
    }
    t.add_nic(std::move(nic));
  }
  return t;
}

}  // namespace mgm
