/// @file
/// @brief The virtual-memory seam (`mgm::vmm_ops`) through the driver's `cuMem*` functions.
#pragma once

#include <mgm/concepts.hpp>
#include <mgm/device.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

namespace mgm {

/// @brief Virtual memory through CUDA's driver API (`cuMemAddressReserve`, `cuMemCreate`,
/// `cuMemMap`, `cuMemSetAccess`, ...).
///
/// The driver functions are looked up once with `cudaGetDriverEntryPointByVersion` (CUDA 12.0
/// ABI), so nothing links `libcuda`; on a machine without a driver `supported()` is false and the
/// other calls throw `mgm::cuda_error`. Physical memory is pinned device memory on `d`;
/// `create` maps `CUDA_ERROR_OUT_OF_MEMORY` to `mgm::out_of_memory`.
/// **Thread safety:** safe (the driver is). **Device affinity:** explicit in every call.
class cuda_vmm_ops {
 public:
  /// `CUmemGenericAllocationHandle` (an `unsigned long long`), without needing `<cuda.h>`.
  using physical_handle = std::uint64_t;

  [[nodiscard]] bool supported(device_id d) const;
  [[nodiscard]] std::size_t granularity(device_id d) const;
  [[nodiscard]] void* reserve(device_id d, std::size_t bytes) const;
  void unreserve(void* va, std::size_t bytes) const noexcept;
  [[nodiscard]] physical_handle create(device_id d, std::size_t bytes) const;
  void release(physical_handle h) const noexcept;
  void map(void* va, std::size_t bytes, physical_handle h) const;
  void unmap(void* va, std::size_t bytes) const noexcept;
  void set_access(void* va, std::size_t bytes, std::span<const device_id> readers) const;

  friend constexpr bool operator==(cuda_vmm_ops, cuda_vmm_ops) noexcept { return true; }
};
static_assert(vmm_ops<cuda_vmm_ops>);

}  // namespace mgm
