/// @file
/// @brief `sim::peer_ops`: the peer-access seam on the simulated machine.
#pragma once

#include <mgm/concepts.hpp>
#include <mgm/device.hpp>
#include <mgm/stream.hpp>

#include <cstddef>
#include <cstdint>

namespace mgm::sim {

namespace detail {
class machine_state;
}

/// @brief Peer access with CUDA's rules, satisfying `mgm::peer_ops`.
///
/// `can_access(a, o)`: the path is NVLink, or PCIe below the CPU interconnect (`PIX`, `PXB`,
/// `PHB`/`NODE`) on boards that allow PCIe peer access; never across sockets (`SYS`).
/// `enable(a, o)`: `cudaErrorPeerAccessUnsupported` when `!can_access`; "already enabled" is
/// success; each device holds at most `max_peers` connections (counting both directions of its
/// pairs), beyond which `cudaErrorTooManyPeers`, with nothing changed.
/// A handle to its machine. **Thread safety:** safe.
class peer_ops {
 public:
  static constexpr std::size_t max_peers = 8;

  explicit peer_ops(detail::machine_state* machine) noexcept : machine_{machine} {}

  [[nodiscard]] bool can_access(device_id accessor, device_id owner);
  void enable(device_id accessor, device_id owner);
  void disable(device_id accessor, device_id owner);
  /// @brief `cudaMemcpyPeerAsync` (between GPUs) or `cudaMemcpyAsync` (with host memory):
  /// a `memcpy` here, done when it returns. A copy between GPUs whose peer access is not enabled
  /// (either way round; never possible across `SYS` or on boards without PCIe peers) is counted
  /// as staged through host memory, as CUDA stages it.
  /// @throws mgm::cuda_error when either GPU is lost; mgm::logic_error when a pointer is not in
  /// the memory of the device it is said to be on.
  void copy(void* dst, device_id dst_device, const void* src, device_id src_device, std::size_t bytes, stream_ref stream);
  /// @brief The copies so far: over peer paths, staged through host memory, and their bytes.
  struct copy_counts {
    std::uint64_t peer{0};
    std::uint64_t staged{0};
    std::uint64_t bytes{0};
  };
  [[nodiscard]] copy_counts copies() const;
  /// @brief Whether `accessor` has access to `owner` now (not part of the seam; CUDA has no query).
  [[nodiscard]] bool is_enabled(device_id accessor, device_id owner);
  /// @brief The devices `d` is connected to, in either direction.
  [[nodiscard]] std::size_t connections(device_id d);

  friend bool operator==(const peer_ops&, const peer_ops&) = default;

 private:
  detail::machine_state* machine_;
};
static_assert(mgm::peer_ops<peer_ops>);

}  // namespace mgm::sim
