/// @file
/// @brief `cuda_async_allocator`: `cudaMallocFromPoolAsync` on a device's `cudaMemPool_t`.
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
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

namespace mgm {

/// @brief CUDA's stream-ordered allocator (`cudaMallocAsync`) on a memory pool of one device.
///
/// By default it creates a pool of its own on `device` (copies share it; the last copy destroys
/// it); `cuda_async_allocator::from_pool` wraps an existing pool without owning it. The release
/// threshold is the number of reserved bytes the driver keeps cached across synchronisations
/// (`cudaMemPoolAttrReleaseThreshold`); the default keeps everything, as a caching allocator should,
/// and `release(bytes_to_keep)` trims explicitly.
/// The synchronous `allocate` allocates on the device's legacy default stream and waits for it.
/// @throws mgm::out_of_memory on `cudaErrorMemoryAllocation`, mgm::cuda_error otherwise.
/// **Thread safety:** safe. **Device affinity:** the pool's device.
class cuda_async_allocator {
 public:
  using stream_ops_type = cuda_stream_ops;
  static constexpr std::uint64_t keep_everything = std::numeric_limits<std::uint64_t>::max();

  /// @brief A new pool on `device` that keeps up to `release_threshold_bytes` cached.
  explicit cuda_async_allocator(device_id device, std::uint64_t release_threshold_bytes = keep_everything)
      : device_{device} {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device.value();
    cudaMemPool_t pool{};
    MGM_CUDA_TRY(cudaMemPoolCreate(&pool, &props));
    pool_ = std::shared_ptr<CUmemPoolHandle_st>{pool, [](cudaMemPool_t p) { (void)cudaMemPoolDestroy(p); }};
    set_release_threshold(release_threshold_bytes);
  }

  /// @brief Wraps `pool`, which must live on `device` and outlive every copy; does not own it.
  [[nodiscard]] static cuda_async_allocator from_pool(device_id device, cudaMemPool_t pool) {
    return cuda_async_allocator{device, std::shared_ptr<CUmemPoolHandle_st>{pool, [](cudaMemPool_t) {}}};
  }

  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) {
    detail::check_alignment(alignment, cuda_allocation_alignment, "cuda_async_allocator");
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    MGM_CUDA_TRY_ALLOC(cudaMallocFromPoolAsync(&p, bytes, pool_.get(), stream.get()), bytes);
    return p;
  }
  void deallocate_async(void* p, std::size_t /*bytes*/, std::size_t /*alignment*/, stream_ref stream) noexcept {
    if (p == nullptr) return;
    const cudaError_t status = cudaFreeAsync(p, stream.get());
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      log(log_level::error, std::string{"cuda_async_allocator: cudaFreeAsync failed: "} + cudaGetErrorName(status));
    }
  }

  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = cuda_allocation_alignment) {
    const scoped_device on{device_};
    void* p = allocate_async(bytes, alignment, stream_ref{});
    if (p != nullptr) MGM_CUDA_TRY(cudaStreamSynchronize(nullptr));
    return p;
  }
  void deallocate(void* p, std::size_t bytes, std::size_t alignment = cuda_allocation_alignment) noexcept {
    if (p == nullptr) return;
    try {
      const scoped_device on{device_};
      deallocate_async(p, bytes, alignment, stream_ref{});
    } catch (const std::exception& e) {
      log(log_level::error, std::string{"cuda_async_allocator::deallocate: "} + e.what());
    }
  }

  /// @brief Sets `cudaMemPoolAttrReleaseThreshold`.
  void set_release_threshold(std::uint64_t bytes) {
    MGM_CUDA_TRY(cudaMemPoolSetAttribute(pool_.get(), cudaMemPoolAttrReleaseThreshold, &bytes));
  }
  /// @brief Lets `peer` read and write this pool's memory (`cudaMemPoolSetAccess`: memory pools
  /// ignore `cudaDeviceEnablePeerAccess`).
  void grant_access(device_id peer) {
    if (peer == device_) return;
    cudaMemAccessDesc desc{};
    desc.location.type = cudaMemLocationTypeDevice;
    desc.location.id = peer.value();
    desc.flags = cudaMemAccessFlagsProtReadWrite;
    MGM_CUDA_TRY(cudaMemPoolSetAccess(pool_.get(), &desc, 1));
  }

  /// @brief Returns cached memory above `bytes_to_keep` to the system (`cudaMemPoolTrimTo`).
  void release(std::size_t bytes_to_keep = 0) { MGM_CUDA_TRY(cudaMemPoolTrimTo(pool_.get(), bytes_to_keep)); }

  [[nodiscard]] cudaMemPool_t pool() const noexcept { return pool_.get(); }
  [[nodiscard]] device_id device() const noexcept { return device_; }
  /// @brief The device's free memory (`cudaMemGetInfo`).
  [[nodiscard]] std::size_t free_bytes() const { return memory_info(device_).free_bytes; }
  [[nodiscard]] stream_ops_type stream_ops() const noexcept { return {}; }
  /// @brief The device's memory (`cudaMemGetInfo`).
  [[nodiscard]] std::size_t total_bytes() const { return memory_info(device_).total_bytes; }

  friend bool operator==(const cuda_async_allocator& a, const cuda_async_allocator& b) noexcept {
    return a.pool_ == b.pool_;
  }
  friend void get_property(const cuda_async_allocator&, device_accessible) noexcept {}
  friend device_id get_property(const cuda_async_allocator& a, device_affinity) noexcept { return a.device_; }

 private:
  cuda_async_allocator(device_id device, std::shared_ptr<CUmemPoolHandle_st> pool)
      : device_{device}, pool_{std::move(pool)} {}

  device_id device_;
  std::shared_ptr<CUmemPoolHandle_st> pool_;
};
static_assert(platform_allocator<cuda_async_allocator>);

}  // namespace mgm
