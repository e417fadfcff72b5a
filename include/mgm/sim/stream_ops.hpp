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
/// the stamp (the host waited). While a stream of a device is capturing a graph, `query` on that
/// device's events fails as CUDA does (`cudaErrorStreamCaptureUnsupported`).
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
  void destroy_event(event e) noexcept;
  [[nodiscard]] bool is_capturing(stream_ref s);

  friend bool operator==(const stream_ops&, const stream_ops&) = default;

 private:
  detail::machine_state* machine_;
};
static_assert(mgm::stream_ops<stream_ops>);

}  // namespace mgm::sim
