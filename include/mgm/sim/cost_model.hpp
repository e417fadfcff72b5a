/// @file
/// @brief `sim::cost_model`: what each platform call costs on the simulated machine (modelled).
#pragma once

#include <chrono>
#include <cstdint>

namespace mgm::sim {

/// @brief Fixed, sourced costs of the calls a pool makes to its upstream. Every figure derived
/// from it is *modelled*, never measured, and is reported as such.
///
/// - `malloc`, `free`: 66 µs per `cudaMalloc` and 42 µs per `cudaFree` for small blocks, measured
///   with CUB's caching-allocator benchmark (the figures ../shared/DESIGN.md fixes). A `cudaFree`
///   also synchronises the device: the simulator advances the device's clock to its last work.
/// - `vmm_create`, `vmm_map`: no published per-call figure was found (PyTorch's note on
///   expandable segments only says an initial mapping costs "milliseconds" and that one call per
///   2 MiB granule costs about ten times one call per 20 MiB); zero until a measured value is set.
struct cost_model {
  std::chrono::nanoseconds malloc{66'000};
  std::chrono::nanoseconds free{42'000};
  std::chrono::nanoseconds vmm_create{0};
  std::chrono::nanoseconds vmm_map{0};
};

/// @brief The modelled cost a device has accumulated.
struct modelled_costs {
  std::uint64_t mallocs{0};
  std::uint64_t frees{0};
  std::uint64_t vmm_creates{0};
  std::uint64_t vmm_maps{0};
  std::chrono::nanoseconds upstream_time{0};  ///< Σ count × cost, over the four kinds

  [[nodiscard]] double upstream_seconds() const noexcept {
    return std::chrono::duration<double>(upstream_time).count();
  }
};

}  // namespace mgm::sim
