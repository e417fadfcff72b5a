/// @file
/// @brief `sim::device_spec`: one simulated GPU, and the parser of device lists.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mgm::sim {

/// @brief What the simulator needs to know about one GPU.
struct device_spec {
  std::string name{"Simulated GPU"};
  std::size_t memory_bytes{0};       ///< capacity, as nvidia-smi's memory.total reports it
  int compute_capability{90};        ///< major * 10 + minor
  std::optional<int> numa_node;      ///< unknown when absent
  bool pcie_p2p{true};               ///< peer access over PCIe allowed (false on GeForce 40)

  friend bool operator==(const device_spec&, const device_spec&) = default;
};

/// @brief The most devices one simulated machine holds.
inline constexpr std::size_t max_devices = 64;

/// @brief Parses a device list: comma-separated items `[COUNTx]SIZE[:NAME]`, for example
/// `"2x24564MiB:RTX 4090,2x16376MiB:RTX 4080"` or `"4x80GiB"`. Sizes as `parse_bytes` takes them.
/// @throws mgm::parse_error naming the column of the first bad character, for an empty list, a
/// zero count or size, or more than `max_devices` devices.
[[nodiscard]] std::vector<device_spec> parse_device_list(std::string_view text);

}  // namespace mgm::sim
