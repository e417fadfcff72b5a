// The sample sources: NVML, the CUDA runtime, the simulated machine; pool figures added to each.
#include <mgm/device.hpp>
#include <mgm/sim/machine.hpp>
#include <mgm/telemetry/nvml.hpp>
#include <mgm/telemetry/publisher.hpp>
#include <mgm/telemetry/source.hpp>

#include <cuda_runtime_api.h>
#include "../detail/fmt.hpp"
#include <unistd.h>

#include <algorithm>

namespace mgm::telemetry {

std::vector<cuda_identity> cuda_identities() {
  std::vector<cuda_identity> out;
  const int n = device_count();
  for (int d = 0; d < n; ++d) {
    cuda_identity id;
    id.ordinal = d;
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, d) == cudaSuccess) id.pci_bus_id = bus;
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) == cudaSuccess) {
      const auto* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
      id.uuid = fmt::format("GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
                            u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    }
    (void)cudaGetLastError();
    out.push_back(std::move(id));
  }
  return out;
}

namespace {

// This process's pools (from the registry) and every other publishing process's, added to the
// samples of the same GPUs.
void add_pool_figures(std::vector<device_sample>& samples, bool simulated, const std::vector<cuda_identity>& cuda) {
  std::vector<published_process> all;
  try {
    all = read_published();
  } catch (...) {
  }
  const auto self = static_cast<std::uint32_t>(::getpid());
  std::erase_if(all, [&](const published_process& p) { return p.pid == self && p.pid_seen_here; });
  published_process own;
  own.pid = self;
  for (const auto& f : registered_pool_figures()) {
    if (f.simulated != simulated) continue;
    published_device d;
    d.ordinal = f.device.value();
    d.simulated = f.simulated;
    d.figures = f.figures;
    d.pools = f.pools;
    for (const auto& c : cuda) {
      if (c.ordinal == d.ordinal) {
        d.pci_bus_id = c.pci_bus_id;
        d.uuid = c.uuid;
      }
    }
    own.devices.push_back(std::move(d));
  }
  all.push_back(std::move(own));
  add_published_figures(samples, all, simulated);
}

class nvml_source final : public source {
 public:
  explicit nvml_source(std::shared_ptr<nvml_library> lib) : lib_{std::move(lib)} {
    try {
      cuda_ = cuda_identities();
    } catch (...) {
    }
  }
  [[nodiscard]] std::string name() const override { return "nvml"; }
  [[nodiscard]] std::vector<device_sample> sample() override {
    std::vector<device_sample> out;
    for (unsigned int i = 0; i < lib_->device_count(); ++i) {
      out.push_back(lib_->sample(i));
      for (auto& mig : lib_->mig_instances(i)) out.push_back(std::move(mig));  // after its GPU
    }
    join_cuda_ordinals(out, cuda_);
    add_pool_figures(out, false, cuda_);
    return out;
  }

 private:
  std::shared_ptr<nvml_library> lib_;
  std::vector<cuda_identity> cuda_;
};

class cuda_source final : public source {
 public:
  explicit cuda_source(std::vector<cuda_identity> ids) : ids_{std::move(ids)} {}
  [[nodiscard]] std::string name() const override { return "cuda"; }
  [[nodiscard]] std::vector<device_sample> sample() override {
    std::vector<device_sample> out;
    for (const auto& id : ids_) {
      device_sample s;
      s.time = clock::now();
      s.index = id.ordinal;
      s.cuda_ordinal = id.ordinal;
      s.uuid = id.uuid;
      s.pci_bus_id = normalise_pci_bus_id(id.pci_bus_id);
      cudaDeviceProp prop{};
      if (cudaGetDeviceProperties(&prop, id.ordinal) == cudaSuccess) s.name = prop.name;
      const device_memory m = memory_info(device_id{id.ordinal});
      s.memory_total = m.total_bytes;
      s.memory_free = m.free_bytes;
      s.memory_used = m.total_bytes - m.free_bytes;  // includes what the driver reserves
      s.missing.emplace_back("temperature, power, clocks, PCIe, NVLink, processes: need NVML");
      out.push_back(std::move(s));
    }
    add_pool_figures(out, false, ids_);
    return out;
  }

