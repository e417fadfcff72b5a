// The text of `nvidia-smi topo -m`, as people paste it: prompts, tabs and spaces however aligned
// (tabs turned into runs of spaces included), NIC rows, the legend and the NIC legend, old and new
// column sets, and the cells nvidia-smi itself runs together when a column is too narrow
// ("NIC7NIC8" in the header, "SYSSYS" or "PXBSYS" in a row).
//
// How a line is cut: at whitespace first; then a word that holds more than one known label is cut
// at each label. In the header the labels are GPU#, NIC# and the three captions that hold spaces
// ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID"); in a row they are X, NV#, PIX, PXB, PHB, NODE,
// SYS (and the legacy SOC). The values after a GPU row's cells (CPU and NUMA affinity, GPU NUMA
// ID) never hold a space, so one word is one value.
//
// Errors never pass on a library exception's text (it carries a source location): every check is
// made here, against the line and column of the cell.
#include <mgm/error.hpp>
#include <mgm/topology/topology.hpp>

#include <algorithm>
#include <array>
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

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' || c == '\0'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::vector<token> split(std::string_view line) {
  std::vector<token> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_space(line[i])) ++i;
    const std::size_t start = i;
    while (i < line.size() && !is_space(line[i])) ++i;
    if (i > start) out.push_back({line.substr(start, i - start), start + 1});
  }
  return out;
}

// The length of "GPU12" / "NIC3" at the start of `s`; 0 when `s` does not start with one.
std::size_t numbered_at(std::string_view s) {
  if (s.size() < 4 || (s.substr(0, 3) != "GPU" && s.substr(0, 3) != "NIC") || !is_digit(s[3])) return 0;
  std::size_t n = 3;
  while (n < s.size() && is_digit(s[n])) ++n;
  return n;
}

bool is_numbered(std::string_view s, std::string_view prefix) {
  return s.substr(0, 3) == prefix && numbered_at(s) == s.size();
}

// The length of a link label (X, NV#, PIX, PXB, PHB, NODE, SYS, SOC) at the start of `s`; 0 if none.
std::size_t label_at(std::string_view s) {
  if (s.empty()) return 0;
  if (s[0] == 'X') return 1;
  if (s.size() >= 3 && s.substr(0, 2) == "NV" && is_digit(s[2])) {
    std::size_t n = 2;
    while (n < s.size() && is_digit(s[n])) ++n;
    return n;
  }
  if (s.substr(0, 4) == "NODE") return 4;
  for (const std::string_view l : {"PIX", "PXB", "PHB", "SYS", "SOC"}) {
    if (s.substr(0, 3) == l) return 3;
  }
  return 0;
}

// A word cut where a GPU# or NIC# begins: "NIC7NIC8" -> NIC7, NIC8; "NIC15CPU" -> NIC15, CPU.
std::vector<token> cut_names(const token& w) {
  std::vector<token> out;
  std::size_t i = 0;
  while (i < w.text.size()) {
    std::size_t n = numbered_at(w.text.substr(i));
    if (n == 0) {  // up to the next GPU# / NIC#
      n = 1;
      while (i + n < w.text.size() && numbered_at(w.text.substr(i + n)) == 0) ++n;
    }
    out.push_back({w.text.substr(i, n), w.column + i});
    i += n;
  }
  return out;
}

// A word cut at each link label: "PXBSYS" -> PXB, SYS. What follows the last label and is none
// (an affinity run into a cell, a typo) stays one piece.
std::vector<token> cut_labels(const token& w) {
  std::vector<token> out;
  std::size_t i = 0;
  while (i < w.text.size()) {
    const std::size_t n = label_at(w.text.substr(i));
    if (n == 0) {
      out.push_back({w.text.substr(i), w.column + i});
      break;
    }
    out.push_back({w.text.substr(i, n), w.column + i});
    i += n;
  }
  return out;
}

// The header's captions that hold spaces, word by word.
constexpr std::array<std::array<std::string_view, 3>, 3> captions{{
    {"CPU", "Affinity", ""},
    {"NUMA", "Affinity", ""},
    {"GPU", "NUMA", "ID"},
}};

struct header_line {
  std::vector<token> devices;        // GPU#, NIC#, mlx5_0, ...
  std::vector<std::string> extras;   // "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"
};

header_line read_header(std::string_view line) {
  std::vector<token> words;
  for (const auto& w : split(line)) {
    for (const auto& p : cut_names(w)) words.push_back(p);
  }
  header_line h;
  for (std::size_t k = 0; k < words.size();) {
    bool caption = false;
    for (const auto& c : captions) {
      const std::size_t len = c[2].empty() ? 2 : 3;
      if (k + len > words.size()) continue;
      bool match = true;
      for (std::size_t j = 0; j < len; ++j) match = match && words[k + j].text == c[j];
      if (!match) continue;
      std::string name{c[0]};
      for (std::size_t j = 1; j < len; ++j) name += " " + std::string{c[j]};
      h.extras.push_back(std::move(name));
      k += len;
      caption = true;
      break;
    }
    if (caption) continue;
    if (h.extras.empty()) {
      h.devices.push_back(words[k]);
    } else {
      h.extras.back() += " " + std::string{words[k].text};  // a caption this reader does not know
    }
    ++k;
  }
  return h;
}

