/// @file
/// @brief NVML, loaded at run time: no NVML header or library is needed to build, and a machine
/// without a driver gets a reason instead of a crash.
///
/// The library is the one named by `MGM_NVML_LIBRARY`, else `libnvidia-ml.so.1`. Versioned
/// symbols are preferred (`nvmlInit_v2`, `nvmlDeviceGetMemoryInfo_v2`, `..._v3` process queries)
/// with fallbacks to the older ones. A missing library or symbol, and a metric the device does not
/// support, leave the metric empty and say why in `device_sample::missing`.
#pragma once

#include <mgm/telemetry/sample.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mgm::telemetry {

/// @brief A loaded and initialised NVML, shared by everyone who holds it: the first `acquire`
/// loads and initialises it, the last release calls `nvmlShutdown` and unloads it.
/// **Thread safety:** safe; NVML calls are thread-safe, and acquire/release take a global lock.
class nvml_library {
 public:
  /// @brief NVML, or `nullptr` with the reason in `why` (library not found, `nvmlInit` failed...).
  /// Never throws.
  [[nodiscard]] static std::shared_ptr<nvml_library> acquire(std::string* why = nullptr) noexcept;

  ~nvml_library();
  nvml_library(const nvml_library&) = delete;
  nvml_library& operator=(const nvml_library&) = delete;

  /// @brief The path it was loaded from.
  [[nodiscard]] const std::string& path() const noexcept;
  [[nodiscard]] unsigned int device_count() const noexcept;
  [[nodiscard]] std::optional<std::string> driver_version() const;
  /// @brief Which fallbacks were taken (`nvmlInit` for `nvmlInit_v2`, ...), for diagnostics.
  [[nodiscard]] const std::vector<std::string>& fallbacks() const noexcept;

  /// @brief Everything NVML says about device `index` (NVML's index, not a CUDA ordinal), with
  /// `processes` filled when `with_processes`. Never throws.
  [[nodiscard]] device_sample sample(unsigned int index, bool with_processes = true) const;
  /// @brief The MIG instances of device `index` when MIG is on (empty otherwise): their ids and
  /// profile, name, UUID and memory, with the GPU's index, bus id and minor number; the other
  /// metrics are left empty (the GPU's own sample has them). Never throws.
  [[nodiscard]] std::vector<device_sample> mig_instances(unsigned int index) const;

  struct impl;

 private:
  explicit nvml_library(std::unique_ptr<impl> p) noexcept;
  std::unique_ptr<impl> impl_;
};

/// @brief How a CUDA device is known to other APIs.
struct cuda_identity {
  int ordinal{0};
  std::string pci_bus_id;  ///< as `cudaDeviceGetPCIBusId` writes it (`0000:17:00.0`)
  std::string uuid;        ///< `GPU-...`, empty when unknown
};

/// @brief Sets `cuda_ordinal` on each sample whose PCI bus id or UUID matches a CUDA device, never
/// by position: CUDA's order (`CUDA_DEVICE_ORDER`, `CUDA_VISIBLE_DEVICES`) need not be NVML's.
/// PCI bus ids compare without case and with the domain widened (`0000:17:00.0` ==
/// `00000000:17:00.0`). Returns how many samples were joined.
std::size_t join_cuda_ordinals(std::vector<device_sample>& samples, const std::vector<cuda_identity>& cuda);

/// @brief The CUDA devices of this process, with their PCI bus ids and UUIDs; empty without a GPU.
[[nodiscard]] std::vector<cuda_identity> cuda_identities();

/// @brief A PCI bus id in NVML's form: 8-digit domain, upper case (`00000000:17:00.0`).
[[nodiscard]] std::string normalise_pci_bus_id(std::string_view id);

}  // namespace mgm::telemetry
