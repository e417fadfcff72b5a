// A fake NVML for the tests: the symbols of src/platform/nvml_abi.hpp, answering from a JSON file
// named by MGM_FAKE_NVML_CONFIG. Built twice: the current ABI, and (MGM_FAKE_NVML_OLD) a driver from
// before the versioned calls, which exports only nvmlInit, nvmlDeviceGetMemoryInfo (v1), the v1
// process query and nvmlDeviceGetTemperature.
//
// Config: {"driver_version": "...", "init_error": 0, "devices": [{"name", "uuid", "pci_bus_id", "minor",
//   "memory": {"total", "reserved", "used"}, "temperature", "power_mw", "power_limit_mw",
//   "clock_sm", "clock_mem", "pcie_gen", "pcie_width", "pcie_rx_kbs", "pcie_tx_kbs",
//   "nvlinks": [1, 1, 0], "utilization": [gpu, mem], "processes": [{"pid", "name", "used"}],
//   "unsupported": ["power", "temperature", "clocks", "pcie", "nvlink", "utilization", "processes", "memory"],
//   "lost": true, "delay_ms": 0}]}   (a lost GPU answers its memory query with NVML_ERROR_GPU_IS_LOST;
//   "delay_ms" makes its memory query take that long, as a driver busy with a hung GPU does)
// With "reload": true the file is read again at each memory query, so a test can change the GPUs
// under a running mgm (it replaces the file by a rename).
#include "nvml_abi.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace abi = mgm::nvml_abi;

namespace {

struct fake_state {
  nlohmann::json config;
  int inits{0};
  int shutdowns{0};
  int live{0};
  unsigned int last_memory_version{0};
};

fake_state& state() {
  static fake_state s;
  return s;
}

// A handle is the device's index + 1; a MIG instance's adds (its slot + 1) << 16.
constexpr std::uintptr_t mig_shift = 16;

const nlohmann::json* device_of(abi::device_t d) {
  const auto h = reinterpret_cast<std::uintptr_t>(d);
  const auto i = h & ((std::uintptr_t{1} << mig_shift) - 1);
  const auto slot = h >> mig_shift;
  const auto& devs = state().config["devices"];
  if (state().live == 0) return nullptr;
  if (i == 0 || i > devs.size()) return nullptr;
  const auto& dev = devs[i - 1];
  if (slot == 0) return &dev;
  if (!dev.contains("mig") || slot > dev["mig"].size()) return nullptr;
  return &dev["mig"][slot - 1];
}

bool unsupported(const nlohmann::json& dev, const char* what) {
  if (!dev.contains("unsupported")) return false;
  const auto& u = dev["unsupported"];
  return std::find(u.begin(), u.end(), what) != u.end();
}

void copy_string(const std::string& s, char* out, unsigned int length) {
  std::strncpy(out, s.c_str(), length);
  if (length != 0) out[length - 1] = '\0';
}

abi::return_t do_init() {
  auto& s = state();
  const char* path = std::getenv("MGM_FAKE_NVML_CONFIG");
  if (path == nullptr) return abi::error_driver_not_loaded;
  std::ifstream in{path};
  if (!in) return abi::error_driver_not_loaded;
  try {
    s.config = nlohmann::json::parse(in);
  } catch (...) {
    return abi::error_unknown;
  }
  const int err = s.config.value("init_error", 0);
  if (err != 0) return err;
  ++s.inits;
  ++s.live;
  return abi::success;
}

// The config as the file says now, for "reload": true (a file that cannot be read keeps the last).
void reload_if_asked() {
  auto& s = state();
  if (!s.config.value("reload", false)) return;
  const char* path = std::getenv("MGM_FAKE_NVML_CONFIG");
  if (path == nullptr) return;
  std::ifstream in{path};
  if (!in) return;
  try {
    s.config = nlohmann::json::parse(in);
  } catch (...) {
  }
}

// Where both memory queries begin: the file read again if asked, the device, its delay, whether
// it is lost. `dev` is set whenever the device exists.
abi::return_t begin_memory_query(abi::device_t d, const nlohmann::json*& dev) {
  reload_if_asked();
  dev = device_of(d);
  if (dev == nullptr) return abi::error_invalid_argument;
  const auto ms = dev->value("delay_ms", 0);
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds{ms});
  return dev->value("lost", false) ? abi::error_gpu_is_lost : abi::success;
}

