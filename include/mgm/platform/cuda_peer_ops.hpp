/// @file
/// @brief The peer-access seam (`mgm::peer_ops`) through the CUDA runtime.
#pragma once

#include <mgm/concepts.hpp>
#include <mgm/device.hpp>
#include <mgm/error.hpp>
#include <mgm/stream.hpp>

#include <cstddef>

#include <cuda_runtime_api.h>

namespace mgm {

/// @brief Peer access through `cudaDeviceCanAccessPeer` / `cudaDeviceEnablePeerAccess`. Stateless.
///
/// `enable(a, o)` makes `a` current (CUDA enables access *from the current device*), treats
/// `cudaErrorPeerAccessAlreadyEnabled` as success and clears that error. CUDA's own limit of 8
/// peer connections per device surfaces as `cuda_error` with `cudaErrorTooManyPeers`.
/// Memory mapped through the virtual-memory seam ignores this: it needs `set_access` instead.
/// **Thread safety:** as the CUDA runtime.
class cuda_peer_ops {
 public:
  [[nodiscard]] bool can_access(device_id accessor, device_id owner) const {
    if (accessor == owner) return true;
    int can = 0;
    MGM_CUDA_TRY(cudaDeviceCanAccessPeer(&can, accessor.value(), owner.value()));
    return can != 0;
  }
  void enable(device_id accessor, device_id owner) const {
    if (accessor == owner) return;
    const scoped_device on{accessor};
    const cudaError_t status = cudaDeviceEnablePeerAccess(owner.value(), 0);
    if (status == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();
      return;
    }
    MGM_CUDA_TRY(status);
  }
  void disable(device_id accessor, device_id owner) const {
    if (accessor == owner) return;
    const scoped_device on{accessor};
    const cudaError_t status = cudaDeviceDisablePeerAccess(owner.value());
    if (status == cudaErrorPeerAccessNotEnabled) {
      (void)cudaGetLastError();
      return;
    }
    MGM_CUDA_TRY(status);
  }

  /// @brief Copies between GPUs with `cudaMemcpyPeerAsync` on `stream` (staged through host
  /// memory by CUDA where there is no peer path), with host memory by `cudaMemcpyAsync`
  /// (`cudaMemcpyDefault`), and waits for `stream`: the source may be freed when it returns.
  void copy(void* dst, device_id dst_device, const void* src, device_id src_device, std::size_t bytes,
            stream_ref stream) const {
    if (bytes == 0) return;
    if (!dst_device.is_host() && !src_device.is_host()) {
      MGM_CUDA_TRY(cudaMemcpyPeerAsync(dst, dst_device.value(), src, src_device.value(), bytes, stream.get()));
    } else {
      MGM_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream.get()));
    }
    MGM_CUDA_TRY(cudaStreamSynchronize(stream.get()));
  }

  friend constexpr bool operator==(cuda_peer_ops, cuda_peer_ops) noexcept { return true; }
};
static_assert(peer_ops<cuda_peer_ops>);

}  // namespace mgm
