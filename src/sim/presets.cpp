// The simulated machines of ../shared/DESIGN.md §3. Memory as nvidia-smi reports it (MiB); links
// as `nvidia-smi topo -m` prints them on the real machines (DGX-1: the file
// topo_dgx1_v100_8gpu_hybridcubemesh_oneflow_dlperf.txt; H100: topo_h100_8gpu_nv18_...).
#include <mgm/error.hpp>
#include <mgm/sim/machine.hpp>

#include <array>
#include <string>
#include <vector>

namespace mgm::sim {
namespace {

constexpr std::size_t mib = std::size_t{1} << 20;

struct preset_gpu {
  const char* name;
  std::size_t mib;
  int cc;
  int numa;
  bool pcie_p2p;
};

std::vector<std::vector<std::string_view>> all_to_all(std::size_t n, std::string_view label) {
  std::vector<std::vector<std::string_view>> m(n, std::vector<std::string_view>(n, label));
  for (std::size_t i = 0; i < n; ++i) m[i][i] = "X";
  return m;
}

machine build(const machine_options& options, std::string_view name, const std::vector<preset_gpu>& gpus,
              const std::vector<std::vector<std::string_view>>& labels) {
  std::vector<device_spec> specs;
  std::vector<gpu_info> infos;
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    const auto& g = gpus[i];
    specs.push_back({g.name, g.mib * mib, g.cc, g.numa, g.pcie_p2p});
    gpu_info info;
    info.ordinal = static_cast<int>(i);
    info.name = g.name;
    info.compute_capability = g.cc;
    info.memory_bytes = g.mib * mib;
    info.numa_node = g.numa;
    info.numa_affinity = std::to_string(g.numa);
    info.pcie_p2p = g.pcie_p2p;
    infos.push_back(std::move(info));
  }
  topology links{std::move(infos)};
  links.set_paths_from_labels(labels);
  return machine{std::move(specs), std::move(links), std::string{name}, options};
}

std::vector<preset_gpu> eight(const char* gpu, std::size_t mem, int cc) {
  std::vector<preset_gpu> v;
  for (int i = 0; i < 8; ++i) v.push_back({gpu, mem, cc, i < 4 ? 0 : 1, true});
  return v;
}

constexpr std::array<std::string_view, 5> names{"dgx1-v100", "dgx-a100", "dgx-h100", "hgx-h200", "pcie-4gpu-mixed"};

}  // namespace

std::span<const std::string_view> machine::preset_names() noexcept { return names; }

machine machine::preset(std::string_view name, machine_options options) {
  if (name == "dgx1-v100") {
    // Hybrid cube-mesh: each GPU has two NV1 and two NV2 peers, SYS to the other three.
    const std::vector<std::vector<std::string_view>> labels{
        {"X", "NV1", "NV1", "NV2", "NV2", "SYS", "SYS", "SYS"},
        {"NV1", "X", "NV2", "NV1", "SYS", "NV2", "SYS", "SYS"},
        {"NV1", "NV2", "X", "NV2", "SYS", "SYS", "NV1", "SYS"},
        {"NV2", "NV1", "NV2", "X", "SYS", "SYS", "SYS", "NV1"},
        {"NV2", "SYS", "SYS", "SYS", "X", "NV1", "NV1", "NV2"},
        {"SYS", "NV2", "SYS", "SYS", "NV1", "X", "NV2", "NV1"},
        {"SYS", "SYS", "NV1", "SYS", "NV1", "NV2", "X", "NV2"},
        {"SYS", "SYS", "SYS", "NV1", "NV2", "NV1", "NV2", "X"},
    };
    return build(options, name, eight("Tesla V100-SXM2-16GB", 16160, 70), labels);
  }
  if (name == "dgx-a100") return build(options, name, eight("NVIDIA A100-SXM4-80GB", 81920, 80), all_to_all(8, "NV12"));
  if (name == "dgx-h100") return build(options, name, eight("NVIDIA H100 80GB HBM3", 81559, 90), all_to_all(8, "NV18"));
  if (name == "hgx-h200") return build(options, name, eight("NVIDIA H200", 143771, 90), all_to_all(8, "NV18"));
  if (name == "pcie-4gpu-mixed") {
    // Two sockets, one RTX 4090 and one RTX 4080 on each: PHB within a socket, SYS across.
    // GeForce 40-series boards do not allow PCIe peer access.
    const std::vector<preset_gpu> gpus{{"NVIDIA GeForce RTX 4090", 24564, 89, 0, false},
                                       {"NVIDIA GeForce RTX 4090", 24564, 89, 1, false},
                                       {"NVIDIA GeForce RTX 4080", 16376, 89, 0, false},
                                       {"NVIDIA GeForce RTX 4080", 16376, 89, 1, false}};
    const std::vector<std::vector<std::string_view>> labels{{"X", "SYS", "PHB", "SYS"},
                                                            {"SYS", "X", "SYS", "PHB"},
                                                            {"PHB", "SYS", "X", "SYS"},
                                                            {"SYS", "PHB", "SYS", "X"}};
    return build(options, name, gpus, labels);
  }
  std::string list;
  for (const auto n : names) list += (list.empty() ? "" : ", ") + std::string{n};
  MGM_FAIL("unknown simulated machine preset '" + std::string{name} + "'; the presets are " + list);
}

}  // namespace mgm::sim
