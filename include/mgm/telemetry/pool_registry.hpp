/// @file
/// @brief Memory inside this process's pools, per device: what `mgm status`, the samplers and the
/// `/dev/shm` publisher show (allocated vs reserved). The pools themselves are listed by the core
/// layer (`<mgm/pool_observer.hpp>`); telemetry reads that list and installs the observer that
/// starts publishing with `MGM_PUBLISH=1`.
#pragma once

#include <mgm/device.hpp>
#include <mgm/pool_observer.hpp>

#include <cstdint>
#include <vector>

namespace mgm::telemetry {

using mgm::pool_figures;
using mgm::pool_registration;
using mgm::simulated_ops;

/// @brief The sum over a device's pools.
struct device_pool_figures {
  device_id device{0};
  bool simulated{false};  ///< a pool over the simulated machine, not a CUDA device
  pool_figures figures;
  std::uint32_t pools{0};
};

/// @brief The registered pools' figures, summed per (device, simulated), devices in order.
[[nodiscard]] std::vector<device_pool_figures> registered_pool_figures();

/// @brief Installs telemetry's pool observer: with `MGM_PUBLISH=1` (1, true, yes, on), the first
/// pool created starts publishing (`start_publishing()`). Idempotent. `start_publishing()` calls
/// it; so does the start-up of every program linked to the telemetry layer (a static of this
/// layer's, kept by the linker: see the `mgm_telemetry_startup` symbol in CMakeLists.txt).
void install_pool_observer() noexcept;

}  // namespace mgm::telemetry
