// NVML loaded with dlopen: symbol lookup with fallbacks, a shared reference-counted instance, and
// one device's sample with a reason for every metric it could not read.
#include "../platform/nvml_abi.hpp"

#include <mgm/telemetry/nvml.hpp>

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>

namespace mgm::telemetry {

namespace abi = nvml_abi;

struct nvml_library::impl {
  void* lib{nullptr};
  std::string path;
  std::vector<std::string> fallbacks;
  unsigned int count{0};

  abi::shutdown_fn shutdown{nullptr};
  abi::error_string_fn error_string{nullptr};
  abi::system_string_fn driver_version{nullptr};
  abi::handle_by_index_fn handle_by_index{nullptr};
  abi::device_string_fn name{nullptr};
  abi::device_string_fn uuid{nullptr};
  abi::pci_info_fn pci_info{nullptr};
  abi::device_uint_fn minor_number{nullptr};
  abi::memory_v2_fn memory_v2{nullptr};
  abi::memory_v1_fn memory_v1{nullptr};
  abi::temperature_v_fn temperature_v{nullptr};
  abi::temperature_fn temperature{nullptr};
  abi::device_uint_fn power_usage{nullptr};
  abi::device_uint_fn power_limit{nullptr};
  abi::clock_fn clock{nullptr};
  abi::device_uint_fn pcie_gen{nullptr};
  abi::device_uint_fn pcie_width{nullptr};
  abi::pcie_throughput_fn pcie_throughput{nullptr};
  abi::nvlink_state_fn nvlink_state{nullptr};
  abi::utilization_fn utilization{nullptr};
  abi::processes_fn processes{nullptr};
  abi::processes_v1_fn processes_v1{nullptr};
  abi::process_name_fn process_name{nullptr};
  abi::mig_mode_fn mig_mode{nullptr};
  abi::device_uint_fn max_mig_devices{nullptr};
  abi::mig_handle_fn mig_handle{nullptr};
  abi::device_uint_fn gpu_instance_id{nullptr};
  abi::device_uint_fn compute_instance_id{nullptr};

  template <class F>
  F symbol(const char* sym) const noexcept {
    return reinterpret_cast<F>(::dlsym(lib, sym));
  }
  // The first of `names` that the library exports; records a fallback when it is not the first.
  template <class F>
  F first_of(std::initializer_list<const char*> names) {
    const char* wanted = *names.begin();
    for (const char* n : names) {
      if (auto f = symbol<F>(n)) {
        if (n != wanted) fallbacks.push_back(std::string{n} + " for " + wanted);
        return f;
      }
    }
    return nullptr;
  }

