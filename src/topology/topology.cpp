#include <mgm/error.hpp>
#include <mgm/topology/topology.hpp>

#include "../detail/fmt.hpp"

#include <algorithm>
#include <array>
#include <iterator>
#include <string>

namespace mgm {

namespace {
constexpr std::array<std::string_view, 12> nccl_names{"LOC", "NVL", "NVB", "C2C", "PIX", "PXB",
                                                      "P2C", "PXN", "PHB", "SYS", "NET", "DIS"};
}  // namespace

std::string_view gpu_path::nccl_name() const noexcept { return nccl_names[static_cast<std::size_t>(type)]; }

std::string gpu_path::label() const {
  switch (smi) {
    case smi_label::x: return "X";
    case smi_label::nv: return "NV" + std::to_string(nvlinks);
    case smi_label::pix: return "PIX";
    case smi_label::pxb: return "PXB";
    case smi_label::node: return "NODE";
    case smi_label::phb: return "PHB";
    case smi_label::sys: return "SYS";
  }
  return "?";
}

gpu_path gpu_path::from_label(std::string_view label) {
  if (label == "X") return {path_type::loc, smi_label::x, 0};
  if (label == "PIX") return {path_type::pix, smi_label::pix, 0};
  if (label == "PXB") return {path_type::pxb, smi_label::pxb, 0};
  if (label == "NODE") return {path_type::phb, smi_label::node, 0};  // NCCL folds NODE into PHB
  if (label == "PHB") return {path_type::phb, smi_label::phb, 0};
  if (label == "SYS" || label == "SOC") return {path_type::sys, smi_label::sys, 0};  // SOC: drivers before 2017
  if (label.size() > 2 && label.substr(0, 2) == "NV" && label.size() <= 4) {
    int links = 0;
    for (const char c : label.substr(2)) {
      if (c < '0' || c > '9') links = -1000;
      links = links * 10 + (c - '0');
    }
    if (links > 0) return {path_type::nvl, smi_label::nv, links};
  }
  MGM_FAIL("unknown nvidia-smi topology label '" + std::string{label} +
           "' (expected X, NV#, PIX, PXB, NODE, PHB, SYS or SOC)");
}

topology::topology(std::vector<gpu_info> gpus) : gpus_{std::move(gpus)} {
  const std::size_t n = gpus_.size();
  paths_.assign(n * n, gpu_path{path_type::sys, smi_label::sys, 0});
  for (std::size_t i = 0; i < n; ++i) paths_[i * n + i] = {path_type::loc, smi_label::x, 0};
}

std::size_t topology::index(device_id a, device_id b) const {
  const auto n = gpus_.size();
  MGM_EXPECTS(!a.is_host() && !b.is_host() && a.value() >= 0 && b.value() >= 0 && a.index() < n && b.index() < n,
              "topology: GPU pair (" + std::to_string(a.value()) + ", " + std::to_string(b.value()) +
                  ") out of range for " + std::to_string(n) + " GPUs");
  return a.index() * n + b.index();
}

const gpu_info& topology::gpu(device_id d) const { return gpus_[index(d, d) / (gpus_.size() + 1)]; }

const gpu_path& topology::path(device_id a, device_id b) const { return paths_[index(a, b)]; }

void topology::set_path(device_id a, device_id b, gpu_path p) {
  MGM_EXPECTS(a != b, "topology: a GPU's path to itself is always X");
  paths_[index(a, b)] = p;
  paths_[index(b, a)] = p;
}

void topology::set_paths_from_labels(const std::vector<std::vector<std::string_view>>& labels) {
  const std::size_t n = gpus_.size();
  MGM_EXPECTS(labels.size() == n, "topology: " + std::to_string(labels.size()) + " rows of labels for " +
                                      std::to_string(n) + " GPUs");
  std::vector<gpu_path> next = paths_;
  for (std::size_t r = 0; r < n; ++r) {
    MGM_EXPECTS(labels[r].size() == n, "topology: row " + std::to_string(r) + " has " +
                                           std::to_string(labels[r].size()) + " labels, expected " + std::to_string(n));
    for (std::size_t c = 0; c < n; ++c) {
      gpu_path p;
      try {
        p = gpu_path::from_label(labels[r][c]);
      } catch (const logic_error& e) {
        MGM_FAIL("topology: row " + std::to_string(r) + ", column " + std::to_string(c) + ": " + e.what());
      }
      MGM_EXPECTS((r == c) == (p.smi == smi_label::x),
                  "topology: row " + std::to_string(r) + ", column " + std::to_string(c) + ": 'X' belongs exactly on the diagonal");
      next[r * n + c] = p;
    }
  }
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t c = 0; c < r; ++c) {
      MGM_EXPECTS(next[r * n + c] == next[c * n + r], "topology: the label of GPU" + std::to_string(r) + "-GPU" +
                                                          std::to_string(c) + " differs from GPU" + std::to_string(c) +
                                                          "-GPU" + std::to_string(r));
    }
  }
  paths_ = std::move(next);
}

}  // namespace mgm

