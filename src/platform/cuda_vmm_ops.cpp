// The virtual-memory seam on CUDA. The driver's cuMem* functions are looked up through the
// runtime (cudaGetDriverEntryPointByVersion), so the library never links libcuda and loads on
// machines without a driver. Every call goes through a `cuda_vmm_driver` table, so tests can run
// this code over a table of their own.
#include <mgm/bytes.hpp>
#include <mgm/error.hpp>
#include <mgm/log.hpp>
#include <mgm/platform/cuda_vmm_ops.hpp>

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

namespace mgm {
namespace {

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

CUmemAllocationProp device_prop(device_id d) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = d.value();
  return prop;
}

}  // namespace

const cuda_vmm_driver& cuda_vmm_driver::real() {
  static const cuda_vmm_driver table = [] {
    cuda_vmm_driver d;
    std::string problem;
    lookup("cuMemAddressReserve", d.address_reserve, problem);
    lookup("cuMemAddressFree", d.address_free, problem);
    lookup("cuMemCreate", d.create, problem);
    lookup("cuMemRelease", d.release, problem);
    lookup("cuMemMap", d.map, problem);
    lookup("cuMemUnmap", d.unmap, problem);
    lookup("cuMemSetAccess", d.set_access, problem);
    lookup("cuMemGetAllocationGranularity", d.granularity, problem);
    lookup("cuGetErrorName", d.error_name, problem);
    lookup("cuDeviceGet", d.device_get, problem);
    lookup("cuDeviceGetAttribute", d.device_attribute, problem);
    std::string optional;  // shareable memory only: their absence is said when they are called
    lookup("cuMemExportToShareableHandle", d.export_shareable, optional);
    lookup("cuMemImportFromShareableHandle", d.import_shareable, optional);
    d.unavailable = std::move(problem);
    return d;
  }();
  return table;
}

const cuda_vmm_driver& cuda_vmm_ops::loaded() const {
  if (!driver_->loaded()) throw cuda_error{cudaErrorInsufficientDriver, "cuda_vmm_ops: " + driver_->unavailable};
  return *driver_;
}

void cuda_vmm_ops::fail(CUresult r, const char* call) const {
  const char* name = "CUDA_ERROR_UNKNOWN";
  if (driver_->error_name != nullptr) driver_->error_name(r, &name);
  // The runtime's codes match the driver's for the failures these calls report.
  throw cuda_error{static_cast<cudaError_t>(r), std::string{call} + " failed: " + name};
}

void cuda_vmm_ops::log_failure(CUresult r, const char* call) const noexcept {
  const char* name = "CUDA_ERROR_UNKNOWN";
  if (driver_->error_name != nullptr) driver_->error_name(r, &name);
  log(log_level::error, std::string{"cuda_vmm_ops: "} + call + " failed with " + name);
}

bool cuda_vmm_ops::supported(device_id d) const {
  const auto& a = *driver_;
  if (!a.loaded() || d.is_host()) return false;
  // The runtime has no attribute for this; the driver's CU_DEVICE_ATTRIBUTE_... does.
  CUdevice dev{};
  int value = 0;
  if (a.device_get(&dev, d.value()) != CUDA_SUCCESS ||
      a.device_attribute(&value, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) != CUDA_SUCCESS || value == 0) {
    return false;
  }
  if (sharing_ != vmm_sharing::shareable) return true;
  int fd = 0;
  return a.device_attribute(&fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev) == CUDA_SUCCESS &&
         fd != 0;
}

// Shareable memory asks for the handle types it can have on `d`, and for GPUDirect RDMA.
CUmemAllocationProp cuda_vmm_ops::prop_for(device_id d) const {
  CUmemAllocationProp prop = device_prop(d);
  if (sharing_ != vmm_sharing::shareable) return prop;
  const auto& a = *driver_;
  unsigned types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUdevice dev{};
  if (a.device_get(&dev, d.value()) == CUDA_SUCCESS) {
    int fabric = 0;
    int rdma = 0;
    if (a.device_attribute(&fabric, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, dev) == CUDA_SUCCESS && fabric != 0) {
      types |= CU_MEM_HANDLE_TYPE_FABRIC;
    }
    if (a.device_attribute(&rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, dev) == CUDA_SUCCESS &&
        rdma != 0) {
      prop.allocFlags.gpuDirectRDMACapable = 1;
    }
  }
  prop.requestedHandleTypes = static_cast<CUmemAllocationHandleType>(types);
  return prop;
}

std::size_t cuda_vmm_ops::granularity(device_id d) const {
  const auto& a = loaded();
  const CUmemAllocationProp prop = prop_for(d);
  const auto which =
      sharing_ == vmm_sharing::shareable ? CU_MEM_ALLOC_GRANULARITY_RECOMMENDED : CU_MEM_ALLOC_GRANULARITY_MINIMUM;
  std::size_t g = 0;
  if (const CUresult r = a.granularity(&g, &prop, which); r != CUDA_SUCCESS) {
    fail(r, "cuMemGetAllocationGranularity");
  }
  return g;
}

