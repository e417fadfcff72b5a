// NCCL's topology XML (NCCL_TOPO_FILE): read into a topology (with pugixml), and written from one.
#include <mgm/error.hpp>
#include <mgm/topology/topology.hpp>

#include "../detail/fmt.hpp"
#include <pugixml.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mgm {
namespace {

using xml_element = pugi::xml_node;

// NCCL's files nest a few PCI bridges deep; deeper nesting is not a machine (and the walk below
// recurses once per level, so a fuzzer's million-deep nesting must stop here).
constexpr std::size_t max_depth = 64;

// Attributes as written (no tab or newline folding: pugixml's parse_wconv_attribute and parse_eol
// off), the five entities and character references decoded; comments and the declaration skipped.
constexpr unsigned parse_options = pugi::parse_default & ~(pugi::parse_wconv_attribute | pugi::parse_eol);

// The 1-based line and column of byte `offset` of `text`.
std::pair<std::size_t, std::size_t> line_column(std::string_view text, std::size_t offset) {
  offset = std::min(offset, text.size());
  std::size_t line = 1;
  std::size_t line_start = 0;
  for (std::size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return {line, offset - line_start + 1};
}

[[noreturn]] void fail_at(std::string_view text, std::size_t offset, std::string_view why) {
  const auto [line, column] = line_column(text, offset);
  throw parse_error::at("NCCL topology XML", line, column, why);
}

std::size_t offset_of(const xml_element& e) { return static_cast<std::size_t>(std::max<std::ptrdiff_t>(e.offset_debug(), 0)); }

bool named(const xml_element& e, std::string_view name) { return e.type() == pugi::node_element && name == e.name(); }

std::string attr_or(const xml_element& e, const char* key) { return e.attribute(key).as_string(); }

/// The document of `text`, or parse_error naming the line and column where it stops being XML.
void load(pugi::xml_document& doc, std::string_view text) {
  const pugi::xml_parse_result result = doc.load_buffer(text.data(), text.size(), parse_options, pugi::encoding_utf8);
  if (result) return;
  auto at = static_cast<std::size_t>(std::max<std::ptrdiff_t>(result.offset, 0));
  std::string why = std::string{"not well-formed XML ("} + result.description() + ")";
  const bool at_end = text.find_first_not_of(" \t\r\n", std::min(at, text.size())) == std::string_view::npos;
  if (result.status == pugi::status_end_element_mismatch && at_end) {
    why += ": the text ends before every element is closed";
  } else if (result.status == pugi::status_end_element_mismatch) {
    // pugixml points at the closing tag's name: name it, and point just after it.
    std::size_t end = at;
    while (end < text.size() && text[end] != '>' && text[end] != '<' &&
           std::isspace(static_cast<unsigned char>(text[end])) == 0) {
      ++end;
    }
    if (end > at) why += ": </" + std::string{text.substr(at, end - at)} + "> closes an element not open";
    at = end;
  }
  fail_at(text, at, why);
}

struct found_device {
  std::string busid;
  std::size_t cpu{0};  // the socket: its NUMA id, or a key of its own when it has none
  std::optional<int> numa;
  std::vector<std::string> bridges;  // pci bridges from the CPU down
  int sm{0};
  int dev{-1};
  double pcie_gbps{0.0};
  std::vector<std::pair<std::string, int>> nvlinks;  // target busid, count
  std::string net_name;
  std::string pci_device;  // "0x20b5" when the file has it
};

// NVIDIA boards a PCI device ID names, with their memory (pci.ids: "20b5 GA100 [A100 PCIe 80GB]").
// Only IDs that name one memory size: the file's memory then is known, not guessed.
struct known_board {
  std::string_view pci_device;
  std::string_view name;  // as nvidia-smi names it
  std::size_t memory_gib;
};
constexpr known_board known_boards[] = {
    {"0x20b2", "NVIDIA A100-SXM4-80GB", 80},
    {"0x20b5", "NVIDIA A100 80GB PCIe", 80},
    {"0x2330", "NVIDIA H100 80GB HBM3", 80},
    {"0x2331", "NVIDIA H100 PCIe", 80},
};

const known_board* board_of(std::string_view pci_device) {
  for (const auto& b : known_boards) {
    if (pci_device.size() == b.pci_device.size() &&
        std::equal(pci_device.begin(), pci_device.end(), b.pci_device.begin(),
                   [](char x, char y) { return std::tolower(static_cast<unsigned char>(x)) == y; })) {
      return &b;
    }
  }
  return nullptr;
}

bool class_is(const xml_element& e, std::string_view prefix) { return attr_or(e, "class").rfind(prefix, 0) == 0; }

double pcie_gbps(const xml_element& e) {
  // NCCL: width x speed / 80, speed in units of 100 Mbps per lane (16 GT/s -> 120).
  const std::string speed = attr_or(e, "link_speed");
  const std::string width = attr_or(e, "link_width");
  double gts = 0.0;
  int lanes = 0;
  if (std::sscanf(speed.c_str(), "%lf", &gts) != 1 || std::sscanf(width.c_str(), "%d", &lanes) != 1 || lanes <= 0) return 0.0;
  const double units = gts >= 64 ? 480 : gts >= 32 ? 240 : gts >= 16 ? 120 : gts >= 8 ? 60 : gts >= 5 ? 30 : 15;
  return lanes * units / 80.0;
}

int parse_int(const std::string& s, int fallback) {
  int v = fallback;
  if (s.empty() || std::sscanf(s.c_str(), "%i", &v) != 1) return fallback;
  return v;
}

gpu_path path_between(const found_device& a, const found_device& b) {
  for (const auto& [target, count] : a.nvlinks) {
    if (target == b.busid && count > 0) return {path_type::nvl, smi_label::nv, count};
  }
  for (const auto& [target, count] : b.nvlinks) {
    if (target == a.busid && count > 0) return {path_type::nvl, smi_label::nv, count};
  }
  if (a.cpu != b.cpu) return {path_type::sys, smi_label::sys, 0};
  std::size_t common = 0;
  while (common < a.bridges.size() && common < b.bridges.size() && a.bridges[common] == b.bridges[common]) ++common;
  if (common == 0) return {path_type::phb, smi_label::phb, 0};
  if (common == a.bridges.size() && common == b.bridges.size()) return {path_type::pix, smi_label::pix, 0};
  return {path_type::pxb, smi_label::pxb, 0};
}

}  // namespace

topology parse_nccl_topology_xml(std::string_view text) {
  pugi::xml_document doc;
  load(doc, text);
  const xml_element root = doc.document_element();
  for (xml_element e = root.next_sibling(); e; e = e.next_sibling()) {
    if (e.type() == pugi::node_element) fail_at(text, offset_of(e), "a second root element <" + std::string{e.name()} + ">");
  }
  if (!named(root, "system")) {
    const std::size_t line = line_column(text, offset_of(root)).first;
    throw parse_error{"NCCL topology XML, line " + std::to_string(line) + ": the root element is <" + root.name() +
                          ">, expected <system>",
                      line, 0};
  }
  std::vector<found_device> gpus;
  std::vector<found_device> nics;
  std::string vendor;
  int model = 0;
  std::size_t cpu_index = 0;
  for (const xml_element cpu : root.children("cpu")) {
    if (vendor.empty()) {
      vendor = attr_or(cpu, "vendor");
      model = parse_int(attr_or(cpu, "modelid"), 0);
    }
    std::optional<int> numa;
    if (const auto id = cpu.attribute("numaid")) {
      const int v = parse_int(id.as_string(), -1);
      if (v >= 0) numa = v;
    }
    // A CPU is its NUMA node: two <cpu> elements with one numaid are one socket.
    const std::size_t cpu_key = numa ? static_cast<std::size_t>(*numa) : (std::size_t{1} << 32) + cpu_index;
    std::function<void(const xml_element&, std::vector<std::string>&)> walk = [&](const xml_element& e,
                                                                               std::vector<std::string>& bridges) {
      // Its children lie below <system>, <cpu> and the bridges.
      if (bridges.size() + 3 > max_depth) fail_at(text, offset_of(e), "elements nested too deeply");
      for (const xml_element child : e.children()) {
        if (named(child, "nic")) {  // a NIC without a PCI element of its own
          found_device d;
          d.cpu = cpu_key;
          d.numa = numa;
          d.bridges = bridges;
          for (const xml_element net : child.children("net")) {
            if (d.net_name.empty()) d.net_name = attr_or(net, "name");
          }
          nics.push_back(d);
          continue;
        }
        if (!named(child, "pci")) continue;
        xml_element gpu_element;
        xml_element nic_element;
        bool has_pci_children = false;
        for (const xml_element g : child.children()) {
          if (named(g, "gpu")) gpu_element = g;
          if (named(g, "nic")) nic_element = g;
          if (named(g, "pci")) has_pci_children = true;
        }
        const bool is_gpu = gpu_element || class_is(child, "0x0302") || class_is(child, "0x0300");
        const bool is_nic = !is_gpu && (nic_element || class_is(child, "0x0200") || class_is(child, "0x0207"));
        if (is_gpu || is_nic) {
          found_device d;
          d.busid = attr_or(child, "busid");
          d.cpu = cpu_key;
          d.numa = numa;
          d.bridges = bridges;
          d.pcie_gbps = pcie_gbps(child);
          d.pci_device = attr_or(child, "device");
          if (gpu_element) {
            d.sm = parse_int(attr_or(gpu_element, "sm"), 0);
            d.dev = parse_int(attr_or(gpu_element, "dev"), -1);
            for (const xml_element l : gpu_element.children("nvlink")) {
              d.nvlinks.emplace_back(attr_or(l, "target"), parse_int(attr_or(l, "count"), 0));
            }
          }
          if (nic_element) {
            for (const xml_element net : nic_element.children("net")) {
              if (d.net_name.empty()) d.net_name = attr_or(net, "name");
            }
          }
          (is_gpu ? gpus : nics).push_back(std::move(d));
        }
        if (has_pci_children || (!is_gpu && !is_nic)) {
          bridges.push_back(attr_or(child, "busid"));
          walk(child, bridges);
          bridges.pop_back();
        }
      }
    };
    std::vector<std::string> bridges;
    walk(cpu, bridges);
    ++cpu_index;
  }
  if (gpus.empty()) {
    throw parse_error{"NCCL topology XML: no GPU (a pci element of class 0x0302xx or 0x0300xx, or a <gpu>)", 1, 0};
  }
  // Ordinals: NCCL's dev numbers where every GPU has one, else PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID).
  const bool by_dev = std::all_of(gpus.begin(), gpus.end(), [](const found_device& d) { return d.dev >= 0; });
  std::stable_sort(gpus.begin(), gpus.end(), [&](const found_device& a, const found_device& b) {
    return by_dev ? a.dev < b.dev : a.busid < b.busid;
  });
  std::vector<gpu_info> infos;
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    gpu_info g;
    g.ordinal = static_cast<int>(i);
    g.pci_bus_id = gpus[i].busid;
    g.compute_capability = gpus[i].sm;
    g.numa_node = gpus[i].numa;
    if (gpus[i].numa) g.numa_affinity = std::to_string(*gpus[i].numa);
    g.pcie_gbps = gpus[i].pcie_gbps;
    g.pci_depth = static_cast<int>(gpus[i].bridges.size());
    if (const auto* b = board_of(gpus[i].pci_device)) {
      g.name = std::string{b->name};
      g.memory_bytes = b->memory_gib << 30;
    }
    infos.push_back(std::move(g));
  }
  topology t{std::move(infos)};
  t.set_inter_socket_gbps(inter_socket_gbps(vendor, model));
  for (std::size_t a = 0; a < gpus.size(); ++a) {
    for (std::size_t b = a + 1; b < gpus.size(); ++b) {
      t.set_path(device_id{static_cast<int>(a)}, device_id{static_cast<int>(b)}, path_between(gpus[a], gpus[b]));
    }
  }
  for (const auto& n : nics) {
    nic_info nic;
    nic.name = n.net_name.empty() ? n.busid : n.net_name;
    nic.device = n.net_name;
    for (const auto& g : gpus) nic.to_gpu.push_back(path_between(n, g));
    for (const auto& other : nics) {
      nic.to_nic.push_back(&other == &n ? gpu_path{path_type::loc, smi_label::x, 0} : path_between(n, other));
    }
    t.add_nic(std::move(nic));
  }
  return t;
}

