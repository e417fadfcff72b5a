/// @file
/// @brief How pools reach the layers above them without including them (DESIGN.md §2): every live
/// pool is listed here, in the core layer, with a way to read its figures; an observer (telemetry's,
/// installed with `telemetry::install_pool_observer()`) hears of each new pool.
///
/// ## Contract
/// - A pool joins the list on construction (`pool_registration`) and leaves on destruction (or
///   `reset`), before the rest of it is torn down.
/// - `registered_pools()` reads each pool's figures (its statistics lock), never from inside a pool
///   call; a pool whose reader throws is left out of that look.
/// - The observer is told of pools created after it is installed; those before it are in the list.
///   It is called outside the list's lock and must not throw.
/// - `fork()` leaves the child a usable list: the list's lock is held across it. A layer that reads
///   the list under a lock of its own and holds that lock across a fork registers its handler after
///   the list's (registered at the list's first use: a `registered_pools()` call), so its lock is
///   taken first. A pool that another thread was using at the fork may be locked in the child, as
///   anything a lost thread held: a child adds and removes its own pools, and reads no figures of
///   its parent's (a forked child's publisher is not restarted).
///
/// **Thread safety:** every function may be called from any thread.
#pragma once

#include <mgm/device.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace mgm {

/// @brief One pool's memory.
struct pool_figures {
  std::optional<std::uint64_t> allocated;  ///< empty for a pool built without statistics
  std::uint64_t reserved{0};
};

/// @brief A live pool, as the list sees it.
struct registered_pool {
  device_id device{0};
  bool simulated{false};  ///< a pool over the simulated machine, not a CUDA device
  pool_figures figures;
};

/// @brief Told of every pool created once it is installed.
class pool_observer {
 public:
  virtual ~pool_observer() = default;
  virtual void pool_created(device_id device, bool simulated) noexcept = 0;
};

/// @brief Installs `observer` for the process (nullptr: none); it must outlive its installation.
void set_pool_observer(pool_observer* observer) noexcept;

/// @brief A pool's place in the list; it leaves on destruction (or `reset`).
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

/// @brief The live pools and their figures now, in the order they were created.
[[nodiscard]] std::vector<registered_pool> registered_pools();

/// @brief Whether `Ops` (a pool's stream operations) belong to the simulated machine.
template <class Ops>
inline constexpr bool simulated_ops = requires { Ops::simulated; };

}  // namespace mgm
