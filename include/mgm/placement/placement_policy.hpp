/// @file
/// @brief `rank_placements`: where a buffer should live, best first (pure: no CUDA call).
///
/// For a buffer of `bytes` read by one GPU, the candidates, each only where its free memory stays
/// above its reserve:
/// 1. the reader itself;
/// 2. its NVLink peers, by path bandwidth, then by headroom;
/// 3. PCIe peers within `p2p_level` (NCCL's rule; PXB by default, so never across the CPU or the
///    sockets) whose bandwidth beats the reader's pinned host memory (measured figures where the
///    topology has them, else nominal);
/// 4. pinned host memory on the reader's NUMA node (as fast as the reader's PCIe link);
/// 5. host memory on the other NUMA nodes (slower by the CPUs' interconnect).
/// Devices that cannot hold the buffer are not listed; the host always is.
#pragma once

#include <mgm/device.hpp>
#include <mgm/topology/topology.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace mgm {

/// @brief A place for memory: a GPU, or host memory on a NUMA node (unknown: any node).
struct memory_location {
  device_id device{device_id::host()};
  std::optional<int> numa_node;

  [[nodiscard]] bool is_host() const noexcept { return device.is_host(); }
  [[nodiscard]] std::string to_string() const;
  friend bool operator==(const memory_location&, const memory_location&) = default;
};

struct placement_candidate {
  memory_location where;
  double gbps{0.0};             ///< what the reader gets, per direction
  std::string path;             ///< nvidia-smi's label from the reader ("X", "NV2", "PIX", "host")
  std::size_t headroom_bytes{0};  ///< free above the reserve, after the buffer (0 for the host)
  std::string why;
};

struct placement_request {
  device_id reader{0};
  std::size_t bytes{0};
  std::vector<std::size_t> free_bytes;     ///< per GPU ordinal
  std::vector<std::size_t> reserve_bytes;  ///< per GPU ordinal (empty: none)
};

struct placement_options {
  path_type p2p_level{path_type::pxb};  ///< the worst PCIe path allowed for direct peer access
  bool host{true};                      ///< list host memory
};

/// @brief The candidates, best first. @throws mgm::logic_error when the request does not match the
/// topology (a reader out of range, free bytes for another number of GPUs).
[[nodiscard]] std::vector<placement_candidate> rank_placements(const topology& links, const placement_request& r,
                                                               const placement_options& options = {});

}  // namespace mgm
