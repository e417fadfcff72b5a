/// @file
/// @brief The virtual-memory seam (`mgm::vmm_ops`) through the driver's `cuMem*` functions.
#pragma once

#include <mgm/concepts.hpp>
#include <mgm/device.hpp>

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace mgm {

/// @brief The driver entry points `cuda_vmm_ops` calls, as a table of function pointers.
///
/// `real()` holds the driver's own functions, looked up once with
/// `cudaGetDriverEntryPointByVersion` (CUDA 12.0 ABI), so nothing links `libcuda`; where an entry
/// point is missing, `unavailable` says which. Tests give `cuda_vmm_ops` a table of their own
/// (over the simulator) to run the real seam code without a GPU.
struct cuda_vmm_driver {
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
  /// For shareable memory only; a driver without them still serves process-local memory.
  decltype(&cuMemExportToShareableHandle) export_shareable{nullptr};
  decltype(&cuMemImportFromShareableHandle) import_shareable{nullptr};
  std::string unavailable;  ///< empty when every entry point is there

  [[nodiscard]] bool loaded() const noexcept { return unavailable.empty(); }
  /// @brief The driver's functions (a process-wide table, looked up on first use).
  [[nodiscard]] static const cuda_vmm_driver& real();
};

/// @brief Virtual memory through CUDA's driver API (`cuMemAddressReserve`, `cuMemCreate`,
/// `cuMemMap`, `cuMemSetAccess`, ...), over a `cuda_vmm_driver` table.
///
/// On a machine without a driver `supported()` is false and the other calls throw
/// `mgm::cuda_error`. Physical memory is pinned device memory on `d`; `create` maps
/// `CUDA_ERROR_OUT_OF_MEMORY` to `mgm::out_of_memory`. The `noexcept` calls log a failure.
/// **Thread safety:** safe (the driver is). **Device affinity:** explicit in every call.
class cuda_vmm_ops {
 public:
  /// `CUmemGenericAllocationHandle` (an `unsigned long long`).
  using physical_handle = std::uint64_t;

  /// @brief Over the driver's own functions.
  cuda_vmm_ops() : driver_{&cuda_vmm_driver::real()} {}
  explicit cuda_vmm_ops(vmm_sharing sharing) : driver_{&cuda_vmm_driver::real()}, sharing_{sharing} {}
  /// @brief Over `driver`, which must outlive every copy.
  explicit cuda_vmm_ops(const cuda_vmm_driver& driver, vmm_sharing sharing = vmm_sharing::process_local) noexcept
      : driver_{&driver}, sharing_{sharing} {}

  [[nodiscard]] vmm_sharing sharing() const noexcept { return sharing_; }

  [[nodiscard]] bool supported(device_id d) const;
  [[nodiscard]] std::size_t granularity(device_id d) const;
  [[nodiscard]] void* reserve(device_id d, std::size_t bytes) const;
  void unreserve(void* va, std::size_t bytes) const noexcept;
  [[nodiscard]] physical_handle create(device_id d, std::size_t bytes) const;
  void release(physical_handle h) const noexcept;
  void map(void* va, std::size_t bytes, physical_handle h) const;
  void unmap(void* va, std::size_t bytes) const noexcept;
  void set_access(void* va, std::size_t bytes, std::span<const device_id> readers) const;

  /// @brief A POSIX file descriptor for physical memory created shareable; the caller owns it
  /// (close it, or send it to another process over a Unix socket). @throws mgm::logic_error for
  /// process-local memory; mgm::cuda_error when the driver refuses.
  [[nodiscard]] int export_handle(physical_handle h) const;
  /// @brief Physical memory another process exported (`export_handle`), for `map` here; `fd`
  /// stays the caller's to close. Release it with `release`. @throws mgm::cuda_error.
  [[nodiscard]] physical_handle import_handle(int fd) const;

  friend bool operator==(const cuda_vmm_ops& a, const cuda_vmm_ops& b) noexcept {
    return a.driver_ == b.driver_ && a.sharing_ == b.sharing_;
  }

 private:
  [[nodiscard]] const cuda_vmm_driver& loaded() const;
  [[noreturn]] void fail(CUresult r, const char* call) const;
  void log_failure(CUresult r, const char* call) const noexcept;

  [[nodiscard]] CUmemAllocationProp prop_for(device_id d) const;

  const cuda_vmm_driver* driver_;
  vmm_sharing sharing_{vmm_sharing::process_local};
};
static_assert(shareable_vmm_ops<cuda_vmm_ops>);

}  // namespace mgm
