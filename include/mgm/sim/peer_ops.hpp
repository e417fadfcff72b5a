/// @file
/// @brief `sim::peer_ops`: the peer-access seam on the simulated machine.
#pragma once

#include <mgm/concepts.hpp>
#include <mgm/device.hpp>

#include <cstddef>

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