template <class Info>
abi::return_t list_processes(abi::device_t d, unsigned int* count, Info* infos) {
  const auto* dev = device_of(d);
  if (dev == nullptr || count == nullptr) return abi::error_invalid_argument;
  if (unsupported(*dev, "processes")) return abi::error_not_supported;
  const auto procs = dev->value("processes", nlohmann::json::array());
  const auto n = static_cast<unsigned int>(procs.size());
  if (*count < n || (infos == nullptr && n != 0)) {
    *count = n;
    return abi::error_insufficient_size;
  }
  *count = n;
  for (unsigned int i = 0; i < n; ++i) {
    infos[i] = Info{};
    infos[i].pid = procs[i].value("pid", 0U);
    infos[i].used_gpu_memory = procs[i].value("used", abi::value_not_available);
  }
  return abi::success;
}

}  // namespace

#define FAKE_API extern "C" __attribute__((visibility("default")))

// ---- what the tests inspect ----
FAKE_API int fake_nvml_inits() { return state().inits; }
FAKE_API int fake_nvml_shutdowns() { return state().shutdowns; }
FAKE_API unsigned int fake_nvml_last_memory_version() { return state().last_memory_version; }

// ---- lifecycle ----
#ifdef MGM_FAKE_NVML_OLD
FAKE_API abi::return_t nvmlInit() { return do_init(); }
FAKE_API abi::return_t nvmlDeviceGetCount(unsigned int* n) {
#else
FAKE_API abi::return_t nvmlInit_v2() { return do_init(); }
FAKE_API abi::return_t nvmlDeviceGetCount_v2(unsigned int* n) {
#endif
  if (state().live == 0) return abi::error_uninitialized;
  *n = static_cast<unsigned int>(state().config["devices"].size());
  return abi::success;
}

FAKE_API abi::return_t nvmlShutdown() {
  auto& s = state();
  if (s.live == 0) return abi::error_uninitialized;
  --s.live;
  ++s.shutdowns;
  return abi::success;
}

FAKE_API const char* nvmlErrorString(abi::return_t r) {
  switch (r) {
    case abi::error_not_supported: return "Not Supported";
    case abi::error_argument_version_mismatch: return "Argument version mismatch";
    case abi::error_insufficient_size: return "Insufficient Size";
    default: return "Unknown Error";
  }
}

FAKE_API abi::return_t nvmlSystemGetDriverVersion(char* out, unsigned int length) {
  copy_string(state().config.value("driver_version", "0.0"), out, length);
  return abi::success;
}

#ifdef MGM_FAKE_NVML_OLD
FAKE_API abi::return_t nvmlDeviceGetHandleByIndex(unsigned int i, abi::device_t* d) {
#else
FAKE_API abi::return_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, abi::device_t* d) {
#endif
  if (state().live == 0) return abi::error_uninitialized;
  if (i >= state().config["devices"].size()) return abi::error_invalid_argument;
  *d = reinterpret_cast<abi::device_t>(static_cast<std::uintptr_t>(i) + 1);
  return abi::success;
}

FAKE_API abi::return_t nvmlDeviceGetName(abi::device_t d, char* out, unsigned int length) {
  const auto* dev = device_of(d);
  if (dev == nullptr) return abi::error_invalid_argument;
  copy_string(dev->value("name", ""), out, length);
  return abi::success;
}

FAKE_API abi::return_t nvmlDeviceGetUUID(abi::device_t d, char* out, unsigned int length) {
  const auto* dev = device_of(d);
  if (dev == nullptr) return abi::error_invalid_argument;
  copy_string(dev->value("uuid", ""), out, length);
  return abi::success;
}

#ifndef MGM_FAKE_NVML_OLD
FAKE_API abi::return_t nvmlDeviceGetPciInfo_v3(abi::device_t d, abi::pci_info_t* pci) {
  const auto* dev = device_of(d);
  if (dev == nullptr) return abi::error_invalid_argument;
  *pci = abi::pci_info_t{};
  copy_string(dev->value("pci_bus_id", ""), pci->bus_id, sizeof pci->bus_id);
  return abi::success;
}

// MIG: "mig": [{"name", "uuid", "gpu_instance_id", "compute_instance_id", "memory"}] on a GPU turns
// MIG on; "max_mig" (default 7) is the slot count, slots past the list are empty (NOT_FOUND).
FAKE_API abi::return_t nvmlDeviceGetMigMode(abi::device_t d, unsigned int* current, unsigned int* pending) {
  const auto* dev = device_of(d);
  if (dev == nullptr || current == nullptr || pending == nullptr) return abi::error_invalid_argument;
  if (unsupported(*dev, "mig")) return abi::error_not_supported;
  *current = *pending = dev->contains("mig") ? abi::mig_enabled : 0;
  return abi::success;
}

FAKE_API abi::return_t nvmlDeviceGetMaxMigDeviceCount(abi::device_t d, unsigned int* count) {
  const auto* dev = device_of(d);
  if (dev == nullptr || count == nullptr) return abi::error_invalid_argument;
  *count = dev->contains("mig") ? dev->value("max_mig", 7U) : 0;
  return abi::success;
}

FAKE_API abi::return_t nvmlDeviceGetMigDeviceHandleByIndex(abi::device_t d, unsigned int slot, abi::device_t* mig) {
  const auto* dev = device_of(d);
  const auto h = reinterpret_cast<std::uintptr_t>(d);
  if (dev == nullptr || mig == nullptr || (h >> mig_shift) != 0) return abi::error_invalid_argument;
  if (!dev->contains("mig") || slot >= (*dev)["mig"].size()) return abi::error_not_found;
  *mig = reinterpret_cast<abi::device_t>(h | ((std::uintptr_t{slot} + 1) << mig_shift));
  return abi::success;
}

FAKE_API abi::return_t nvmlDeviceGetGpuInstanceId(abi::device_t d, unsigned int* id) {
  const auto* dev = device_of(d);
  if (dev == nullptr || id == nullptr || (reinterpret_cast<std::uintptr_t>(d) >> mig_shift) == 0) {
    return abi::error_invalid_argument;
  }
  *id = dev->value("gpu_instance_id", 0U);
  return abi::success;
}

FAKE_API abi::return_t nvmlDeviceGetComputeInstanceId(abi::device_t d, unsigned int* id) {
  const auto* dev = device_of(d);
  if (dev == nullptr || id == nullptr || (reinterpret_cast<std::uintptr_t>(d) >> mig_shift) == 0) {
    return abi::error_invalid_argument;
  }
  *id = dev->value("compute_instance_id", 0U);
  return abi::success;
}

FAKE_API abi::return_t nvmlDeviceGetMinorNumber(abi::device_t d, unsigned int* minor) {
  const auto* dev = device_of(d);
  if (dev == nullptr || minor == nullptr) return abi::error_invalid_argument;
  if (!dev->contains("minor")) return abi::error_not_supported;
  *minor = dev->value("minor", 0U);
  return abi::success;
}

FAKE_API abi::return_t nvmlDeviceGetMemoryInfo_v2(abi::device_t d, abi::memory_v2_t* m) {
  const nlohmann::json* dev = nullptr;
  if (const auto r = begin_memory_query(d, dev); r != abi::success) return r;
  state().last_memory_version = m->version;
  if (m->version != abi::memory_v2_version) return abi::error_argument_version_mismatch;
  if (unsupported(*dev, "memory")) return abi::error_not_supported;
  const auto& mem = (*dev)["memory"];
  m->total = mem.value("total", 0ULL);
  m->reserved = mem.value("reserved", 0ULL);
  m->used = mem.value("used", 0ULL);
  m->free = m->total - m->reserved - m->used;
  return abi::success;
}

FAKE_API abi::return_t nvmlDeviceGetTemperatureV(abi::device_t d, abi::temperature_v1_t* t) {
  const auto* dev = device_of(d);
  if (dev == nullptr) return abi::error_invalid_argument;
  if (t->version != abi::temperature_v1_version) return abi::error_argument_version_mismatch;
  if (unsupported(*dev, "temperature")) return abi::error_not_supported;
  t->temperature = dev->value("temperature", 0);
  return abi::success;
}

FAKE_API abi::return_t nvmlDeviceGetComputeRunningProcesses_v3(abi::device_t d, unsigned int* n, abi::process_info_t* p) {
  return list_processes(d, n, p);
}
#else
FAKE_API abi::return_t nvmlDeviceGetComputeRunningProcesses(abi::device_t d, unsigned int* n, abi::process_info_v1_t* p) {
  return list_processes(d, n, p);
}
#endif

FAKE_API abi::return_t nvmlDeviceGetMemoryInfo(abi::device_t d, abi::memory_v1_t* m) {
  const nlohmann::json* dev = nullptr;
  if (const auto r = begin_memory_query(d, dev); r != abi::success) return r;
  if (unsupported(*dev, "memory")) return abi::error_not_supported;
  const auto& mem = (*dev)["memory"];
  m->total = mem.value("total", 0ULL);
  m->used = mem.value("reserved", 0ULL) + mem.value("used", 0ULL);  // v1 counts the reserved part as used
  m->free = m->total - m->used;
  return abi::success;
}

FAKE_API abi::return_t nvmlDeviceGetTemperature(abi::device_t d, int sensor, unsigned int* t) {
  const auto* dev = device_of(d);
  if (dev == nullptr || sensor != abi::temperature_gpu) return abi::error_invalid_argument;
  if (unsupported(*dev, "temperature")) return abi::error_not_supported;
  *t = dev->value("temperature", 0U);
  return abi::success;
}

namespace {
abi::return_t uint_metric(abi::device_t d, const char* group, const char* key, unsigned int* out) {
  const auto* dev = device_of(d);
  if (dev == nullptr) return abi::error_invalid_argument;
  if (unsupported(*dev, group) || !dev->contains(key)) return abi::error_not_supported;
  *out = (*dev)[key].get<unsigned int>();
  return abi::success;
}
}  // namespace

FAKE_API abi::return_t nvmlDeviceGetPowerUsage(abi::device_t d, unsigned int* mw) { return uint_metric(d, "power", "power_mw", mw); }
FAKE_API abi::return_t nvmlDeviceGetEnforcedPowerLimit(abi::device_t d, unsigned int* mw) {
  return uint_metric(d, "power", "power_limit_mw", mw);
}
FAKE_API abi::return_t nvmlDeviceGetClockInfo(abi::device_t d, int type, unsigned int* mhz) {
  return uint_metric(d, "clocks", type == abi::clock_sm ? "clock_sm" : "clock_mem", mhz);
}
FAKE_API abi::return_t nvmlDeviceGetCurrPcieLinkGeneration(abi::device_t d, unsigned int* g) { return uint_metric(d, "pcie", "pcie_gen", g); }
FAKE_API abi::return_t nvmlDeviceGetCurrPcieLinkWidth(abi::device_t d, unsigned int* w) { return uint_metric(d, "pcie", "pcie_width", w); }
FAKE_API abi::return_t nvmlDeviceGetPcieThroughput(abi::device_t d, int counter, unsigned int* kbs) {
  return uint_metric(d, "pcie", counter == abi::pcie_rx_bytes ? "pcie_rx_kbs" : "pcie_tx_kbs", kbs);
}

FAKE_API abi::return_t nvmlDeviceGetNvLinkState(abi::device_t d, unsigned int link, int* active) {
  const auto* dev = device_of(d);
  if (dev == nullptr) return abi::error_invalid_argument;
  if (unsupported(*dev, "nvlink") || !dev->contains("nvlinks")) return abi::error_not_supported;
  const auto& links = (*dev)["nvlinks"];
  if (link >= links.size()) return abi::error_invalid_argument;
  *active = links[link].get<int>();
  return abi::success;
}

FAKE_API abi::return_t nvmlDeviceGetUtilizationRates(abi::device_t d, abi::utilization_t* u) {
  const auto* dev = device_of(d);
  if (dev == nullptr) return abi::error_invalid_argument;
  if (unsupported(*dev, "utilization") || !dev->contains("utilization")) return abi::error_not_supported;
  u->gpu = (*dev)["utilization"][0].get<unsigned int>();
  u->memory = (*dev)["utilization"][1].get<unsigned int>();
  return abi::success;
}

FAKE_API abi::return_t nvmlSystemGetProcessName(unsigned int pid, char* out, unsigned int length) {
  for (const auto& dev : state().config["devices"]) {
    for (const auto& p : dev.value("processes", nlohmann::json::array())) {
      if (p.value("pid", 0U) == pid) {
        copy_string(p.value("name", ""), out, length);
        return abi::success;
      }
    }
  }
  return abi::error_not_found;
}