void* cuda_vmm_ops::reserve(device_id d, std::size_t bytes) const {
  const auto& a = loaded();
  CUdeviceptr p = 0;
  if (const CUresult r = a.address_reserve(&p, bytes, granularity(d), 0, 0); r != CUDA_SUCCESS) {
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {  // the address space is exhausted: an out-of-memory, not a fault
      throw out_of_memory{"device " + std::to_string(d.value()) + ": cannot reserve " + detail::describe_bytes(bytes) +
                              " of virtual address space (cuMemAddressReserve)",
                          bytes};
    }
    fail(r, "cuMemAddressReserve");
  }
  return reinterpret_cast<void*>(p);
}

void cuda_vmm_ops::unreserve(void* va, std::size_t bytes) const noexcept {
  if (!driver_->loaded()) return;
  if (const CUresult r = driver_->address_free(reinterpret_cast<CUdeviceptr>(va), bytes); r != CUDA_SUCCESS) {
    log_failure(r, "cuMemAddressFree");
  }
}

cuda_vmm_ops::physical_handle cuda_vmm_ops::create(device_id d, std::size_t bytes) const {
  const auto& a = loaded();
  CUmemAllocationProp prop = prop_for(d);
  CUmemGenericAllocationHandle h = 0;
  CUresult r = a.create(&h, bytes, &prop, 0);
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_OUT_OF_MEMORY && (prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_FABRIC) != 0) {
    // Fabric handles need an IMEX channel the process may not have: without them, as NCCL does.
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    r = a.create(&h, bytes, &prop, 0);
  }
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    throw out_of_memory{"device " + std::to_string(d.value()) + ": out of memory creating " +
                            detail::describe_bytes(bytes) + " of physical memory (cuMemCreate)",
                        bytes};
  }
  if (r != CUDA_SUCCESS) fail(r, "cuMemCreate");
  return h;
}

void cuda_vmm_ops::release(physical_handle h) const noexcept {
  if (!driver_->loaded()) return;
  if (const CUresult r = driver_->release(h); r != CUDA_SUCCESS) log_failure(r, "cuMemRelease");
}

void cuda_vmm_ops::map(void* va, std::size_t bytes, physical_handle h) const {
  const auto& a = loaded();
  if (const CUresult r = a.map(reinterpret_cast<CUdeviceptr>(va), bytes, 0, h, 0); r != CUDA_SUCCESS) {
    // The driver may need memory for the page tables: that is out of memory, for the pool to
    // reclaim and retry as for cuMemCreate, not a failure to report.
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      throw out_of_memory{"out of memory mapping " + detail::describe_bytes(bytes) + " (cuMemMap)", bytes};
    }
    fail(r, "cuMemMap");
  }
}

void cuda_vmm_ops::unmap(void* va, std::size_t bytes) const noexcept {
  if (!driver_->loaded()) return;
  if (const CUresult r = driver_->unmap(reinterpret_cast<CUdeviceptr>(va), bytes); r != CUDA_SUCCESS) {
    log_failure(r, "cuMemUnmap");
  }
}

void cuda_vmm_ops::set_access(void* va, std::size_t bytes, std::span<const device_id> readers) const {
  const auto& a = loaded();
  std::vector<CUmemAccessDesc> descs(readers.size());
  for (std::size_t i = 0; i < readers.size(); ++i) {
    descs[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    descs[i].location.id = readers[i].value();
    descs[i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  if (const CUresult r = a.set_access(reinterpret_cast<CUdeviceptr>(va), bytes, descs.data(), descs.size());
      r != CUDA_SUCCESS) {
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      throw out_of_memory{"out of memory setting access to " + detail::describe_bytes(bytes) + " (cuMemSetAccess)", bytes};
    }
    fail(r, "cuMemSetAccess");
  }
}

int cuda_vmm_ops::export_handle(physical_handle h) const {
  const auto& a = loaded();
  if (sharing_ != vmm_sharing::shareable) {
    throw logic_error{"cuda_vmm_ops::export_handle: this memory was created process-local (use vmm_sharing::shareable)"};
  }
  if (a.export_shareable == nullptr) {
    throw cuda_error{cudaErrorNotSupported, "cuMemExportToShareableHandle is not in this driver"};
  }
  int fd = -1;
  if (const CUresult r = a.export_shareable(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0); r != CUDA_SUCCESS) {
    fail(r, "cuMemExportToShareableHandle");
  }
  return fd;
}

cuda_vmm_ops::physical_handle cuda_vmm_ops::import_handle(int fd) const {
  const auto& a = loaded();
  if (a.import_shareable == nullptr) {
    throw cuda_error{cudaErrorNotSupported, "cuMemImportFromShareableHandle is not in this driver"};
  }
  CUmemGenericAllocationHandle h = 0;
  // The driver takes the descriptor's value in the pointer.
  void* as_pointer = reinterpret_cast<void*>(static_cast<std::intptr_t>(fd));
  if (const CUresult r = a.import_shareable(&h, as_pointer, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR); r != CUDA_SUCCESS) {
    fail(r, "cuMemImportFromShareableHandle");
  }
  return h;
}

}  // namespace mgm
