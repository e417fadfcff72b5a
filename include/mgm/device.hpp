/// @file
/// @brief Devices: the strong `device_id`, `device_count()`, and RAII `scoped_device`.
#pragma once

#include <mgm/error.hpp>

#include <cuda_runtime_api.h>

#include <compare>
#include <cstddef>
#include <functional>

namespace mgm {

/// @brief A CUDA device ordinal as a type of its own, so that an `int` meaning "current device",
/// "host" or "none" cannot slip through an API.
///
/// `device_id::host()` names host memory (CUDA's `cudaCpuDeviceId`), for allocators and locations
/// that are not on a GPU. There is no "current device" value: APIs that default to the current
/// device take no `device_id` at all.
class device_id {
 public:
  using value_type = int;

  constexpr explicit device_id(value_type ordinal) noexcept : value_{ordinal} {}
  /// @brief The host (CPU) location, `cudaCpuDeviceId`.
  [[nodiscard]] static constexpr device_id host() noexcept { return device_id{cudaCpuDeviceId}; }

  [[nodiscard]] constexpr value_type value() const noexcept { return value_; }
  [[nodiscard]] constexpr bool is_host() const noexcept { return value_ == cudaCpuDeviceId; }
  /// @brief The ordinal as an index (for per-device arrays). Precondition: `!is_host()`.
  [[nodiscard]] constexpr std::size_t index() const noexcept { return static_cast<std::size_t>(value_); }

  // == declared on its own: nvcc 13 does not define the one implied by a defaulted <=>.
  friend constexpr bool operator==(device_id, device_id) noexcept = default;
  friend constexpr auto operator<=>(device_id, device_id) noexcept = default;

 private:
  value_type value_;
};

/// @brief The number of CUDA devices this process can see; 0 when there is no GPU or no driver.
///
/// `cudaGetDeviceCount` fails with `cudaErrorInsufficientDriver` (35) or `cudaErrorNoDevice` (100)
/// on machines without a usable GPU and leaves its output unwritten: both give 0 here, and CUDA's
/// last-error state is cleared. Any other failure throws `mgm::cuda_error`.
/// **Thread safety:** safe.
[[nodiscard]] int device_count();

/// @brief The calling thread's current device. @throws mgm::cuda_error
[[nodiscard]] device_id current_device();

/// @brief A device's memory as `cudaMemGetInfo` reports it.
struct device_memory {
  std::size_t free_bytes{0};
  std::size_t total_bytes{0};
};

/// @brief `cudaMemGetInfo` on `device` (made current for the call). @throws mgm::cuda_error
[[nodiscard]] device_memory memory_info(device_id device);

/// @brief Makes `device` current for the lifetime of this object and restores the previous
/// device on destruction. Switches only when the device differs, so nesting costs one query.
///
/// The only way MultiGpuMem changes the current device.
/// @throws mgm::logic_error when `device` is the host; mgm::cuda_error when CUDA rejects it
/// (an ordinal out of range gives `cudaErrorInvalidDevice`).
/// **Thread safety:** per thread, as CUDA's current device is.
class scoped_device {
 public:
  explicit scoped_device(device_id device);
  ~scoped_device();
  scoped_device(const scoped_device&) = delete;
  scoped_device& operator=(const scoped_device&) = delete;
  scoped_device(scoped_device&&) = delete;
  scoped_device& operator=(scoped_device&&) = delete;

 private:
  int previous_{-1};
  bool switched_{false};
};

}  // namespace mgm

template <>
struct std::hash<mgm::device_id> {
  std::size_t operator()(mgm::device_id d) const noexcept { return std::hash<int>{}(d.value()); }
};
