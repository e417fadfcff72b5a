// The subset of NVML's C ABI that MultiGpuMem uses, declared here so that no NVML header is needed
// to build: the library is loaded with dlopen at run time (src/telemetry/nvml.cpp), and the fake
// NVML of the tests (tests/fake_nvml) implements the same declarations.
//
// Layouts and constants are those of nvml.h (NVML API version 13). Unversioned NVML names are
// macros for the versioned symbols (`nvmlInit` -> `nvmlInit_v2`), so the loader asks for the
// versioned symbol first and falls back to the older one on old drivers.
#pragma once

#include <cstdint>

namespace mgm::nvml_abi {

using device_t = struct device_st*;  // nvmlDevice_t: opaque
using return_t = int;                 // nvmlReturn_t

// nvmlReturn_t values handled.
inline constexpr return_t success = 0;
inline constexpr return_t error_uninitialized = 1;
inline constexpr return_t error_invalid_argument = 2;
inline constexpr return_t error_not_supported = 3;
inline constexpr return_t error_no_permission = 4;
inline constexpr return_t error_not_found = 6;
inline constexpr return_t error_insufficient_size = 7;
inline constexpr return_t error_driver_not_loaded = 9;
inline constexpr return_t error_library_not_found = 12;
inline constexpr return_t error_function_not_found = 13;
inline constexpr return_t error_gpu_is_lost = 15;
inline constexpr return_t error_argument_version_mismatch = 25;
inline constexpr return_t error_unknown = 999;

// Buffer sizes.
inline constexpr unsigned int name_buffer_size = 96;             // NVML_DEVICE_NAME_V2_BUFFER_SIZE
inline constexpr unsigned int uuid_buffer_size = 96;             // NVML_DEVICE_UUID_V2_BUFFER_SIZE
inline constexpr unsigned int driver_version_buffer_size = 80;   // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE
inline constexpr unsigned int process_name_buffer_size = 256;
inline constexpr unsigned int nvlink_max_links = 36;             // NVML_NVLINK_MAX_LINKS (API 13)

// Enumerations.
inline constexpr int temperature_gpu = 0;   // NVML_TEMPERATURE_GPU
inline constexpr int clock_sm = 1;          // NVML_CLOCK_SM
inline constexpr int clock_mem = 2;         // NVML_CLOCK_MEM
inline constexpr int pcie_tx_bytes = 0;     // NVML_PCIE_UTIL_TX_BYTES (KB/s)
inline constexpr int pcie_rx_bytes = 1;     // NVML_PCIE_UTIL_RX_BYTES (KB/s)
inline constexpr int feature_enabled = 1;   // NVML_FEATURE_ENABLED
inline constexpr unsigned mig_enabled = 1;  // NVML_DEVICE_MIG_ENABLE

// nvmlPciInfo_t (the _v3 layout: busIdLegacy first).
struct pci_info_t {
  char bus_id_legacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pci_device_id;
  unsigned int pci_sub_system_id;
  char bus_id[32];
};

// nvmlMemory_t: v1, `used` includes what the driver reserves.
struct memory_v1_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// nvmlMemory_v2_t: reserved is separate; `version` must be memory_v2_version.
struct memory_v2_t {
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};

// NVML_STRUCT_VERSION(data, ver): the struct's size with the version in the top byte.
template <class T>
constexpr unsigned int struct_version(unsigned int ver) {
  return static_cast<unsigned int>(sizeof(T)) | (ver << 24U);
}
inline constexpr unsigned int memory_v2_version = struct_version<memory_v2_t>(2);

// nvmlTemperature_v1_t for nvmlDeviceGetTemperatureV.
struct temperature_v1_t {
  unsigned int version;
  int sensor_type;
  int temperature;
};
inline constexpr unsigned int temperature_v1_version = struct_version<temperature_v1_t>(1);

// nvmlUtilization_t.
struct utilization_t {
  unsigned int gpu;
  unsigned int memory;
};

// nvmlProcessInfo_v1_t (nvmlDeviceGetComputeRunningProcesses) and nvmlProcessInfo_t, the layout of
// the _v2 and _v3 calls.
struct process_info_v1_t {
  unsigned int pid;
  unsigned long long used_gpu_memory;
};
struct process_info_t {
  unsigned int pid;
  unsigned long long used_gpu_memory;  // bytes; NVML_VALUE_NOT_AVAILABLE when unknown
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
inline constexpr unsigned long long value_not_available = ~0ULL;

// Function types, by the symbol they are looked up under.
using init_fn = return_t (*)();
using shutdown_fn = return_t (*)();
using error_string_fn = const char* (*)(return_t);
using system_string_fn = return_t (*)(char*, unsigned int);
using count_fn = return_t (*)(unsigned int*);
using handle_by_index_fn = return_t (*)(unsigned int, device_t*);
using device_string_fn = return_t (*)(device_t, char*, unsigned int);
using pci_info_fn = return_t (*)(device_t, pci_info_t*);
using memory_v1_fn = return_t (*)(device_t, memory_v1_t*);
using memory_v2_fn = return_t (*)(device_t, memory_v2_t*);
using temperature_fn = return_t (*)(device_t, int, unsigned int*);
using temperature_v_fn = return_t (*)(device_t, temperature_v1_t*);
using device_uint_fn = return_t (*)(device_t, unsigned int*);
using clock_fn = return_t (*)(device_t, int, unsigned int*);
using pcie_throughput_fn = return_t (*)(device_t, int, unsigned int*);
using nvlink_state_fn = return_t (*)(device_t, unsigned int, int*);
using utilization_fn = return_t (*)(device_t, utilization_t*);
using processes_v1_fn = return_t (*)(device_t, unsigned int*, process_info_v1_t*);
using processes_fn = return_t (*)(device_t, unsigned int*, process_info_t*);
using process_name_fn = return_t (*)(unsigned int, char*, unsigned int);
using mig_mode_fn = return_t (*)(device_t, unsigned int*, unsigned int*);
using mig_handle_fn = return_t (*)(device_t, unsigned int, device_t*);

}  // namespace mgm::nvml_abi
