/// @file
/// @brief `managed_allocator`: unified memory from `cudaMallocManaged` with a preferred location.
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

/// @brief Managed (unified) memory whose pages prefer to live on `preferred` (a device, or
/// `device_id::host()`): `cudaMallocManaged` followed by `cudaMemAdviseSetPreferredLocation`.
///
/// Oversubscribes device memory at the cost of page migration; the allocation itself is
/// synchronous, and `cudaFree` synchronises the device, so the stream-ordered calls are too.
/// @throws mgm::out_of_memory on `cudaErrorMemoryAllocation`, mgm::cuda_error otherwise.
/// **Thread safety:** safe. **Device affinity:** the preferred location.
class managed_allocator {
 public:
  using stream_ops_type = cuda_stream_ops;

  explicit managed_allocator(device_id preferred) noexcept : preferred_{preferred} {}

  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = cuda_allocation_alignment) {
    detail::check_alignment(alignment, cuda_allocation_alignment, "managed_allocator");
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    if (preferred_.is_host()) {
      MGM_CUDA_TRY_ALLOC(cudaMallocManaged(&p, bytes, cudaMemAttachGlobal), bytes);
    } else {
      const scoped_device on{preferred_};
      MGM_CUDA_TRY_ALLOC(cudaMallocManaged(&p, bytes, cudaMemAttachGlobal), bytes);
    }
    cudaMemLocation location{};
    location.type = preferred_.is_host() ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
    location.id = preferred_.is_host() ? 0 : preferred_.value();
    const cudaError_t status = cudaMemAdvise(p, bytes, cudaMemAdviseSetPreferredLocation, location);
    if (status != cudaSuccess) {
      (void)cudaFree(p);
      detail::throw_cuda_error(status, "cudaMemAdvise(SetPreferredLocation)", __FILE__, __LINE__);
    }
    return p;
  }
  void deallocate(void* p, std::size_t /*bytes*/, std::size_t /*alignment*/ = cuda_allocation_alignment) noexcept {
    if (p == nullptr) return;
    const cudaError_t status = cudaFree(p);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      log(log_level::error, std::string{"managed_allocator: cudaFree failed: "} + cudaGetErrorName(status));
    }
  }
  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref /*stream*/) {
    return allocate(bytes, alignment);
  }
  void deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref /*stream*/) noexcept {
    deallocate(p, bytes, alignment);
  }

  [[nodiscard]] device_id preferred_location() const noexcept { return preferred_; }
  [[nodiscard]] stream_ops_type stream_ops() const noexcept { return {}; }

  friend bool operator==(const managed_allocator& a, const managed_allocator& b) noexcept {
    return a.preferred_ == b.preferred_;
  }
  friend void get_property(const managed_allocator&, device_accessible) noexcept {}
  friend void get_property(const managed_allocator&, host_accessible) noexcept {}
  friend device_id get_property(const managed_allocator& a, device_affinity) noexcept { return a.preferred_; }

 private:
  device_id preferred_;
};
static_assert(platform_allocator<managed_allocator>);

}  // namespace mgm