  [[nodiscard]] std::string describe(abi::return_t r) const {
    std::string s = "NVML error " + std::to_string(r);
    if (error_string != nullptr) {
      if (const char* e = error_string(r)) s += std::string{" ("} + e + ")";
    }
    return s;
  }
};

namespace {

std::mutex g_mutex;
std::weak_ptr<nvml_library> g_instance;

}  // namespace

nvml_library::nvml_library(std::unique_ptr<impl> p) noexcept : impl_{std::move(p)} {}

nvml_library::~nvml_library() {
  if (impl_->shutdown != nullptr) impl_->shutdown();
  ::dlclose(impl_->lib);
}

std::shared_ptr<nvml_library> nvml_library::acquire(std::string* why) noexcept {
  try {
    const std::lock_guard lock{g_mutex};
    if (auto existing = g_instance.lock()) return existing;

    auto p = std::make_unique<impl>();
    const char* env = std::getenv("MGM_NVML_LIBRARY");
    p->path = env != nullptr && *env != '\0' ? env : "libnvidia-ml.so.1";
    p->lib = ::dlopen(p->path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (p->lib == nullptr) {
      const char* e = ::dlerror();
      if (why != nullptr) *why = "cannot load " + p->path + (e != nullptr ? std::string{": "} + e : std::string{});
      return nullptr;
    }
    auto fail = [&](std::string reason) -> std::shared_ptr<nvml_library> {
      if (why != nullptr) *why = std::move(reason);
      ::dlclose(p->lib);
      return nullptr;
    };
    const auto init = p->first_of<abi::init_fn>({"nvmlInit_v2", "nvmlInit"});
    const auto count = p->first_of<abi::count_fn>({"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"});
    p->handle_by_index = p->first_of<abi::handle_by_index_fn>({"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"});
    p->shutdown = p->symbol<abi::shutdown_fn>("nvmlShutdown");
    if (init == nullptr || count == nullptr || p->handle_by_index == nullptr || p->shutdown == nullptr) {
      return fail(p->path + " lacks nvmlInit, nvmlShutdown, nvmlDeviceGetCount or nvmlDeviceGetHandleByIndex: not an NVML library");
    }
    p->error_string = p->symbol<abi::error_string_fn>("nvmlErrorString");
    if (const abi::return_t r = init(); r != abi::success) {
      p->shutdown = nullptr;  // nothing to shut down
      return fail("nvmlInit failed: " + p->describe(r));
    }
    if (const abi::return_t r = count(&p->count); r != abi::success) {
      const std::string reason = "nvmlDeviceGetCount failed: " + p->describe(r);
      p->shutdown();
      return fail(reason);
    }
    p->driver_version = p->symbol<abi::system_string_fn>("nvmlSystemGetDriverVersion");
    p->name = p->symbol<abi::device_string_fn>("nvmlDeviceGetName");
    p->uuid = p->symbol<abi::device_string_fn>("nvmlDeviceGetUUID");
    p->pci_info = p->first_of<abi::pci_info_fn>({"nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2"});
    p->minor_number = p->symbol<abi::device_uint_fn>("nvmlDeviceGetMinorNumber");
    p->mig_mode = p->symbol<abi::mig_mode_fn>("nvmlDeviceGetMigMode");
    p->max_mig_devices = p->symbol<abi::device_uint_fn>("nvmlDeviceGetMaxMigDeviceCount");
    p->mig_handle = p->symbol<abi::mig_handle_fn>("nvmlDeviceGetMigDeviceHandleByIndex");
    p->gpu_instance_id = p->symbol<abi::device_uint_fn>("nvmlDeviceGetGpuInstanceId");
    p->compute_instance_id = p->symbol<abi::device_uint_fn>("nvmlDeviceGetComputeInstanceId");
    p->memory_v2 = p->symbol<abi::memory_v2_fn>("nvmlDeviceGetMemoryInfo_v2");
    p->memory_v1 = p->symbol<abi::memory_v1_fn>("nvmlDeviceGetMemoryInfo");
    if (p->memory_v2 == nullptr && p->memory_v1 != nullptr) {
      p->fallbacks.emplace_back("nvmlDeviceGetMemoryInfo for nvmlDeviceGetMemoryInfo_v2");
    }
    p->temperature_v = p->symbol<abi::temperature_v_fn>("nvmlDeviceGetTemperatureV");
    p->temperature = p->symbol<abi::temperature_fn>("nvmlDeviceGetTemperature");
    p->power_usage = p->symbol<abi::device_uint_fn>("nvmlDeviceGetPowerUsage");
    p->power_limit = p->first_of<abi::device_uint_fn>({"nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetPowerManagementLimit"});
    p->clock = p->symbol<abi::clock_fn>("nvmlDeviceGetClockInfo");
    p->pcie_gen = p->symbol<abi::device_uint_fn>("nvmlDeviceGetCurrPcieLinkGeneration");
    p->pcie_width = p->symbol<abi::device_uint_fn>("nvmlDeviceGetCurrPcieLinkWidth");
    p->pcie_throughput = p->symbol<abi::pcie_throughput_fn>("nvmlDeviceGetPcieThroughput");
    p->nvlink_state = p->symbol<abi::nvlink_state_fn>("nvmlDeviceGetNvLinkState");
    p->utilization = p->symbol<abi::utilization_fn>("nvmlDeviceGetUtilizationRates");
    p->processes = p->first_of<abi::processes_fn>({"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"});
    // Drivers 535.43 to 535.86 write a longer entry than their _v3 declares (gpustat #161): their
    // _v3 list reads as garbage, their _v2 is right.
    if (p->driver_version != nullptr) {
      char version[abi::driver_version_buffer_size] = {};
      unsigned major = 0, minor = 0;
      if (p->driver_version(version, sizeof version) == abi::success && std::sscanf(version, "%u.%u", &major, &minor) == 2 &&
          major == 535 && minor >= 43 && minor <= 86) {
        if (auto v2 = p->symbol<abi::processes_fn>("nvmlDeviceGetComputeRunningProcesses_v2")) {
          p->processes = v2;
          p->fallbacks.push_back(std::string{"nvmlDeviceGetComputeRunningProcesses_v2 for _v3 (driver "} + version + ")");
        }
      }
    }
    if (p->processes == nullptr) p->processes_v1 = p->symbol<abi::processes_v1_fn>("nvmlDeviceGetComputeRunningProcesses");
    p->process_name = p->symbol<abi::process_name_fn>("nvmlSystemGetProcessName");

    std::shared_ptr<nvml_library> lib{new nvml_library{std::move(p)}};
    g_instance = lib;
    return lib;
  } catch (const std::exception& e) {
    if (why != nullptr) *why = e.what();
    return nullptr;
  }
}

const std::string& nvml_library::path() const noexcept { return impl_->path; }
unsigned int nvml_library::device_count() const noexcept { return impl_->count; }
const std::vector<std::string>& nvml_library::fallbacks() const noexcept { return impl_->fallbacks; }

std::optional<std::string> nvml_library::driver_version() const {
  if (impl_->driver_version == nullptr) return std::nullopt;
  char buf[abi::driver_version_buffer_size] = {};
  if (impl_->driver_version(buf, sizeof buf) != abi::success) return std::nullopt;
  return std::string{buf};
}

namespace {

// Reads one metric: sets `out` from `read()` on success, else records why in `missing`.
template <class T, class Read>
void read_metric(const nvml_library::impl& m, device_sample& s, const char* metric, bool available,
                 std::optional<T>& out, Read read) {
  if (!available) {
    s.missing.push_back(std::string{metric} + ": symbol not in this NVML");
    return;
  }
  T value{};
  const abi::return_t r = read(value);
  if (r == abi::success) {
    out = value;
  } else {
    s.missing.push_back(std::string{metric} + ": " + m.describe(r));
  }
}

// A device's name and UUID (a GPU's, or a MIG instance's own).
void read_name_and_uuid(const nvml_library::impl& m, abi::device_t dev, device_sample& s) {
  if (m.name != nullptr) {
    char buf[abi::name_buffer_size] = {};
    if (m.name(dev, buf, sizeof buf) == abi::success) s.name = buf;
  }
  if (m.uuid != nullptr) {
    char buf[abi::uuid_buffer_size] = {};
    if (m.uuid(dev, buf, sizeof buf) == abi::success) s.uuid = buf;
  }
}

// A GPU's PCI bus id and minor number (its MIG instances have the same).
void read_bus_and_minor(const nvml_library::impl& m, abi::device_t dev, device_sample& s) {
  if (m.pci_info != nullptr) {
    abi::pci_info_t pci{};
    if (m.pci_info(dev, &pci) == abi::success) s.pci_bus_id = normalise_pci_bus_id(pci.bus_id);
  }
  if (unsigned int minor = 0; m.minor_number != nullptr && m.minor_number(dev, &minor) == abi::success) {
    s.minor_number = minor;
  }
}

// Memory: v2 separates what the driver reserves; v1's `used` includes it (`memory_reserved` then
// stays empty). Returns the last call's result, `error_function_not_found` when neither exists.
abi::return_t read_memory(const nvml_library::impl& m, abi::device_t dev, device_sample& s) {
  abi::return_t r = abi::error_function_not_found;
  if (m.memory_v2 != nullptr) {
    abi::memory_v2_t mem{};
    mem.version = abi::memory_v2_version;
    if (r = m.memory_v2(dev, &mem); r == abi::success) {
      s.memory_total = mem.total;
      s.memory_used = mem.used;
      s.memory_free = mem.free;
      s.memory_reserved = mem.reserved;
      return r;
    }
  }
  if (m.memory_v1 != nullptr) {
    abi::memory_v1_t mem{};
    if (r = m.memory_v1(dev, &mem); r == abi::success) {
      s.memory_total = mem.total;
      s.memory_used = mem.used;
      s.memory_free = mem.free;
    }
  }
  return r;
}

}  // namespace

device_sample nvml_library::sample(unsigned int index, bool with_processes) const {
  device_sample s;
  s.time = clock::now();
  s.index = static_cast<int>(index);
  const impl& m = *impl_;
  abi::device_t dev{nullptr};
  if (const abi::return_t r = m.handle_by_index(index, &dev); r != abi::success) {
    s.missing.push_back("device: " + m.describe(r));
    s.lost = r == abi::error_gpu_is_lost;
    return s;
  }
  try {
    read_name_and_uuid(m, dev, s);
    read_bus_and_minor(m, dev, s);
    const abi::return_t mr = read_memory(m, dev, s);
    if (mr == abi::success && !s.memory_reserved) {
      s.missing.emplace_back("memory.reserved: only nvmlDeviceGetMemoryInfo (v1) answered; used includes it");
    }
    if (mr == abi::error_gpu_is_lost) s.lost = true;
    if (mr != abi::success) {
      s.missing.push_back("memory: " +
                          (mr == abi::error_function_not_found ? std::string{"symbol not in this NVML"} : m.describe(mr)));
    }

    // Temperature: the versioned call where present, else the deprecated one.
    abi::return_t tr = abi::error_function_not_found;
    if (m.temperature_v != nullptr) {
      abi::temperature_v1_t t{};
      t.version = abi::temperature_v1_version;
      t.sensor_type = abi::temperature_gpu;
      tr = m.temperature_v(dev, &t);
      if (tr == abi::success) s.temperature_c = t.temperature;
    }
    if (tr != abi::success && m.temperature != nullptr) {
      unsigned int t = 0;
      tr = m.temperature(dev, abi::temperature_gpu, &t);
      if (tr == abi::success) s.temperature_c = t;
    }
    if (tr != abi::success) {
      s.missing.push_back("temperature.gpu: " +
                          (tr == abi::error_function_not_found ? std::string{"symbol not in this NVML"} : m.describe(tr)));
    }

    std::optional<unsigned int> mw;
    read_metric(m, s, "power.draw", m.power_usage != nullptr, mw, [&](unsigned int& v) { return m.power_usage(dev, &v); });
    if (mw) s.power_draw_w = *mw / 1000.0;
    mw.reset();
    read_metric(m, s, "power.limit", m.power_limit != nullptr, mw, [&](unsigned int& v) { return m.power_limit(dev, &v); });
    if (mw) s.power_limit_w = *mw / 1000.0;

    read_metric(m, s, "clocks.sm", m.clock != nullptr, s.clock_sm_mhz,
                [&](unsigned int& v) { return m.clock(dev, abi::clock_sm, &v); });
    read_metric(m, s, "clocks.mem", m.clock != nullptr, s.clock_mem_mhz,
                [&](unsigned int& v) { return m.clock(dev, abi::clock_mem, &v); });
    read_metric(m, s, "pcie.link.gen.current", m.pcie_gen != nullptr, s.pcie_gen,
                [&](unsigned int& v) { return m.pcie_gen(dev, &v); });
    read_metric(m, s, "pcie.link.width.current", m.pcie_width != nullptr, s.pcie_width,
                [&](unsigned int& v) { return m.pcie_width(dev, &v); });
    std::optional<unsigned int> kbs;
    read_metric(m, s, "mgm.pcie.rx", m.pcie_throughput != nullptr, kbs,
                [&](unsigned int& v) { return m.pcie_throughput(dev, abi::pcie_rx_bytes, &v); });
    if (kbs) s.pcie_rx_mb_s = *kbs / 1000.0;
    kbs.reset();
    read_metric(m, s, "mgm.pcie.tx", m.pcie_throughput != nullptr, kbs,
                [&](unsigned int& v) { return m.pcie_throughput(dev, abi::pcie_tx_bytes, &v); });
    if (kbs) s.pcie_tx_mb_s = *kbs / 1000.0;

    // NVLink: links are numbered from 0; a link index past the device's last gives an error,
    // and a device without NVLink answers NOT_SUPPORTED for link 0.
    if (m.nvlink_state != nullptr) {
      unsigned int up = 0;
      abi::return_t first = abi::success;
      for (unsigned int l = 0; l < abi::nvlink_max_links; ++l) {
        int active = 0;
        const abi::return_t r = m.nvlink_state(dev, l, &active);
        if (l == 0) first = r;
        if (r != abi::success) break;
        if (active == abi::feature_enabled) ++up;
      }
      if (first == abi::success || first == abi::error_not_supported) {
        s.nvlink_up = up;  // no NVLink is 0 links up, not an unknown
      } else {
        s.missing.push_back("mgm.nvlink.up: " + m.describe(first));
      }
    } else {
      s.missing.emplace_back("mgm.nvlink.up: symbol not in this NVML");
    }

    if (m.utilization != nullptr) {
      abi::utilization_t u{};
      if (const abi::return_t r = m.utilization(dev, &u); r == abi::success) {
        s.utilization_gpu_pct = u.gpu;
        s.utilization_mem_pct = u.memory;
      } else {
        s.missing.push_back("utilization.gpu: " + m.describe(r));
      }
    } else {
      s.missing.emplace_back("utilization.gpu: symbol not in this NVML");
    }

    if (with_processes) {
      // Ask for the count first, then read with headroom: the list changes between the calls.
      auto name_of = [&](unsigned int pid) {
        if (m.process_name == nullptr) return std::string{};
        char buf[abi::process_name_buffer_size] = {};
        return m.process_name(pid, buf, sizeof buf) == abi::success ? std::string{buf} : std::string{};
      };
      auto add = [&](unsigned int pid, unsigned long long used) {
        process_sample p;
        p.pid = pid;
        p.name = name_of(pid);
        if (used != abi::value_not_available) p.used_bytes = used;
        s.processes.push_back(std::move(p));
      };
      auto list = [&](auto fn, auto* tag) {
        using info = std::remove_pointer_t<decltype(tag)>;
        for (int attempt = 0; attempt < 3; ++attempt) {
          unsigned int n = 0;
          abi::return_t r = fn(dev, &n, nullptr);
          if (r == abi::success) return;  // no processes
          if (r != abi::error_insufficient_size) {
            s.missing.push_back("processes: " + m.describe(r));
            return;
          }
          std::vector<info> buf(n + 8);
          n = static_cast<unsigned int>(buf.size());
          r = fn(dev, &n, buf.data());
          if (r == abi::success) {
            for (unsigned int i = 0; i < n && i < buf.size(); ++i) add(buf[i].pid, buf[i].used_gpu_memory);
            return;
          }
          if (r != abi::error_insufficient_size) {
            s.missing.push_back("processes: " + m.describe(r));
            return;
          }
        }
        s.missing.emplace_back("processes: the process list kept growing");
      };
      if (m.processes != nullptr) {
        list(m.processes, static_cast<abi::process_info_t*>(nullptr));
      } else if (m.processes_v1 != nullptr) {
        list(m.processes_v1, static_cast<abi::process_info_v1_t*>(nullptr));
      } else {
        s.missing.emplace_back("processes: symbol not in this NVML");
      }
    }
  } catch (const std::exception& e) {
    s.missing.push_back(std::string{"sample: "} + e.what());
  }
  return s;
}

std::vector<device_sample> nvml_library::mig_instances(unsigned int index) const {
  std::vector<device_sample> out;
  const impl& m = *impl_;
  if (m.mig_mode == nullptr || m.max_mig_devices == nullptr || m.mig_handle == nullptr) return out;
  abi::device_t dev{nullptr};
  unsigned int current = 0;
  unsigned int pending = 0;
  unsigned int slots = 0;
  if (m.handle_by_index(index, &dev) != abi::success || m.mig_mode(dev, &current, &pending) != abi::success ||
      current != abi::mig_enabled || m.max_mig_devices(dev, &slots) != abi::success) {
    return out;
  }
  try {
    device_sample gpu;  // what the instances share with their GPU
    gpu.index = static_cast<int>(index);
    read_bus_and_minor(m, dev, gpu);
    for (unsigned int slot = 0; slot < slots; ++slot) {
      abi::device_t mig{nullptr};
      if (m.mig_handle(dev, slot, &mig) != abi::success) continue;  // an empty slot: NOT_FOUND
      device_sample s = gpu;
      s.time = clock::now();
      read_name_and_uuid(m, mig, s);
      mig_identity id;
      if (unsigned int v = 0; m.gpu_instance_id != nullptr && m.gpu_instance_id(mig, &v) == abi::success) {
        id.gpu_instance_id = v;
      }
      if (unsigned int v = 0; m.compute_instance_id != nullptr && m.compute_instance_id(mig, &v) == abi::success) {
        id.compute_instance_id = v;
      }
      // "NVIDIA A100-SXM4-80GB MIG 3g.40gb": the profile is the last word.
      if (const auto at = s.name.rfind(' '); at != std::string::npos && s.name.find(" MIG ") != std::string::npos) {
        id.profile = s.name.substr(at + 1);
      }
      s.mig = std::move(id);
      const abi::return_t mr = read_memory(m, mig, s);
      if (mr != abi::success) s.missing.push_back("memory: " + m.describe(mr));
      s.missing.emplace_back("temperature, power, clocks, PCIe, NVLink, utilization: the GPU's, not the instance's");
      out.push_back(std::move(s));
    }
  } catch (const std::exception&) {
    // Out of memory while building strings: the instances read so far.
  }
  return out;
}

std::string normalise_pci_bus_id(std::string_view id) {
  std::string s;
  for (char c : id) {
    if (c == '\0') break;
    s += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  // domain:bus:device.function; widen the domain to 8 digits as NVML writes it.
  const auto colon = s.find(':');
  if (colon != std::string::npos && s.find(':', colon + 1) != std::string::npos && colon < 8) {
    s.insert(0, 8 - colon, '0');
  }
  return s;
}

std::size_t join_cuda_ordinals(std::vector<device_sample>& samples, const std::vector<cuda_identity>& cuda) {
  std::size_t joined = 0;
  for (auto& s : samples) {
    s.cuda_ordinal.reset();
    const std::string bus = s.pci_bus_id.empty() ? std::string{} : normalise_pci_bus_id(s.pci_bus_id);
    for (const auto& c : cuda) {
      const bool by_uuid = !s.uuid.empty() && !c.uuid.empty() && s.uuid == c.uuid;
      const bool by_bus = !bus.empty() && !c.pci_bus_id.empty() && bus == normalise_pci_bus_id(c.pci_bus_id);
      if (by_uuid || by_bus) {
        s.cuda_ordinal = c.ordinal;
        ++joined;
        break;
      }
    }
  }
  return joined;
}

}  // namespace mgm::telemetry
