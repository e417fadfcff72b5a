/// @file
/// @brief `pinned_host_allocator`: page-locked host memory from `cudaHostAlloc`.
#pragma once

#include <mgm/concepts.hpp>
#include <mgm/detail/checks.hpp>
#include <mgm/device.hpp>
#include <mgm/error.hpp>
#include <mgm/log.hpp>
#include <mgm/platform/cuda_stream_ops.hpp>
#include <mgm/properties.hpp>
#include <mgm/stream.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

namespace mgm {

/// @brief Pinned (page-locked) host memory, visible to every device (`cudaHostAllocPortable`)
/// and mapped into the device address space: the host tier that copies run at full PCIe speed from.
///
/// `deallocate_async` waits for `stream` before `cudaFreeHost`, because a copy still queued on
/// it may read the memory; a caching pool above avoids that wait.
/// @throws mgm::out_of_memory when the host cannot pin more memory; mgm::cuda_error otherwise.
/// **Thread safety:** safe. **Device affinity:** the host (`device_id::host()`); the CUDA context
/// used is that of `context_device`.
class pinned_host_allocator {
 public:
  using stream_ops_type = cuda_stream_ops;

  explicit pinned_host_allocator(device_id context_device = device_id{0}) noexcept : context_{context_device} {}

  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = cuda_allocation_alignment) {
    detail::check_alignment(alignment, cuda_allocation_alignment, "pinned_host_allocator");
    if (bytes == 0) return nullptr;
    const scoped_device on{context_};
    void* p = nullptr;
    MGM_CUDA_TRY_ALLOC(cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped), bytes);
    return p;
  }
  void deallocate(void* p, std::size_t /*bytes*/, std::size_t /*alignment*/ = cuda_allocation_alignment) noexcept {
    if (p == nullptr) return;
    const cudaError_t status = cudaFreeHost(p);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      log(log_level::error, std::string{"pinned_host_allocator: cudaFreeHost failed: "} + cudaGetErrorName(status));
    }
  }
  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref /*stream*/) {
    return allocate(bytes, alignment);
  }
  void deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept {
    if (p == nullptr) return;
    const cudaError_t status = cudaStreamSynchronize(stream.get());
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      log(log_level::error, std::string{"pinned_host_allocator: cudaStreamSynchronize failed: "} +
                                cudaGetErrorName(status));
    }
    deallocate(p, bytes, alignment);
  }

  [[nodiscard]] stream_ops_type stream_ops() const noexcept { return {}; }

  friend bool operator==(const pinned_host_allocator&, const pinned_host_allocator&) noexcept { return true; }
  friend void get_property(const pinned_host_allocator&, device_accessible) noexcept {}
  friend void get_property(const pinned_host_allocator&, host_accessible) noexcept {}
  friend device_id get_property(const pinned_host_allocator&, device_affinity) noexcept { return device_id::host(); }

 private:
  device_id context_;
};
static_assert(platform_allocator<pinned_host_allocator>);
static_assert(has_property<pinned_host_allocator, host_accessible>);

}  // namespace mgm
