/// @file
/// @brief Every live caching pool of the process, by device: what `mgm status`, the samplers and
/// the `/dev/shm` publisher read to show memory *inside* the pools (allocated vs reserved).
///
/// Pools register themselves on construction and leave on destruction; reading the figures calls
/// each pool's `statistics()` (its lock), never from inside a pool call.
#pragma once

#include <mgm/device.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace mgm::telemetry {

/// @brief One pool's memory.
struct pool_figures {
  std::optional<std::uint64_t> allocated;  ///< empty for a pool built without statistics
  std::uint64_t reserved{0};
};

/// @brief The sum over a device's pools.
struct device_pool_figures {
  device_id device{0};
  bool simulated{false};  ///< a pool over the simulated machine, not a CUDA device
  pool_figures figures;
  std::uint32_t pools{0};
};

/// @brief A pool's membership in the registry; leaving happens on destruction (or `reset`).
class pool_registration {
 public:
  pool_registration() = default;
  pool_registration(device_id device, bool simulated, std::function<pool_figures()> read);
  ~pool_registration() { reset(); }
  pool_registration(const pool_registration&) = delete;
  pool_registration& operator=(const pool_registration&) = delete;
  pool_registration(pool_registration&& o) noexcept : id_{o.id_} { o.id_ = 0; }
  pool_registration& operator=(pool_registration&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      o.id_ = 0;
    }
    return *this;
  }
  void reset() noexcept;

 private:
  std::uint64_t id_{0};
};

/// @brief The registered pools' figures, summed per (device, simulated), devices in order.
[[nodiscard]] std::vector<device_pool_figures> registered_pool_figures();

/// @brief Whether `Ops` (a pool's stream operations) belong to the simulated machine.
template <class Ops>
inline constexpr bool simulated_ops = requires { Ops::simulated; };

}  // namespace mgm::telemetry
