/// @file
/// @brief `cuda_allocator`: `cudaMalloc` / `cudaFree` on one device.
#pragma once

#include <mgm/concepts.hpp>
#include <mgm/detail/checks.hpp>
#include <mgm/device.hpp>
#include <mgm/error.hpp>
#include <mgm/log.hpp>
#include <mgm/platform/cuda_stream_ops.hpp>
#include <mgm/platform/cuda_vmm_ops.hpp>
#include <mgm/properties.hpp>
#include <mgm/stream.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

namespace mgm {

/// @brief Device memory straight from `cudaMalloc`, freed with `cudaFree`: no caching.
///
/// The baseline every pool is measured against, and the usual upstream of a `caching_pool`.
/// `cudaMalloc` is synchronous and `cudaFree` synchronises the device, so the stream-ordered
/// calls are the synchronous ones (correct for any stream, if slow).
/// Alignments up to 256 bytes are honoured (CUDA's guarantee).
/// @throws mgm::out_of_memory when `cudaMalloc` reports `cudaErrorMemoryAllocation`;
/// mgm::cuda_error for other failures; mgm::logic_error for a bad alignment.
/// **Thread safety:** safe. **Device affinity:** the device given at construction, made current
/// (through `scoped_device`) for every call.
class cuda_allocator {
 public:
  using stream_ops_type = cuda_stream_ops;
  using vmm_ops_type = cuda_vmm_ops;

  explicit cuda_allocator(device_id device) noexcept : device_{device} {}
  /// @brief With the virtual memory a pool's expandable segments take from it made `sharing`
  /// (`vmm_sharing::shareable`: for NCCL registration and other processes).
  cuda_allocator(device_id device, vmm_sharing sharing) noexcept : device_{device}, sharing_{sharing} {}

  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = cuda_allocation_alignment) {
    detail::check_alignment(alignment, cuda_allocation_alignment, "cuda_allocator");
    if (bytes == 0) return nullptr;
    const scoped_device on{device_};
    void* p = nullptr;
    MGM_CUDA_TRY_ALLOC(cudaMalloc(&p, bytes), bytes);
    return p;
  }

  void deallocate(void* p, std::size_t /*bytes*/, std::size_t /*alignment*/ = cuda_allocation_alignment) noexcept {
    if (p == nullptr) return;
    try {
      const scoped_device on{device_};
      MGM_CUDA_TRY(cudaFree(p));
    } catch (const std::exception& e) {
      log(log_level::error, std::string{"cuda_allocator::deallocate: "} + e.what());
    }
  }

  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref /*stream*/) {
    return allocate(bytes, alignment);
  }
  void deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref /*stream*/) noexcept {
    deallocate(p, bytes, alignment);
  }

  [[nodiscard]] device_id device() const noexcept { return device_; }
  /// @brief The device's free memory (`cudaMemGetInfo`).
  [[nodiscard]] std::size_t free_bytes() const { return memory_info(device_).free_bytes; }
  [[nodiscard]] stream_ops_type stream_ops() const noexcept { return {}; }
  /// @brief The virtual-memory seam on this device (for a pool's expandable segments).
  [[nodiscard]] vmm_ops_type vmm_ops() const noexcept { return vmm_ops_type{sharing_}; }
  /// @brief The device's memory (`cudaMemGetInfo`).
  [[nodiscard]] std::size_t total_bytes() const { return memory_info(device_).total_bytes; }

  friend bool operator==(const cuda_allocator& a, const cuda_allocator& b) noexcept {
    return a.device_ == b.device_ && a.sharing_ == b.sharing_;
  }
  friend void get_property(const cuda_allocator&, device_accessible) noexcept {}
  friend device_id get_property(const cuda_allocator& a, device_affinity) noexcept { return a.device_; }

 private:
  device_id device_;
  vmm_sharing sharing_{vmm_sharing::process_local};
};
static_assert(platform_allocator<cuda_allocator>);
static_assert(has_property<cuda_allocator, device_accessible>);
static_assert(!has_property<cuda_allocator, host_accessible>);

}  // namespace mgm
