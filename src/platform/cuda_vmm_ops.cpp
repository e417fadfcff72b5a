// The virtual-memory seam on CUDA. The driver's cuMem* functions are looked up through the
// runtime (cudaGetDriverEntryPointByVersion), so the library never links libcuda and loads on
// machines without a driver.
#include <mgm/bytes.hpp>
#include <mgm/error.hpp>
#include <mgm/log.hpp>
#include <mgm/platform/cuda_vmm_ops.hpp>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <mutex>
#include <string>
#include <vector>

namespace mgm {
namespace {

struct driver_api {
  bool loaded{false};
  std::string problem;
  decltype(&cuMemAddressReserve) address_reserve{nullptr};
  decltype(&cuMemAddressFree) address_free{nullptr};
  decltype(&cuMemCreate) create{nullptr};
  decltype(&cuMemRelease) release{nullptr};
  decltype(&cuMemMap) map{nullptr};
  decltype(&cuMemUnmap) unmap{nullptr};
  decltype(&cuMemSetAccess) set_access{nullptr};
  decltype(&cuMemGetAllocationGranularity) granularity{nullptr};
  decltype(&cuGetErrorName) error_name{nullptr};
  decltype(&cuDeviceGet) device_get{nullptr};
  decltype(&cuDeviceGetAttribute) device_attribute{nullptr};
};

template <class Fn>
bool lookup(const char* symbol, Fn& fn, std::string& problem) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  // 12000: the ABI these functions have had since CUDA 12.0.
  const cudaError_t status = cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &found);
  if (status != cudaSuccess || found != cudaDriverEntryPointSuccess || p == nullptr) {
    (void)cudaGetLastError();
    if (problem.empty()) {
      problem = std::string{"the CUDA driver entry point "} + symbol + " is unavailable (" +
                (status != cudaSuccess ? cudaGetErrorName(status) : "symbol not found") + ")";
    }
    return false;
  }
  fn = reinterpret_cast<Fn>(p);
  return true;
}

const driver_api& api() {
  static const driver_api a = [] {
    driver_api d;
    bool ok = true;
    ok &= lookup("cuMemAddressReserve", d.address_reserve, d.problem);
    ok &= lookup("cuMemAddressFree", d.address_free, d.problem);
    ok &= lookup("cuMemCreate", d.create, d.problem);
    ok &= lookup("cuMemRelease", d.release, d.problem);
    ok &= lookup("cuMemMap", d.map, d.problem);
    ok &= lookup("cuMemUnmap", d.unmap, d.problem);
    ok &= lookup("cuMemSetAccess", d.set_access, d.problem);
    ok &= lookup("cuMemGetAllocationGranularity", d.granularity, d.problem);
    ok &= lookup("cuGetErrorName", d.error_name, d.problem);
    ok &= lookup("cuDeviceGet", d.device_get, d.problem);
    ok &= lookup("cuDeviceGetAttribute", d.device_attribute, d.problem);
    d.loaded = ok;
    return d;
  }();
  return a;
}

const driver_api& loaded_api() {
  const auto& a = api();
  if (!a.loaded) throw cuda_error{cudaErrorInsufficientDriver, "cuda_vmm_ops: " + a.problem};
  return a;
}

[[noreturn]] void throw_driver(CUresult r, const char* call) {
  const char* name = "CUDA_ERROR_UNKNOWN";
  if (api().error_name != nullptr) api().error_name(r, &name);
  // The runtime's codes match the driver's for the failures these calls report.
  throw cuda_error{static_cast<cudaError_t>(r), std::string{call} + " failed: " + name};
}

#define MGM_CU_TRY(call)                                   \
  do {                                                     \
    const CUresult mgm_r_ = (call);                        \
    if (mgm_r_ != CUDA_SUCCESS) throw_driver(mgm_r_, #call); \
  } while (false)

CUmemAllocationProp device_prop(device_id d) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = d.value();
  return prop;
}

}  // namespace

bool cuda_vmm_ops::supported(device_id d) const {
  const auto& a = api();
  if (!a.loaded || d.is_host()) return false;
  // The runtime has no attribute for this; the driver's CU_DEVICE_ATTRIBUTE_... does.
  CUdevice dev{};
  int value = 0;
  return a.device_get(&dev, d.value()) == CUDA_SUCCESS &&
         a.device_attribute(&value, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) == CUDA_SUCCESS &&
         value != 0;
}

std::size_t cuda_vmm_ops::granularity(device_id d) const {
  const auto& a = loaded_api();
  const CUmemAllocationProp prop = device_prop(d);
  std::size_t g = 0;
  MGM_CU_TRY(a.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  return g;
}

void* cuda_vmm_ops::reserve(device_id d, std::size_t bytes) const {
  const auto& a = loaded_api();
  CUdeviceptr p = 0;
  MGM_CU_TRY(a.address_reserve(&p, bytes, granularity(d), 0, 0));
  return reinterpret_cast<void*>(p);
}

void cuda_vmm_ops::unreserve(void* va, std::size_t bytes) const noexcept {
  const auto& a = api();
  if (!a.loaded) return;
  if (const CUresult r = a.address_free(reinterpret_cast<CUdeviceptr>(va), bytes); r != CUDA_SUCCESS) {
    log(log_level::error, "cuda_vmm_ops: cuMemAddressFree failed with " + std::to_string(static_cast<int>(r)));
  }
}

cuda_vmm_ops::physical_handle cuda_vmm_ops::create(device_id d, std::size_t bytes) const {
  const auto& a = loaded_api();
  const CUmemAllocationProp prop = device_prop(d);
  CUmemGenericAllocationHandle h = 0;
  const CUresult r = a.create(&h, bytes, &prop, 0);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    throw out_of_memory{"device " + std::to_string(d.value()) + ": out of memory creating " +
                            detail::describe_bytes(bytes) + " of physical memory (cuMemCreate)",
                        bytes};
  }
  if (r != CUDA_SUCCESS) throw_driver(r, "cuMemCreate");
  return h;
}

void cuda_vmm_ops::release(physical_handle h) const noexcept {
  const auto& a = api();
  if (!a.loaded) return;
  if (const CUresult r = a.release(h); r != CUDA_SUCCESS) {
    log(log_level::error, "cuda_vmm_ops: cuMemRelease failed with " + std::to_string(static_cast<int>(r)));
  }
}

void cuda_vmm_ops::map(void* va, std::size_t bytes, physical_handle h) const {
  const auto& a = loaded_api();
  MGM_CU_TRY(a.map(reinterpret_cast<CUdeviceptr>(va), bytes, 0, h, 0));
}

void cuda_vmm_ops::unmap(void* va, std::size_t bytes) const noexcept {
  const auto& a = api();
  if (!a.loaded) return;
  if (const CUresult r = a.unmap(reinterpret_cast<CUdeviceptr>(va), bytes); r != CUDA_SUCCESS) {
    log(log_level::error, "cuda_vmm_ops: cuMemUnmap failed with " + std::to_string(static_cast<int>(r)));
  }
}

void cuda_vmm_ops::set_access(void* va, std::size_t bytes, std::span<const device_id> readers) const {
  const auto& a = loaded_api();
  std::vector<CUmemAccessDesc> descs(readers.size());
  for (std::size_t i = 0; i < readers.size(); ++i) {
    descs[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    descs[i].location.id = readers[i].value();
    descs[i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  MGM_CU_TRY(a.set_access(reinterpret_cast<CUdeviceptr>(va), bytes, descs.data(), descs.size()));
}

}  // namespace mgm
