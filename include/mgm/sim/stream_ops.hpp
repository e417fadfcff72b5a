/// @file
/// @brief `sim::stream_ops`: the stream seam on the simulated machine's virtual clocks.
#pragma once

#include <mgm/concepts.hpp>
#include <mgm/device.hpp>
#include <mgm/stream.hpp>

#include <cstdint>

namespace mgm::sim {

namespace detail {
class machine_state;
}

/// @brief A simulated event: the device it belongs to and its slot there.
struct event {
  std::uint32_t device{0};
  std::uint32_t slot{0};
  friend bool operator==(const event&, const event&) = default;
};

/// @brief Streams and events on virtual time, satisfying `mgm::stream_ops`.
///
/// Each device has a clock (`machine::now`) that moves only through `machine::advance`, a host
/// wait (`synchronize`, a `cudaFree`) or the test itself. A stream's work finishes at its *tail*:
/// `machine::enqueue(s, w)` sets `tail = max(tail, now) + w`. `record(e, s)` stamps `e` with
/// `s`'s tail; `query(e)` is `now(device) >= stamp`; `wait(s, e)` sets `s`'s tail to at least
/// `e`'s stamp, so work enqueued on `s` later runs after `e`; `synchronize(e)` moves the clock to
/// the stamp (the host waited). `query` and `synchronize` are "potentially unsafe" calls: while
/// a capture prohibits them (see `capture_mode`) they fail as CUDA's do
/// (`cudaErrorStreamCaptureUnsupported`) and invalidate the captures they interfere with.
/// Recording on or waiting on a destroyed stream is a hazard (`machine::hazards()`). Each call
/// is counted and priced (`event_record`, `event_query`, `event_wait`).
/// A handle to its machine: copies are equal. **Thread safety:** safe (per-device locks).
class stream_ops {
 public:
  using event = sim::event;
  static constexpr bool simulated = true;  ///< marks the simulator's seams (telemetry tells them apart)

  explicit stream_ops(detail::machine_state* machine) noexcept : machine_{machine} {}

  [[nodiscard]] event create_event(device_id d);
  void record(event e, stream_ref s);
  [[nodiscard]] bool query(event e);
  void wait(stream_ref s, event e);
  void synchronize(event e);
  /// @brief The host waits for all of `d`'s work (`cudaDeviceSynchronize`).
  void synchronize_device(device_id d);
  void destroy_event(event e) noexcept;
  [[nodiscard]] bool is_capturing(stream_ref s);
  /// @brief The graph `s` is capturing into now (its id, as `machine::end_capture` will return
  /// it), or 0. Without a capture anywhere on the machine it takes no lock.
  [[nodiscard]] std::uint64_t capture_id(stream_ref s);
  /// @brief The calling thread's capture mode becomes `mode`; returns the previous one (per
  /// thread, for every machine, as CUDA's is per thread for the process).
  capture_mode exchange_capture_mode(capture_mode mode) noexcept;

  friend bool operator==(const stream_ops&, const stream_ops&) = default;

 private:
  detail::machine_state* machine_;
};
static_assert(mgm::stream_ops<stream_ops>);

}  // namespace mgm::sim