// The header: the first line that starts with a GPU# or NIC# not followed by a link label (a row
// is "GPU0  X  NV4 ...", the header "GPU0  GPU1 ..." or "GPU0  CPU Affinity").
bool looks_like_header(std::string_view line) {
  const auto split_words = split(line);
  if (split_words.empty()) return false;
  for (const auto& p : cut_names(split_words[0])) {  // "GPU0" or "GPU0GPU1", not "NIC0:" nor "GPU0X"
    if (numbered_at(p.text) != p.text.size()) return false;
  }
  std::vector<token> words;
  for (const auto& w : split_words) {
    for (const auto& p : cut_names(w)) words.push_back(p);
  }
  return words.size() == 1 || label_at(words[1].text) == 0;
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

// A cell as the topology keeps it; the text is a label by `label_at`, but NV0 or NV12345 is none.
std::optional<gpu_path> path_of(std::string_view label) {
  try {
    return gpu_path::from_label(label);
  } catch (const logic_error&) {
    return std::nullopt;
  }
}

struct cell {
  gpu_path path;
  std::string_view text;
  std::size_t line;    // 1-based
  std::size_t column;  // 1-based
};

std::string join(const std::vector<token>& words) {
  std::string s;
  for (const auto& w : words) s += (s.empty() ? "" : " ") + std::string{w.text};
  return s;
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

  std::size_t header = lines.size();
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (looks_like_header(lines[i])) {
      header = i;
      break;
    }
  }
  if (header == lines.size()) {
    for (std::size_t i = 0; i < lines.size(); ++i) {
      const auto t = split(lines[i]);
      if (!t.empty() && t[0].text == "GPU0") {
        fail(i + 1, t[0].column, "the header line is missing: this row of GPU0 has no line of column names (GPU0 GPU1 ...) above it");
      }
    }
    fail(std::max<std::size_t>(lines.size(), 1), 0,
         "no nvidia-smi topo -m matrix found (expected a header line starting with GPU0)");
  }
  const header_line head = read_header(lines[header]);
  const std::size_t header_no = header + 1;
  const std::string header_text = join(split(lines[header]));
  if (head.devices.empty() || head.devices[0].text != "GPU0") {
    const bool has_gpu0 = std::any_of(head.devices.begin(), head.devices.end(), [](const token& d) { return d.text == "GPU0"; });
    fail(header_no, head.devices.empty() ? 1 : head.devices[0].column,
         "the header line '" + header_text + "' " +
             (has_gpu0 ? std::string{"does not start with its GPU0 column"} : std::string{"has no GPU0 column"}));
  }
  std::vector<std::string> columns;  // device columns: GPUn, NICn, mlx5_n, ...
  std::size_t gpus = 0;
  for (const auto& d : head.devices) {
    const std::string name{d.text};
    if (std::find(columns.begin(), columns.end(), name) != columns.end()) {
      fail(header_no, d.column, "the header line names " + name + " twice");
    }
    if (is_numbered(d.text, "GPU")) {
      if (gpus != columns.size() || name != "GPU" + std::to_string(gpus)) {
        fail(header_no, d.column, "the header line has " + name + " where " +
                                      (gpus == columns.size() ? "GPU" + std::to_string(gpus) : std::string{"a NIC"}) +
                                      " belongs (GPUs come first, GPU0, GPU1, ... in order)");
      }
      ++gpus;
    } else if (label_at(d.text) == d.text.size()) {
      fail(header_no, d.column, "the header line has the link label '" + name + "' among its column names");
    }
    columns.push_back(name);
  }
  const std::size_t nc = columns.size();

  // Rows: the cells of each device, where they were.
  std::vector<std::vector<cell>> cells(nc);
  std::vector<std::vector<token>> extra_values(nc);
  std::vector<std::size_t> row_line(nc, 0);
  std::size_t i = header + 1;
  for (; i < lines.size(); ++i) {
    const auto words = split(lines[i]);
    if (words.empty()) continue;
    if (words[0].text == "Legend:" || words[0].text == "NIC") break;
    const auto named = cut_names(words[0]);
    const token name = named[0];
    const auto row = std::find(columns.begin(), columns.end(), name.text);
    if (row == columns.end()) fail(i + 1, name.column, "'" + std::string{name.text} + "' is not a column of the header");
    const auto r = static_cast<std::size_t>(row - columns.begin());
    if (row_line[r] != 0) fail(i + 1, name.column, "a second row for " + std::string{name.text});
    row_line[r] = i + 1;
    std::vector<token> rest(named.begin() + 1, named.end());  // "NIC10SYS": the name ran into a cell
    rest.insert(rest.end(), words.begin() + 1, words.end());
    for (const auto& w : rest) {
      if (cells[r].size() == nc) {
        extra_values[r].push_back(w);
        continue;
      }
      const auto pieces = cut_labels(w);
      for (std::size_t p = 0; p < pieces.size(); ++p) {
        if (cells[r].size() == nc) {  // the last cell ran into the first value: "SYS0-31"
          extra_values[r].push_back(pieces[p]);
          continue;
        }
        const auto path = label_at(pieces[p].text) == pieces[p].text.size() ? path_of(pieces[p].text) : std::nullopt;
        if (!path) {
          fail(i + 1, pieces[p].column, "'" + std::string{pieces[p].text} + "' in the column of " + columns[cells[r].size()] +
                                            " is not a link label (expected X, NV#, PIX, PXB, PHB, NODE or SYS)");
        }
        cells[r].push_back({*path, pieces[p].text, i + 1, pieces[p].column});
      }
    }
    if (cells[r].size() < nc) {
      fail(i + 1, rest.empty() ? name.column : rest.back().column,
           "expected " + std::to_string(nc) + " labels, found " + std::to_string(cells[r].size()));
    }
    if (r < gpus && extra_values[r].size() > head.extras.size()) {
      const auto& v = extra_values[r][head.extras.size()];
      fail(i + 1, v.column, "'" + std::string{v.text} + "' is past the header's last column (" +
                                (head.extras.empty() ? columns.back() : head.extras.back()) + ")");
    }
  }
  std::vector<std::pair<std::string, std::string>> nic_legend;
  for (; i < lines.size(); ++i) {  // the NIC legend: "  NIC0: mlx5_0"
    const auto t = split(lines[i]);
    if (t.empty()) continue;
    const std::size_t n = numbered_at(t[0].text);
    if (n == 0 || t[0].text.substr(0, 3) != "NIC" || n >= t[0].text.size() || t[0].text[n] != ':') continue;
    const std::string_view after = t[0].text.substr(n + 1);  // "NIC0:mlx5_0" without its space
    const std::string_view device = !after.empty() ? after : t.size() > 1 ? t[1].text : std::string_view{};
    if (!device.empty()) nic_legend.emplace_back(std::string{t[0].text.substr(0, n)}, std::string{device});
  }
  for (std::size_t r = 0; r < nc; ++r) {
    if (row_line[r] == 0) fail(header_no, 0, "no row for " + columns[r]);
  }
  // X on the diagonal and nowhere else; the same label both ways.
  for (std::size_t r = 0; r < nc; ++r) {
    for (std::size_t c = 0; c < nc; ++c) {
      const cell& x = cells[r][c];
      if ((r == c) != (x.path.smi == smi_label::x)) {
        fail(x.line, x.column, r == c ? columns[r] + " to itself must be X, not '" + std::string{x.text} + "'"
                                      : "'X' belongs on the diagonal only, not in the column of " + columns[c]);
      }
      const cell& y = cells[c][r];
      if (r > c && !(x.path == y.path)) {
        fail(x.line, x.column, columns[r] + "-" + columns[c] + " is " + std::string{x.text} + " but " + columns[c] + "-" +
                                   columns[r] + " (line " + std::to_string(y.line) + ") is " + std::string{y.text});
      }
    }
  }

  std::vector<gpu_info> infos(gpus);
  for (std::size_t g = 0; g < gpus; ++g) {
    infos[g].ordinal = static_cast<int>(g);
    for (std::size_t e = 0; e < head.extras.size() && e < extra_values[g].size(); ++e) {
      const std::string_view v = extra_values[g][e].text;
      if (head.extras[e] == "CPU Affinity") {
        infos[g].cpu_affinity = v == "N/A" ? "" : std::string{v};
      } else if (head.extras[e] == "NUMA Affinity") {
        infos[g].numa_affinity = v == "N/A" ? "" : std::string{v};
        if (v != "N/A") infos[g].numa_node = first_number(v);
      } else if (head.extras[e] == "GPU NUMA ID" && v != "N/A") {
        infos[g].gpu_numa_id = first_number(v);
      }
    }
  }
  topology t{std::move(infos)};
  for (std::size_t a = 0; a < gpus; ++a) {
    for (std::size_t b = a + 1; b < gpus; ++b) {
      t.set_path(device_id{static_cast<int>(a)}, device_id{static_cast<int>(b)}, cells[a][b].path);
    }
  }
  for (std::size_t c = gpus; c < nc; ++c) {
    nic_info nic;
    nic.name = columns[c];
    for (const auto& [alias, dev] : nic_legend) {
      if (alias == columns[c]) nic.device = dev;
    }
    if (nic.device.empty() && columns[c].rfind("NIC", 0) != 0) nic.device = columns[c];
    for (std::size_t g = 0; g < gpus; ++g) nic.to_gpu.push_back(cells[g][c].path);
    for (std::size_t k = gpus; k < nc; ++k) nic.to_nic.push_back(cells[c][k].path);
    t.add_nic(std::move(nic));
  }
  return t;
}

}  // namespace mgm
