// The simulated machine's seams of streams and events, and of peer access (virtual memory:
// seams_vmm.cpp).
#include "machine_state.hpp"

#include <mgm/bytes.hpp>
#include <mgm/detail/checks.hpp>
#include <mgm/error.hpp>
#include <mgm/log.hpp>
#include <mgm/sim/peer_ops.hpp>
#include <mgm/sim/stream_ops.hpp>

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <cstring>
#include <string>

namespace mgm::sim {

// ---- streams and events --------------------------------------------------------------------

namespace {
detail::event_state& live_event(detail::device_state& dev, const event& e) {
  MGM_EXPECTS(e.slot < dev.events.size() && dev.events[e.slot].live, "not a live simulated event");
  return dev.events[e.slot];
}
// The calling thread's capture mode (cudaThreadExchangeStreamCaptureMode), for every machine.
thread_local capture_mode thread_mode = capture_mode::global;
}  // namespace

namespace detail {
capture_mode current_capture_mode() noexcept { return thread_mode; }
}  // namespace detail

event stream_ops::create_event(device_id d) {
  auto& dev = machine_->device(d);
  const std::lock_guard lock{dev.mutex};
  machine_->check_alive(dev, d);
  std::uint32_t slot = 0;
  if (!dev.free_events.empty()) {
    slot = dev.free_events.back();
    dev.free_events.pop_back();
  } else {
    slot = static_cast<std::uint32_t>(dev.events.size());
    dev.events.emplace_back();
  }
  dev.events[slot] = detail::event_state{};
  dev.events[slot].live = true;
  return {static_cast<std::uint32_t>(d.index()), slot};
}

void stream_ops::record(event e, stream_ref s) {
  const device_id d{static_cast<int>(e.device)};
  auto& dev = machine_->device(d);
  const auto key = machine_->decode(s, d);
  MGM_EXPECTS(key.device == e.device, "cudaEventRecord: the stream and the event must be on the same device");
  detail::stream_id dead = 0;
  {
    const std::lock_guard lock{dev.mutex};
    machine_->check_alive(dev, d);
    MGM_EXPECTS(key.index < dev.streams.size(), "unknown simulated stream");
    auto& ev = live_event(dev, e);
    auto& st = dev.streams[key.index];
    machine_->charge(dev, driver_call::event_record, machine_->costs.event_record_us);
    const auto id = detail::make_stream_id(key.device, key.index, st.generation);
    if (!st.alive) [[unlikely]] dead = id;
    ev.stamp_ns = st.tail_ns;
    ev.recorded = true;
    ev.source = id;
    if (machine_->judge_on()) {
      ev.clock = st.clock;
      detail::advance_to(ev.clock, id, st.tail_ns);
    }
  }
  if (dead != 0) [[unlikely]] machine_->report_dead_stream(d, dead, "cudaEventRecord");
}

bool stream_ops::query(event e) {
  const device_id d{static_cast<int>(e.device)};
  auto& dev = machine_->device(d);
  machine_->check_unsafe_call("cudaEventQuery");
  const std::lock_guard lock{dev.mutex};
  machine_->check_alive(dev, d);
  const auto& ev = live_event(dev, e);
  machine_->charge(dev, driver_call::event_query, machine_->costs.event_query_us);
  return !ev.recorded || dev.now_ns >= ev.stamp_ns;
}

void stream_ops::wait(stream_ref s, event e) {
  const device_id event_device{static_cast<int>(e.device)};
  std::int64_t stamp = 0;
  detail::vector_clock clock;
  bool recorded = false;
  {
    auto& dev = machine_->device(event_device);
    const std::lock_guard lock{dev.mutex};
    machine_->check_alive(dev, event_device);
    const auto& ev = live_event(dev, e);
    recorded = ev.recorded;
    stamp = ev.stamp_ns;
    if (recorded && machine_->judge_on()) clock = ev.clock;
  }
  const auto key = machine_->decode(s, event_device);
  const device_id stream_device{static_cast<int>(key.device)};
  auto& dev = machine_->device(stream_device);
  detail::stream_id dead = 0;
  {
    const std::lock_guard lock{dev.mutex};
    MGM_EXPECTS(key.index < dev.streams.size(), "unknown simulated stream");
    machine_->charge(dev, driver_call::event_wait, machine_->costs.event_wait_us);
    auto& st = dev.streams[key.index];
    if (!st.alive) [[unlikely]] dead = detail::make_stream_id(key.device, key.index, st.generation);
    if (recorded) {  // waiting on an unrecorded event is a no-op, as in CUDA
      st.tail_ns = std::max(st.tail_ns, stamp);
      if (!clock.empty()) detail::merge(st.clock, clock);
    }
  }
  if (dead != 0) [[unlikely]] machine_->report_dead_stream(stream_device, dead, "cudaStreamWaitEvent");
}

void stream_ops::synchronize(event e) {
  const device_id d{static_cast<int>(e.device)};
  auto& dev = machine_->device(d);
  machine_->check_unsafe_call("cudaEventSynchronize");
  const std::lock_guard lock{dev.mutex};
  machine_->check_alive(dev, d);
  const auto& ev = live_event(dev, e);
  if (ev.recorded) dev.now_ns = std::max(dev.now_ns, ev.stamp_ns);
}

void stream_ops::synchronize_device(device_id d) {
  auto& dev = machine_->device(d);
  machine_->check_unsafe_call("cudaDeviceSynchronize");
  const std::lock_guard lock{dev.mutex};
  dev.wait_for_all_work();
}

void stream_ops::destroy_event(event e) noexcept {
  try {
    auto& dev = machine_->device(device_id{static_cast<int>(e.device)});
    const std::lock_guard lock{dev.mutex};
    auto& ev = live_event(dev, e);
    ev.live = false;
    ev.clock.clear();
    dev.free_events.push_back(e.slot);
  } catch (const std::exception& ex) {
    log(log_level::error, std::string{"sim::stream_ops::destroy_event: "} + ex.what());
  }
}

bool stream_ops::is_capturing(stream_ref s) { return capture_id(s) != 0; }

std::uint64_t stream_ops::capture_id(stream_ref s) {
  if (s.get() == nullptr) return 0;  // the legacy default stream is never captured
  // No capture anywhere (the common case): no lock. A capture begun by another thread races
  // with this call exactly as cudaStreamGetCaptureInfo does.
  if (machine_->active_captures.load(std::memory_order_acquire) == 0) return 0;
  const auto key = machine_->decode_strict(s);
  auto& dev = machine_->device(device_id{static_cast<int>(key.device)});
  const std::lock_guard lock{dev.mutex};
  MGM_EXPECTS(key.index < dev.streams.size(), "unknown simulated stream");
  return dev.streams[key.index].graph;
}

capture_mode stream_ops::exchange_capture_mode(capture_mode mode) noexcept {
  const capture_mode previous = thread_mode;
  thread_mode = mode;
  return previous;
}

// ---- peer access ---------------------------------------------------------------------------

namespace {
std::size_t connections_locked(const detail::machine_state& m, std::size_t d) {
  const std::size_t n = m.devices.size();
  std::size_t c = 0;
  for (std::size_t x = 0; x < n; ++x) {
    if (x != d && (m.peer_enabled[d * n + x] != 0 || m.peer_enabled[x * n + d] != 0)) ++c;
  }
  return c;
}
}  // namespace

bool peer_ops::can_access(device_id accessor, device_id owner) { return machine_->can_access(accessor, owner); }

void peer_ops::enable(device_id accessor, device_id owner) {
  if (!machine_->can_access(accessor, owner)) {
    throw cuda_error{cudaErrorPeerAccessUnsupported, "cudaDeviceEnablePeerAccess: " + machine_->describe(accessor) +
                                                         " cannot access " + machine_->describe(owner) + " (path " +
                                                         machine_->links.path(accessor, owner).label() +
                                                         "): cudaErrorPeerAccessUnsupported"};
  }
  if (accessor == owner) return;
  auto& dev = machine_->device(accessor);
  machine_->check_alive(dev, accessor);
  const std::size_t n = machine_->devices.size();
  const std::lock_guard lock{machine_->peer_mutex};
  auto& flag = machine_->peer_enabled[accessor.index() * n + owner.index()];
  auto& ever = machine_->peer_ever[accessor.index() * n + owner.index()];
  {
    const std::lock_guard dev_lock{dev.mutex};
    machine_->charge(dev, driver_call::peer_enable,
                     ever != 0 ? machine_->costs.peer_enable_again_us : machine_->costs.peer_enable_first_us);
  }
  if (flag != 0) {  // already enabled: success, as callers of CUDA treat it
    ever = 1;
    return;
  }
  const bool new_pair = machine_->peer_enabled[owner.index() * n + accessor.index()] == 0;
  if (new_pair) {
    for (const device_id d : {accessor, owner}) {
      if (connections_locked(*machine_, d.index()) >= max_peers) {
        throw cuda_error{cudaErrorTooManyPeers, "cudaDeviceEnablePeerAccess(" + std::to_string(owner.value()) +
                                                    ") from " + machine_->describe(accessor) + ": " +
                                                    machine_->describe(d) + " already has " +
                                                    std::to_string(max_peers) + " peers: cudaErrorTooManyPeers"};
      }
    }
  }
  flag = 1;
  ever = 1;
}

void peer_ops::disable(device_id accessor, device_id owner) {
  (void)machine_->device(accessor);
  (void)machine_->device(owner);
  const std::lock_guard lock{machine_->peer_mutex};
  machine_->peer_enabled[accessor.index() * machine_->devices.size() + owner.index()] = 0;
}

void peer_ops::copy(void* dst, device_id dst_device, const void* src, device_id src_device, std::size_t bytes,
                    stream_ref stream) {
  (void)stream;  // the copy is done when it returns; its time is not modelled
  if (bytes == 0) return;
  for (const auto& [p, d] : {std::pair<const void*, device_id>{dst, dst_device}, {src, src_device}}) {
    if (d.is_host()) continue;
    auto& dev = machine_->device(d);
    {
      const std::lock_guard lock{dev.mutex};
      machine_->check_alive(dev, d);
    }
    const auto first = reinterpret_cast<std::uintptr_t>(p);
    MGM_EXPECTS(machine_->owner_of(first) == d && machine_->owner_of(first + bytes - 1) == d,
                "peer_ops::copy: " + mgm::detail::describe_address(p) + " + " + std::to_string(bytes) +
                    " is not memory of " + machine_->describe(d));
  }
  std::memmove(dst, src, bytes);
  const bool gpus = !dst_device.is_host() && !src_device.is_host() && dst_device != src_device;
  const std::size_t n = machine_->devices.size();
  const std::lock_guard lock{machine_->peer_mutex};
  if (gpus) {
    // Direct only where peer access is enabled (either way round), as cudaMemcpyPeerAsync.
    const bool direct = machine_->peer_enabled[dst_device.index() * n + src_device.index()] != 0 ||
                        machine_->peer_enabled[src_device.index() * n + dst_device.index()] != 0;
    (direct ? machine_->peer_copies : machine_->staged_copies) += 1;
  }
  machine_->copied_bytes += bytes;
}

peer_ops::copy_counts peer_ops::copies() const {
  const std::lock_guard lock{machine_->peer_mutex};
  return {machine_->peer_copies, machine_->staged_copies, machine_->copied_bytes};
}

bool peer_ops::is_enabled(device_id accessor, device_id owner) {
  (void)machine_->device(accessor);
  (void)machine_->device(owner);
  if (accessor == owner) return true;
  const std::lock_guard lock{machine_->peer_mutex};
  return machine_->peer_enabled[accessor.index() * machine_->devices.size() + owner.index()] != 0;
}

std::size_t peer_ops::connections(device_id d) {
  (void)machine_->device(d);
  const std::lock_guard lock{machine_->peer_mutex};
  return connections_locked(*machine_, d.index());
}

}  // namespace mgm::sim