std::string to_nccl_xml(const topology& t) {
  const std::size_t n = t.gpu_count();
  std::vector<std::string> bus(n);
  for (std::size_t i = 0; i < n; ++i) {
    bus[i] = t.gpus()[i].pci_bus_id;
    if (bus[i].empty()) bus[i] = fmt::format("0000:{:02x}:00.0", i + 1);
  }
  const auto id = [](std::size_t i) { return device_id{static_cast<int>(i)}; };
  // One <cpu> per socket: the GPUs joined by PCIe paths (PIX, PXB, PHB/NODE), with the NUMA id
  // they share (omitted when unknown, mixed or taken by another socket, so that sockets stay
  // apart). Within it, GPUs joined by PIX or PXB share a bridge, and those joined by PIX an inner
  // bridge of their own.
  const auto find = [](std::vector<std::size_t>& parent, std::size_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  std::vector<std::size_t> socket(n), group(n), pix(n);
  std::iota(socket.begin(), socket.end(), 0);
  std::iota(group.begin(), group.end(), 0);
  std::iota(pix.begin(), pix.end(), 0);
  for (std::size_t a = 0; a < n; ++a) {
    for (std::size_t b = a + 1; b < n; ++b) {
      const auto type = t.path(id(a), id(b)).type;
      if (type == path_type::pix || type == path_type::pxb || type == path_type::phb) socket[find(socket, a)] = find(socket, b);
      if (type == path_type::pix || type == path_type::pxb) group[find(group, a)] = find(group, b);
      if (type == path_type::pix) pix[find(pix, a)] = find(pix, b);
    }
  }
  std::map<std::size_t, std::vector<std::size_t>> sockets;
  for (std::size_t i = 0; i < n; ++i) sockets[find(socket, i)].push_back(i);
  std::vector<int> used_numa;
  std::string out = "<system version=\"1\">\n";
  int bridge_id = 0;
  for (const auto& [root_of_socket, members] : sockets) {
    std::optional<int> numa = t.gpus()[members[0]].numa_node;
    for (const auto m : members) {
      if (t.gpus()[m].numa_node != numa) numa.reset();
    }
    if (numa && std::find(used_numa.begin(), used_numa.end(), *numa) != used_numa.end()) numa.reset();
    if (numa) used_numa.push_back(*numa);
    out += numa ? "  <cpu numaid=\"" + std::to_string(*numa) + "\">\n" : std::string{"  <cpu>\n"};
    const auto gpu_xml = [&](std::size_t i, const std::string& indent) {
      std::string s = indent + "<pci busid=\"" + bus[i] + "\" class=\"0x030200\">\n" + indent + "  <gpu dev=\"" +
                      std::to_string(i) + "\" sm=\"" + std::to_string(t.gpus()[i].compute_capability) + "\">\n";
      for (std::size_t j = 0; j < n; ++j) {
        const auto& p = t.path(id(i), id(j));
        if (i != j && p.smi == smi_label::nv) {
          s += indent + "    <nvlink target=\"" + bus[j] + "\" count=\"" + std::to_string(p.nvlinks) + "\"/>\n";
        }
      }
      return s + indent + "  </gpu>\n" + indent + "</pci>\n";
    };
    std::map<std::size_t, std::vector<std::size_t>> groups;
    for (const auto m : members) groups[find(group, m)].push_back(m);
    (void)root_of_socket;
    for (auto& [root, gpus] : groups) {
      if (gpus.size() == 1) {
        out += gpu_xml(gpus[0], "    ");
        continue;
      }
      out += fmt::format("    <pci busid=\"ffff:{:02x}:00.0\" class=\"0x060400\">\n", bridge_id++);
      std::map<std::size_t, std::vector<std::size_t>> subgroups;
      for (const auto g : gpus) subgroups[find(pix, g)].push_back(g);
      for (auto& [sub, inner] : subgroups) {
        if (subgroups.size() == 1) {
          for (const auto g : inner) out += gpu_xml(g, "      ");
          continue;
        }
        out += fmt::format("      <pci busid=\"ffff:{:02x}:00.0\" class=\"0x060400\">\n", bridge_id++);
        for (const auto g : inner) out += gpu_xml(g, "        ");
        out += "      </pci>\n";
      }
      out += "    </pci>\n";
    }
    out += "  </cpu>\n";
  }
  return out + "</system>\n";
}

}  // namespace mgm
