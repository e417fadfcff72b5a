/// @file
/// @brief `peer_access`: enables peer access lazily, within CUDA's limit, NVLink peers first.
#pragma once

#include <mgm/concepts.hpp>
#include <mgm/device.hpp>
#include <mgm/error.hpp>
#include <mgm/topology/topology.hpp>

#include <cstddef>
#include <mutex>
#include <vector>

namespace mgm {

/// @brief Decides, per ordered pair, whether `accessor` reads `owner`'s memory directly (peer
/// access, enabled on first use with the accessing device current, "already enabled" counting as
/// success) or through staged copies.
///
/// A device holds at most `max_connections` (CUDA's 8) peer connections. NVLink peers come first:
/// a PCIe peer is enabled only while enough connections stay free for the NVLink peers not yet
/// enabled; a pair beyond the limit, or one the platform cannot connect, is *staged*.
/// @tparam Ops an `mgm::peer_ops` (`cuda_peer_ops`, `sim::peer_ops`).
/// **Thread safety:** safe (one mutex).
template <peer_ops Ops>
class peer_access {
 public:
  static constexpr std::size_t max_connections = 8;

  peer_access(Ops ops, const topology& links)
      : ops_{std::move(ops)}, links_{links}, n_{links.gpu_count()}, state_(n_ * n_, unknown), connections_(n_, 0) {}

  /// @brief True when `accessor` may now read `owner`'s memory directly; false when staged.
  bool ensure(device_id accessor, device_id owner) {
    check(accessor);
    check(owner);
    if (accessor == owner) return true;
    const std::lock_guard lock{mutex_};
    auto& s = state_[accessor.index() * n_ + owner.index()];
    if (s != unknown) return s == enabled;
    const bool reverse = state_[owner.index() * n_ + accessor.index()] == enabled;  // the pair exists already
    if (!ops_.can_access(accessor, owner) || (!reverse && !room_for(accessor, owner))) {
      s = staged;
      return false;
    }
    try {
      ops_.enable(accessor, owner);
    } catch (const cuda_error& e) {
      if (e.code() != cudaErrorTooManyPeers && e.code() != cudaErrorPeerAccessUnsupported) throw;
      s = staged;
      return false;
    }
    s = enabled;
    ++enables_;
    if (!reverse) {
      ++connections_[accessor.index()];
      ++connections_[owner.index()];
    }
    return true;
  }

  /// @brief The platform's copy (`Ops::copy`): between GPUs over their peer path where there is
  /// one (staged through host memory where not), or with host memory; done when it returns.
  void copy(void* dst, device_id dst_device, const void* src, device_id src_device, std::size_t bytes, stream_ref stream) {
    Ops ops = ops_;  // a handle: the copy needs no lock
    ops.copy(dst, dst_device, src, src_device, bytes, stream);
  }

  [[nodiscard]] bool is_enabled(device_id accessor, device_id owner) const {
    const std::lock_guard lock{mutex_};
    return accessor == owner || state_[accessor.index() * n_ + owner.index()] == enabled;
  }
  [[nodiscard]] bool is_staged(device_id accessor, device_id owner) const {
    const std::lock_guard lock{mutex_};
    return state_[accessor.index() * n_ + owner.index()] == staged;
  }
  /// @brief How many times a pair was enabled (each pair at most once).
  [[nodiscard]] std::size_t enables() const {
    const std::lock_guard lock{mutex_};
    return enables_;
  }
  [[nodiscard]] std::size_t connections(device_id d) const {
    const std::lock_guard lock{mutex_};
    return connections_[d.index()];
  }

 private:
  enum pair_state : unsigned char { unknown, enabled, staged };

  void check(device_id d) const {
    MGM_EXPECTS(!d.is_host() && d.value() >= 0 && d.index() < n_,
                "peer_access: device " + std::to_string(d.value()) + " is not one of the " + std::to_string(n_) + " GPUs");
  }
  // Both devices keep a free connection for each NVLink peer they have not connected yet.
  [[nodiscard]] bool room_for(device_id a, device_id b) const {
    const bool nvlink = links_.path(a, b).is_nvlink();
    for (const device_id d : {a, b}) {
      if (connections_[d.index()] >= max_connections) return false;
      if (nvlink) continue;
      std::size_t nvlink_waiting = 0;
      for (std::size_t x = 0; x < n_; ++x) {
        const device_id peer{static_cast<int>(x)};
        if (x == d.index() || !links_.path(d, peer).is_nvlink()) continue;
        if (state_[d.index() * n_ + x] != enabled && state_[x * n_ + d.index()] != enabled) ++nvlink_waiting;
      }
      if (connections_[d.index()] + std::min(nvlink_waiting, max_connections) >= max_connections) return false;
    }
    return true;
  }

  Ops ops_;
  const topology& links_;
  std::size_t n_;
  mutable std::mutex mutex_;
  std::vector<pair_state> state_;
  std::vector<std::size_t> connections_;
  std::size_t enables_{0};
};

}  // namespace mgm
