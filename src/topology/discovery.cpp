// Live discovery: the CUDA runtime for the GPUs and their peer access, sysfs for NUMA and CPU
// affinity, and NVML (loaded at run time, when present) for NVLinks and the PCIe common ancestor.
#include "../platform/nvml_abi.hpp"

#include <mgm/device.hpp>
#include <mgm/error.hpp>
#include <mgm/platform/cuda_peer_ops.hpp>
#include <mgm/topology/discovery.hpp>

#include "../detail/fmt.hpp"
#include "../detail/text.hpp"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

namespace mgm {
namespace {

// NVML's declarations: src/platform/nvml_abi.hpp (no NVML header needed to build).
using nvml_device = nvml_abi::device_t;
using nvml_pci_info = nvml_abi::pci_info_t;

struct nvml {
  void* lib{nullptr};
  int (*init)(){nullptr};
  int (*by_bus_id)(const char*, nvml_device*){nullptr};
  int (*nvlink_state)(nvml_device, unsigned int, int*){nullptr};
  int (*nvlink_remote_pci)(nvml_device, unsigned int, nvml_pci_info*){nullptr};
  int (*common_ancestor)(nvml_device, nvml_device, int*){nullptr};

  nvml() {
    const char* path = std::getenv("MGM_NVML_LIBRARY");
    lib = ::dlopen(path != nullptr ? path : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;
    init = reinterpret_cast<int (*)()>(::dlsym(lib, "nvmlInit_v2"));
    by_bus_id = reinterpret_cast<int (*)(const char*, nvml_device*)>(::dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    nvlink_state = reinterpret_cast<int (*)(nvml_device, unsigned int, int*)>(::dlsym(lib, "nvmlDeviceGetNvLinkState"));
    nvlink_remote_pci =
        reinterpret_cast<int (*)(nvml_device, unsigned int, nvml_pci_info*)>(::dlsym(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2"));
    common_ancestor = reinterpret_cast<int (*)(nvml_device, nvml_device, int*)>(::dlsym(lib, "nvmlDeviceGetTopologyCommonAncestor"));
    if (init == nullptr || by_bus_id == nullptr || init() != 0) {
      ::dlclose(lib);
      lib = nullptr;
    }
  }
  ~nvml() {
    if (lib != nullptr) ::dlclose(lib);
  }
  nvml(const nvml&) = delete;
  nvml& operator=(const nvml&) = delete;
  [[nodiscard]] bool loaded() const noexcept { return lib != nullptr; }
};

std::string read_line(const std::string& path) {
  std::ifstream in{path};
  std::string s;
  std::getline(in, s);
  return s;
}

// nvmlGpuTopologyLevel_t: INTERNAL 0, SINGLE 10, MULTIPLE 20, HOSTBRIDGE 30, NODE 40, SYSTEM 50.
gpu_path from_nvml_level(int level) {
  if (level <= 10) return {path_type::pix, smi_label::pix, 0};
  if (level <= 20) return {path_type::pxb, smi_label::pxb, 0};
  if (level <= 30) return {path_type::phb, smi_label::phb, 0};
  if (level <= 40) return {path_type::phb, smi_label::node, 0};
  return {path_type::sys, smi_label::sys, 0};
}

}  // namespace

topology discover_topology() {
  const int n = device_count();
  if (n == 0) {
    throw cuda_error{cudaErrorNoDevice, "discover_topology: no CUDA device or driver here (try the simulator)"};
  }
  std::vector<gpu_info> gpus;
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp p{};
    MGM_CUDA_TRY(cudaGetDeviceProperties(&p, d));
    gpu_info g;
    g.ordinal = d;
    g.name = p.name;
    g.memory_bytes = p.totalGlobalMem;
    g.compute_capability = p.major * 10 + p.minor;
    g.pci_bus_id = fmt::format("{:08X}:{:02X}:{:02X}.0", p.pciDomainID, p.pciBusID, p.pciDeviceID);
    const auto* u = reinterpret_cast<const unsigned char*>(p.uuid.bytes);
    g.uuid = fmt::format("GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}", u[0],
                         u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    // sysfs names PCI devices with a 4-digit lower-case domain.
    const std::string sys = fmt::format("/sys/bus/pci/devices/{:04x}:{:02x}:{:02x}.0/", p.pciDomainID, p.pciBusID, p.pciDeviceID);
    const std::string numa = read_line(sys + "numa_node");
    if (!numa.empty() && numa != "-1") {
      g.numa_node = std::atoi(numa.c_str());
      g.numa_affinity = numa;
    }
    g.cpu_affinity = read_line(std::string{sys} + "local_cpulist");
    gpus.push_back(std::move(g));
  }
  topology t{gpus};
  const cuda_peer_ops peers;
  nvml ml;
  std::vector<nvml_device> handles(static_cast<std::size_t>(n), nullptr);
  if (ml.loaded()) {
    for (int d = 0; d < n; ++d) {
      if (ml.by_bus_id(gpus[static_cast<std::size_t>(d)].pci_bus_id.c_str(), &handles[static_cast<std::size_t>(d)]) != 0) {
        handles[static_cast<std::size_t>(d)] = nullptr;
      }
    }
  }
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      gpu_path path{path_type::sys, smi_label::sys, 0};
      const auto ha = handles[static_cast<std::size_t>(a)];
      const auto hb = handles[static_cast<std::size_t>(b)];
      int links = 0;
      if (ha != nullptr && hb != nullptr && ml.nvlink_state != nullptr && ml.nvlink_remote_pci != nullptr) {
        for (unsigned int l = 0; l < nvml_abi::nvlink_max_links; ++l) {
          int active = 0;
          nvml_pci_info remote{};
          if (ml.nvlink_state(ha, l, &active) != 0 || active == 0) continue;
          if (ml.nvlink_remote_pci(ha, l, &remote) != 0) continue;
          if (detail::ascii_lower(remote.bus_id) == detail::ascii_lower(gpus[static_cast<std::size_t>(b)].pci_bus_id)) ++links;
        }
      }
      if (links > 0) {
        path = {path_type::nvl, smi_label::nv, links};
      } else if (ha != nullptr && hb != nullptr && ml.common_ancestor != nullptr) {
        int level = 50;
        if (ml.common_ancestor(ha, hb, &level) == 0) path = from_nvml_level(level);
      } else if (peers.can_access(device_id{a}, device_id{b})) {
        path = {path_type::phb, smi_label::phb, 0};  // without NVML: peer-capable PCIe, exact level unknown
      }
      t.set_path(device_id{a}, device_id{b}, path);
      const double nominal = t.nominal_gbps(device_id{a}, device_id{b});
      t.set_bandwidth(device_id{a}, device_id{b}, {nominal, link_provenance::detected});
      t.set_bandwidth(device_id{b}, device_id{a}, {nominal, link_provenance::detected});
    }
  }
  return t;
}

std::size_t calibrate(topology& t, std::size_t bytes, int repeats) {
  MGM_EXPECTS(bytes > 0 && repeats > 0, "calibrate: a positive size and repeat count");
  const int n = static_cast<int>(t.gpu_count());
  MGM_EXPECTS(n <= device_count(), "calibrate: the topology has more GPUs than this machine");
  const cuda_peer_ops peers;
  std::size_t measured = 0;
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a == b || !peers.can_access(device_id{b}, device_id{a})) continue;
      peers.enable(device_id{b}, device_id{a});
      void* src = nullptr;
      void* dst = nullptr;
      {
        const scoped_device on{device_id{a}};
        MGM_CUDA_TRY(cudaMalloc(&src, bytes));
      }
      cudaEvent_t start{};
      cudaEvent_t stop{};
      try {
        const scoped_device on{device_id{b}};
        MGM_CUDA_TRY(cudaMalloc(&dst, bytes));
        MGM_CUDA_TRY(cudaEventCreate(&start));
        MGM_CUDA_TRY(cudaEventCreate(&stop));
        MGM_CUDA_TRY(cudaMemcpyPeerAsync(dst, b, src, a, bytes, nullptr));  // warm-up
        MGM_CUDA_TRY(cudaEventRecord(start, nullptr));
        for (int r = 0; r < repeats; ++r) MGM_CUDA_TRY(cudaMemcpyPeerAsync(dst, b, src, a, bytes, nullptr));
        MGM_CUDA_TRY(cudaEventRecord(stop, nullptr));
        MGM_CUDA_TRY(cudaEventSynchronize(stop));
        float ms = 0;
        MGM_CUDA_TRY(cudaEventElapsedTime(&ms, start, stop));
        const double gbps = static_cast<double>(bytes) * repeats / (static_cast<double>(ms) * 1e-3) / 1e9;
        t.set_bandwidth(device_id{a}, device_id{b}, {gbps, link_provenance::measured});
        ++measured;
      } catch (...) {
        (void)cudaFree(dst);
        (void)cudaFree(src);
        throw;
      }
      (void)cudaEventDestroy(start);
      (void)cudaEventDestroy(stop);
      (void)cudaFree(dst);
      (void)cudaFree(src);
    }
  }
  return measured;
}

}  // namespace mgm
