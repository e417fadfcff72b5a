/// @file
/// @brief `sim::hazard` and `sim::stream_hazard`: what the simulator's judge found wrong.
#pragma once

#include <mgm/device.hpp>
#include <mgm/error.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace mgm::sim {

/// @brief The rule a hazard breaks.
enum class hazard_kind : std::uint8_t {
  reuse,         ///< a range was handed to a new user before an earlier use of it could have ended
  overlap,       ///< a range was handed out while a part of it was still allocated
  unordered_free,  ///< freed on one stream while the allocating stream's work may still use it (the caller's error)
  dead_stream,   ///< an event recorded or waited on, or memory allocated on, a destroyed stream
  graph_replay,  ///< a graph was launched while memory it captured is held by another user
  vmm_contract,  ///< a virtual-memory call broke the driver's documented rules
};

/// @brief "reuse", "overlap", "unordered_free", "dead_stream", "graph_replay", "vmm_contract".
[[nodiscard]] const char* name(hazard_kind k) noexcept;

/// @brief One violation: where, by whom, and when, in the device's virtual time.
struct hazard {
  hazard_kind kind{hazard_kind::reuse};
  device_id device{0};
  std::uintptr_t address{0};
  std::size_t bytes{0};
  std::string earlier_user;                     ///< e.g. "stream 3 of sim device 0", "graph 1", "host"
  std::string new_user;
  std::chrono::nanoseconds earlier_until{0};    ///< when the earlier use ends (graphs: when destroyed)
  std::chrono::nanoseconds new_from{0};         ///< when the new user's work may start
  std::string message;                          ///< one sentence with all of the above
};

/// @brief A hazard, thrown from calls that may throw when the machine enforces (the default).
/// A `logic_error`, never a `bad_alloc`: an out-of-memory retry must not swallow it.
class stream_hazard : public logic_error {
 public:
  explicit stream_hazard(hazard h) : logic_error{h.message}, hazard_{std::move(h)} {}
  [[nodiscard]] const sim::hazard& details() const noexcept { return hazard_; }

 private:
  sim::hazard hazard_;
};

}  // namespace mgm::sim