namespace mgm {

namespace {
// The one NVLink table. Per link, per direction: NCCL's effective figures (src/graph/topo.h at
// HEAD: SM60_NVLINK_BW 18, SM70 20, SM80 20, SM86 12, SM90 20.6, SM100 40.1), which are what the
// rest of the model uses (PCIe width x speed / 80); the generations, their GPUs and links per GPU
// from ../shared/research/topology.md §3.1 (NVIDIA's NVLink pages, the GA102 whitepaper: "four x4
// links, each 14.0625 GB/sec in each direction"). NCCL applies SM70 to all of 7.x and SM100 to
// 10.x; Ada (8.9), Orin (8.7) and the 12.x boards have no NVLink, so they find no row.
constexpr std::array<nvlink_generation, 6> nvlink_table{{
    {1, "NVLink 1", "P100", 60, 69, 4, 18.0},
    {2, "NVLink 2", "V100", 70, 79, 6, 20.0},
    {3, "NVLink 3", "A100", 80, 80, 12, 20.0},
    {3, "NVLink 3 (GA102, x4 links)", "RTX 3090, RTX A6000, A40", 86, 86, 4, 12.0},
    {4, "NVLink 4", "H100, H200", 90, 99, 18, 20.6},
    {5, "NVLink 5", "B200, GB200", 100, 109, 18, 40.1},
}};
}  // namespace

std::span<const nvlink_generation> nvlink_generations() noexcept { return nvlink_table; }

const nvlink_generation* find_nvlink_generation(int cc) noexcept {
  for (const auto& g : nvlink_table) {
    if (cc >= g.min_cc && cc <= g.max_cc) return &g;
  }
  return nullptr;
}

double nvlink_gbps_per_link(int cc) noexcept {
  const auto* g = find_nvlink_generation(cc);
  return g == nullptr ? 0.0 : g->gbps_per_link;
}

double nvlink_gbps_per_link_lower_bound(int links) noexcept {
  double any = nvlink_table[0].gbps_per_link;
  double fit = 0.0;
  for (const auto& g : nvlink_table) {
    any = std::min(any, g.gbps_per_link);
    if (g.max_links_per_gpu >= links && (fit == 0.0 || g.gbps_per_link < fit)) fit = g.gbps_per_link;
  }
  return fit > 0.0 ? fit : any;
}

std::string_view provenance_name(link_provenance p) noexcept {
  switch (p) {
    case link_provenance::nominal: return "nominal";
    case link_provenance::detected: return "detected";
    case link_provenance::measured: return "measured";
    case link_provenance::overridden: return "overridden";
  }
  return "unknown";
}

double inter_socket_gbps(std::string_view vendor, int model) noexcept {
  if (vendor == "AuthenticAMD") return 16.0;
  if (vendor == "IBM") return 32.0;
  if (vendor == "ARM") return 6.0;
  if (vendor == "GenuineIntel") {
    if (model >= 0xCF) return 40.0;
    if (model >= 0x8F) return 22.0;
    if (model >= 0x55) return 10.0;
    return 6.0;
  }
  return 10.0;
}

double pcie_gbps(const gpu_info& g) noexcept {
  if (g.pcie_gbps > 0) return g.pcie_gbps;
  // width x speed / 80 for x16: Gen3 12, Gen4 24, Gen5 48 (V100: Gen3; A100, Ada: Gen4; Hopper+: Gen5).
  if (g.compute_capability >= 90) return 48.0;
  if (g.compute_capability >= 80) return 24.0;
  return 12.0;
}

void topology::add_nic(nic_info nic) {
  MGM_EXPECTS(nic.to_gpu.size() == gpus_.size(), "topology: a NIC needs a path to each of the " +
                                                    std::to_string(gpus_.size()) + " GPUs");
  const std::size_t self = nics_.size();
  MGM_EXPECTS(nic.to_nic.empty() || (nic.to_nic.size() > self && nic.to_nic[self].smi == smi_label::x),
              "topology: NIC " + std::to_string(self) + "'s paths to the NICs need 'X' at its own index");
  nics_.push_back(std::move(nic));
}

std::optional<gpu_path> topology::nic_path(std::size_t a, std::size_t b) const {
  MGM_EXPECTS(a < nics_.size() && b < nics_.size(), "topology: NIC pair (" + std::to_string(a) + ", " +
                                                       std::to_string(b) + ") out of range for " +
                                                       std::to_string(nics_.size()) + " NICs");
  if (a == b) return gpu_path{path_type::loc, smi_label::x, 0};
  if (b < nics_[a].to_nic.size()) return nics_[a].to_nic[b];
  if (a < nics_[b].to_nic.size()) return nics_[b].to_nic[a];
  return std::nullopt;
}

const nvlink_generation* topology::nvlink_generation_of(device_id a, device_id b) const {
  const gpu_path& p = path(a, b);
  if (!p.is_nvlink() && p.type != path_type::c2c) return nullptr;
  const auto* ga = find_nvlink_generation(gpus_[a.index()].compute_capability);
  const auto* gb = find_nvlink_generation(gpus_[b.index()].compute_capability);
  if (ga == nullptr || gb == nullptr) return nullptr;
  return ga->gbps_per_link <= gb->gbps_per_link ? ga : gb;
}

double topology::nominal_gbps(device_id a, device_id b) const {
  const gpu_path& p = path(a, b);
  const gpu_info& ga = gpus_[a.index()];
  const gpu_info& gb = gpus_[b.index()];
  const double pcie = std::min(pcie_gbps(ga), pcie_gbps(gb));
  switch (p.type) {
    case path_type::loc: return 5000.0;
    case path_type::nvl:
    case path_type::nvb:
    case path_type::c2c: {
      const int links = std::max(1, p.nvlinks);
      const auto* generation = nvlink_generation_of(a, b);
      return links * (generation != nullptr ? generation->gbps_per_link : nvlink_gbps_per_link_lower_bound(links));
    }
    case path_type::pix:
    case path_type::pxb:
    case path_type::p2c:
    case path_type::pxn:
    case path_type::phb: return pcie;
    case path_type::sys: return std::min(pcie, inter_socket_gbps_);
    case path_type::net: return 12.0;
    case path_type::dis: return 0.0;
  }
  return 0.0;
}

link_bandwidth topology::bandwidth(device_id a, device_id b) const {
  const std::size_t i = index(a, b);
  if (!bandwidths_.empty() && bandwidths_[i]) return *bandwidths_[i];
  return {nominal_gbps(a, b), link_provenance::nominal};
}

void topology::set_bandwidth(device_id a, device_id b, link_bandwidth bw) {
  MGM_EXPECTS(bw.gbps >= 0.0, "topology: a bandwidth cannot be negative");
  const std::size_t i = index(a, b);
  if (bandwidths_.empty()) bandwidths_.resize(paths_.size());
  bandwidths_[i] = bw;
}

std::string topology::to_smi_matrix(bool bandwidths) const {
  const std::size_t n = gpus_.size();
  std::vector<std::string> names;
  for (std::size_t i = 0; i < n; ++i) names.push_back("GPU" + std::to_string(i));
  for (std::size_t k = 0; k < nics_.size(); ++k) names.push_back("NIC" + std::to_string(k));
  bool any_cpu = false;
  bool any_numa = false;
  bool any_gpu_numa = false;
  for (const auto& g : gpus_) {
    any_cpu = any_cpu || !g.cpu_affinity.empty();
    any_numa = any_numa || !g.numa_affinity.empty() || g.numa_node.has_value();
    any_gpu_numa = any_gpu_numa || g.gpu_numa_id.has_value();
  }
  std::string out = "\t";
  for (const auto& name : names) out += name + "\t";
  if (any_cpu) out += "CPU Affinity\t";
  if (any_numa) out += "NUMA Affinity\t";
  if (any_gpu_numa) out += "GPU NUMA ID\t";
  out.back() = '\n';
  const auto cell = [&](std::size_t r, std::size_t c) -> std::string {
    if (r == c) return " X ";
    if (r < n && c < n) return path(device_id{static_cast<int>(r)}, device_id{static_cast<int>(c)}).label();
    if (r < n) return nics_[c - n].to_gpu[r].label();
    if (c < n) return nics_[r - n].to_gpu[c].label();
    // NIC to NIC as the source said; a caller's NIC without one gets nvidia-smi's farthest label.
    const auto p = nic_path(r - n, c - n);
    return p ? p->label() : std::string{"SYS"};
  };
  for (std::size_t r = 0; r < names.size(); ++r) {
    out += names[r];
    for (std::size_t c = 0; c < names.size(); ++c) out += "\t" + cell(r, c);
    if (r < n) {
      if (any_cpu) out += "\t" + (gpus_[r].cpu_affinity.empty() ? std::string{"N/A"} : gpus_[r].cpu_affinity);
      if (any_numa) {
        out += "\t" + (!gpus_[r].numa_affinity.empty() ? gpus_[r].numa_affinity
                       : gpus_[r].numa_node          ? std::to_string(*gpus_[r].numa_node)
                                                     : std::string{"N/A"});
      }
      if (any_gpu_numa) out += "\t" + (gpus_[r].gpu_numa_id ? std::to_string(*gpus_[r].gpu_numa_id) : std::string{"N/A"});
    }
    out += "\n";
  }
  out += "\nLegend:\n\n"
         "  X    = Self\n"
         "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n"
         "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node\n"
         "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
         "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)\n"
         "  PIX  = Connection traversing at most a single PCIe bridge\n"
         "  NV#  = Connection traversing a bonded set of # NVLinks\n";
  if (!nics_.empty()) {
    out += "\nNIC Legend:\n\n";
    for (std::size_t k = 0; k < nics_.size(); ++k) {
      out += "  NIC" + std::to_string(k) + ": " + (nics_[k].device.empty() ? nics_[k].name : nics_[k].device) + "\n";
    }
  }
  if (bandwidths) {
    out += "\nBandwidth, GB/s per direction (n nominal, d detected, m measured, o overridden):\n\t";
    for (std::size_t i = 0; i < n; ++i) out += names[i] + "\t";
    out.back() = '\n';
    for (std::size_t r = 0; r < n; ++r) {
      out += names[r];
      for (std::size_t c = 0; c < n; ++c) {
        if (r == c) {
          out += "\t X ";
          continue;
        }
        const auto bw = bandwidth(device_id{static_cast<int>(r)}, device_id{static_cast<int>(c)});
        fmt::format_to(std::back_inserter(out), "\t{:.1f}{}", bw.gbps, "ndmo"[static_cast<int>(bw.provenance)]);
      }
      out += "\n";
    }
    // The NVLink generation behind the nominal NV# figures: named where the GPUs' compute
    // capability is known, else "unknown" with the lower bound the figures use.
    std::vector<std::string> seen;
    for (std::size_t r = 0; r < n; ++r) {
      for (std::size_t c = r + 1; c < n; ++c) {
        const device_id a{static_cast<int>(r)};
        const device_id b{static_cast<int>(c)};
        const gpu_path& p = path(a, b);
        if (!p.is_nvlink() && p.type != path_type::c2c) continue;
        const auto* g = nvlink_generation_of(a, b);
        const std::string buf =
            g != nullptr ? fmt::format("NVLink generation: {} ({}), {:.1f} GB/s per link per direction\n", g->name, g->gpus,
                                       g->gbps_per_link)
                         : fmt::format("NVLink generation: unknown (no GPU model) for {}: its figures take {:.1f} GB/s per "
                                       "link per direction, the slowest generation with that many links, a lower bound\n",
                                       p.label(), nvlink_gbps_per_link_lower_bound(std::max(1, p.nvlinks)));
        if (std::find(seen.begin(), seen.end(), buf) == seen.end()) seen.emplace_back(buf);
      }
    }
    for (const auto& line : seen) out += line;
  }
  return out;
}

}  // namespace mgm
