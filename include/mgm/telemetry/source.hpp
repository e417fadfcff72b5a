/// @file
/// @brief Where samples come from: NVML (joined to CUDA ordinals), the CUDA runtime alone, the
/// simulated machine; each with MultiGpuMem pools' figures added, in-process and published.
#pragma once

#include <mgm/telemetry/sample.hpp>

#include <memory>
#include <string>
#include <vector>

namespace mgm::sim {
class machine;
}

namespace mgm::telemetry {

/// @brief Something that can be asked for every GPU's state now.
class source {
 public:
  virtual ~source() = default;
  /// @brief `nvml`, `cuda`, `sim:<machine name>`.
  [[nodiscard]] virtual std::string name() const = 0;
  /// @brief One sample per GPU, in the source's order. May throw; a `sampler` catches.
  [[nodiscard]] virtual std::vector<device_sample> sample() = 0;
};

/// @brief NVML's view of every GPU (all of them, not only those CUDA sees), joined to CUDA
/// ordinals by PCI bus id or UUID, with pool figures. `nullptr` without NVML, `why` says why.
[[nodiscard]] std::unique_ptr<source> make_nvml_source(std::string* why = nullptr);

/// @brief The CUDA runtime's view: name, PCI bus id, UUID and `cudaMemGetInfo` only (used =
/// total - free), with pool figures. `nullptr` when no GPU is visible.
[[nodiscard]] std::unique_ptr<source> make_cuda_source(std::string* why = nullptr);

/// @brief A simulated machine's devices: their memory as the simulator accounts it, NVLinks from
/// its topology, pool figures of simulated pools. The machine must outlive the source.
[[nodiscard]] std::unique_ptr<source> make_sim_source(const sim::machine& machine);

/// @brief The best live source: NVML, else CUDA; `nullptr` with the reasons when neither works.
[[nodiscard]] std::unique_ptr<source> make_system_source(std::string* why = nullptr);

}  // namespace mgm::telemetry