 private:
  std::vector<cuda_identity> ids_;
};

class sim_source final : public source {
 public:
  explicit sim_source(const sim::machine& m) : machine_{m} {}
  [[nodiscard]] std::string name() const override { return "sim:" + machine_.name(); }
  [[nodiscard]] std::vector<device_sample> sample() override {
    std::vector<device_sample> out;
    const auto& topo = machine_.links();
    for (int d = 0; d < machine_.device_count(); ++d) {
      device_sample s;
      s.time = clock::now();
      s.index = d;
      s.cuda_ordinal = d;
      s.name = machine_.spec(device_id{d}).name;
      if (machine_.lost(device_id{d})) {  // as NVML answers for a GPU off the bus
        s.lost = true;
        s.missing.emplace_back("memory: the GPU is lost (fault injection)");
        out.push_back(std::move(s));
        continue;
      }
      for (const auto& f : machine_.foreign_processes(device_id{d})) s.processes.push_back({f.pid, f.name, f.bytes});
      const sim::memory_info m = machine_.memory(device_id{d});
      s.memory_total = m.total_bytes;
      s.memory_used = m.used_bytes;
      s.memory_free = m.free_bytes;
      // Links up: the sum over peers for direct links (DGX-1's cube mesh); behind NVSwitches every
      // peer shows all of the GPU's links (NV18 to each of 7 peers is 18 links, not 126).
      unsigned links = 0;
      std::vector<int> per_peer;
      for (int p = 0; p < machine_.device_count(); ++p) {
        if (p != d && static_cast<std::size_t>(std::max(d, p)) < topo.gpus().size()) {
          per_peer.push_back(topo.path(device_id{d}, device_id{p}).nvlinks);
          links += static_cast<unsigned>(per_peer.back());
        }
      }
      const bool switched = per_peer.size() > 2 && per_peer.front() > 0 &&
                            std::all_of(per_peer.begin(), per_peer.end(), [&](int n) { return n == per_peer.front(); });
      s.nvlink_up = switched ? static_cast<unsigned>(per_peer.front()) : links;
      s.missing.emplace_back("temperature, power, clocks, PCIe, utilisation: not modelled by the simulator");
      out.push_back(std::move(s));
    }
    add_pool_figures(out, true, {});
    return out;
  }

 private:
  const sim::machine& machine_;
};

}  // namespace

std::unique_ptr<source> make_nvml_source(std::string* why) {
  auto lib = nvml_library::acquire(why);
  if (!lib) return nullptr;
  return std::make_unique<nvml_source>(std::move(lib));
}

std::unique_ptr<source> make_cuda_source(std::string* why) {
  auto ids = cuda_identities();
  if (ids.empty()) {
    if (why != nullptr) *why = "the CUDA runtime sees no GPU (no device, or no driver)";
    return nullptr;
  }
  return std::make_unique<cuda_source>(std::move(ids));
}

std::unique_ptr<source> make_sim_source(const sim::machine& machine) { return std::make_unique<sim_source>(machine); }

std::unique_ptr<source> make_system_source(std::string* why) {
  std::string nvml_why, cuda_why;
  if (auto lib = nvml_library::acquire(&nvml_why)) {
    if (lib->device_count() > 0) return std::make_unique<nvml_source>(std::move(lib));
    nvml_why = "NVML sees no GPU";
  }
  if (auto s = make_cuda_source(&cuda_why)) return s;
  if (why != nullptr) *why = "NVML: " + nvml_why + "; CUDA: " + cuda_why;
  return nullptr;
}

}  // namespace mgm::telemetry
