// NCCL's topology XML (NCCL_TOPO_FILE): read into a topology, and written from one.
#include "xml.hpp"

#include <mgm/error.hpp>
#include <mgm/topology/topology.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <vector>

namespace mgm {
namespace {

using detail::xml_element;

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

bool class_is(const xml_element& e, std::string_view prefix) { return e.attr_or("class").rfind(prefix, 0) == 0; }

double pcie_gbps(const xml_element& e) {
  // NCCL: width x speed / 80, speed in units of 100 Mbps per lane (16 GT/s -> 120).
  const std::string speed = e.attr_or("link_speed");
  const std::string width = e.attr_or("link_width");
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
  const auto root = detail::xml_reader{text}.parse();
  if (root->name != "system") {
    throw parse_error{"NCCL topology XML, line " + std::to_string(root->line) + ": the root element is <" + root->name +
                          ">, expected <system>",
                      root->line, 0};
  }
  std::vector<found_device> gpus;
  std::vector<found_device> nics;
  std::string vendor;
  int model = 0;
  std::size_t cpu_index = 0;
  for (const auto& cpu : root->children) {
    if (cpu->name != "cpu") continue;
    if (vendor.empty()) {
      vendor = cpu->attr_or("vendor");
      model = parse_int(cpu->attr_or("modelid"), 0);
    }
    std::optional<int> numa;
    if (const auto* id = cpu->attribute("numaid")) {
      const int v = parse_int(*id, -1);
      if (v >= 0) numa = v;
    }
    // A CPU is its NUMA node: two <cpu> elements with one numaid are one socket.
    const std::size_t cpu_key = numa ? static_cast<std::size_t>(*numa) : (std::size_t{1} << 32) + cpu_index;
    std::function<void(const xml_element&, std::vector<std::string>&)> walk = [&](const xml_element& e,
                                                                               std::vector<std::string>& bridges) {
      for (const auto& child : e.children) {
        if (child->name == "nic") {  // a NIC without a PCI element of its own
          found_device d;
          d.cpu = cpu_key;
          d.numa = numa;
          d.bridges = bridges;
          for (const auto& net : child->children) {
            if (net->name == "net" && d.net_name.empty()) d.net_name = net->attr_or("name");
          }
          nics.push_back(d);
          continue;
        }
        if (child->name != "pci") continue;
        const xml_element* gpu_element = nullptr;
        const xml_element* nic_element = nullptr;
        bool has_pci_children = false;
        for (const auto& g : child->children) {
          if (g->name == "gpu") gpu_element = g.get();
          if (g->name == "nic") nic_element = g.get();
          if (g->name == "pci") has_pci_children = true;
        }
        const bool is_gpu = gpu_element != nullptr || class_is(*child, "0x0302") || class_is(*child, "0x0300");
        const bool is_nic = !is_gpu && (nic_element != nullptr || class_is(*child, "0x0200") || class_is(*child, "0x0207"));
        if (is_gpu || is_nic) {
          found_device d;
          d.busid = child->attr_or("busid");
          d.cpu = cpu_key;
          d.numa = numa;
          d.bridges = bridges;
          d.pcie_gbps = pcie_gbps(*child);
          d.pci_device = child->attr_or("device");
          if (gpu_element != nullptr) {
            d.sm = parse_int(gpu_element->attr_or("sm"), 0);
            d.dev = parse_int(gpu_element->attr_or("dev"), -1);
            for (const auto& l : gpu_element->children) {
              if (l->name == "nvlink") d.nvlinks.emplace_back(l->attr_or("target"), parse_int(l->attr_or("count"), 0));
            }
          }
          if (nic_element != nullptr) {
            for (const auto& net : nic_element->children) {
              if (net->name == "net" && d.net_name.empty()) d.net_name = net->attr_or("name");
            }
          }
          (is_gpu ? gpus : nics).push_back(std::move(d));
        }
        if (has_pci_children || (!is_gpu && !is_nic)) {
          bridges.push_back(child->attr_or("busid"));
          walk(*child, bridges);
          bridges.pop_back();
        }
      }
    };
    std::vector<std::string> bridges;
    walk(*cpu, bridges);
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
    if (bus[i].empty()) {
      char b[32];
      std::snprintf(b, sizeof b, "0000:%02zx:00.0", i + 1);
      bus[i] = b;
    }
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
      char b[32];
      std::snprintf(b, sizeof b, "ffff:%02x:00.0", bridge_id++);
      out += std::string{"    <pci busid=\""} + b + "\" class=\"0x060400\">\n";
      std::map<std::size_t, std::vector<std::size_t>> subgroups;
      for (const auto g : gpus) subgroups[find(pix, g)].push_back(g);
      for (auto& [sub, inner] : subgroups) {
        if (subgroups.size() == 1) {
          for (const auto g : inner) out += gpu_xml(g, "      ");
          continue;
        }
        char ib[32];
        std::snprintf(ib, sizeof ib, "ffff:%02x:00.0", bridge_id++);
        out += std::string{"      <pci busid=\""} + ib + "\" class=\"0x060400\">\n";
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
