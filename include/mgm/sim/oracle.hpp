/// @file
/// @brief `sim::oracle`: the machine's stream-safety judge, as `sim::judged` reports to it.
#pragma once

#include <mgm/device.hpp>
#include <mgm/stream.hpp>

#include <cstddef>
#include <optional>

namespace mgm::sim {

namespace detail {
class machine_state;
}

/// @brief What the judge does with what it finds (`machine_options::oracle`).
enum class oracle_mode : unsigned char {
  off,      ///< nothing is tracked; `judged` costs one load per call
  record,   ///< hazards are listed in `machine::hazards()`; calls behave as without the judge
  enforce,  ///< listed, and thrown as `stream_hazard` from calls that may throw (the default)
};

/// @brief The judge's inputs: which ranges were handed out, to whom, and when they were freed.
///
/// For every range handed out the machine keeps who may still touch it and until when, in the
/// device's virtual time:
/// - the stream it was freed on (a synchronous free: the default stream), until the work queued
///   there before the free ends. A free on another stream than the allocating one must come
///   after that stream's work (a wait on an event, or the work is complete): otherwise the caller
///   broke the stream-ordered contract, an `unordered_free` hazard, and both uses are kept;
/// - the streams named by `used_on` (`record_stream`), until their work queued before the free ends;
/// - the graph whose capture allocated or freed it, until that graph is destroyed and its last
///   launch has ended.
///
/// When a range is handed to a new user, every earlier use must have ended before the new
/// user's work can start:
/// - the same stream (and the same stream, not a new one with a destroyed one's handle): program
///   order is enough;
/// - another stream: it waited (directly or through other streams) on an event recorded on the
///   earlier stream after the free, or the earlier work is complete (`now >= until`);
/// - the host (a synchronous `allocate` of host memory): the earlier work is complete.
/// A synchronous `allocate` or `deallocate` of device memory is a use in the device's default
/// stream's order (`sim::judged` reports it so).
///
/// State is kept only for ranges that are live or not yet safe: a freed range whose uses have
/// all ended is dropped at once, and every call examines two more of the kept ones.
/// A handle to its machine. **Thread safety:** safe (one lock for the judge's tables).
class oracle {
 public:
  explicit oracle(detail::machine_state* machine) noexcept : machine_{machine} {}

  [[nodiscard]] bool enabled() const noexcept;

  /// @brief `[p, p + bytes)` was handed out: to the host when `stream` is empty, else to work
  /// on that stream (a null stream: `device`'s default stream). `device` is the allocator's
  /// device where it has one; otherwise the device whose memory holds `p`.
  /// @throws stream_hazard when a rule is broken and the machine enforces; nothing is recorded
  /// for the range then, so the caller can return it to where it came from.
  void handed_out(const void* p, std::size_t bytes, std::optional<stream_ref> stream,
                  std::optional<device_id> device) const;
  /// @brief `p` is freed in `stream`'s order (empty: a synchronous free, on the default stream).
  void freed(const void* p, std::optional<stream_ref> stream, std::optional<device_id> device) const noexcept;
  /// @brief `p` is also used by work on `stream` (`record_stream`).
  void used_on(const void* p, stream_ref stream) const;

  /// @brief The ranges the judge keeps now: live ones and freed ones not yet safe for everyone.
  [[nodiscard]] std::size_t tracked_ranges() const;

  friend bool operator==(const oracle&, const oracle&) = default;

 private:
  detail::machine_state* machine_;
};

}  // namespace mgm::sim
