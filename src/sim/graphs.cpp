// Graph captures, launches and stream lifetimes on the simulated machine, and CUDA's rule for
// "potentially unsafe" calls during a capture (see `capture_mode`).
#include "machine_state.hpp"

#include <mgm/error.hpp>
#include <mgm/sim/machine.hpp>

#include <algorithm>
#include <string>

namespace mgm::sim {
namespace detail {

void machine_state::check_unsafe_call(const char* call) {
  if (active_captures.load(std::memory_order_acquire) == 0) [[likely]] return;
  const capture_mode mode = current_capture_mode();
  if (mode == capture_mode::relaxed) return;
  const auto me = std::this_thread::get_id();
  std::string which;
  {
    const std::lock_guard lock{capture_mutex};
    for (const std::uint64_t id : capturing) {
      graph_state& g = graphs[id - 1];
      const bool own = g.thread == me && g.mode != capture_mode::relaxed;
      const bool other = mode == capture_mode::global && g.thread != me && g.mode == capture_mode::global;
      if (own || other) {
        g.invalidated = true;  // as CUDA, the prohibited call breaks the capture it meets
        which += (which.empty() ? "" : ", ") + describe_stream(g.stream) + (own ? "" : " (another thread's)");
      }
    }
  }
  if (!which.empty()) {
    throw cuda_error{cudaErrorStreamCaptureUnsupported,
                     std::string{call} + " while capturing a graph on " + which +
                         " prohibits it (capture modes global/thread-local; relaxed allows it): "
                         "cudaErrorStreamCaptureUnsupported; the capture is invalidated"};
  }
}

}  // namespace detail

void machine::destroy_stream(stream_ref s) {
  const auto key = state_->decode_strict(s);
  auto& dev = state_->device(device_id{static_cast<int>(key.device)});
  const std::lock_guard lock{dev.mutex};
  MGM_EXPECTS(key.index < dev.streams.size() && dev.streams[key.index].alive, "destroy_stream: not a live stream");
  MGM_EXPECTS(key.index != 0, "the default stream cannot be destroyed");
  auto& st = dev.streams[key.index];
  MGM_EXPECTS(st.graph == 0, "destroy_stream: the stream is capturing a graph (end the capture first)");
  st.alive = false;  // its enqueued work still completes at its tail
  st.clock.clear();
  dev.dead_tail_ns = std::max(dev.dead_tail_ns, st.tail_ns);  // device syncs still wait for it
  dev.dead_streams.push_back(key.index);
}

void machine::begin_capture(stream_ref s, capture_mode mode) {
  const auto key = state_->decode_strict(s);
  auto& dev = state_->device(device_id{static_cast<int>(key.device)});
  const std::lock_guard capture_lock{state_->capture_mutex};
  const std::lock_guard lock{dev.mutex};
  MGM_EXPECTS(key.index < dev.streams.size(), "unknown simulated stream");
  MGM_EXPECTS(key.index != 0, "the default stream cannot be captured (as CUDA's legacy stream)");
  auto& st = dev.streams[key.index];
  MGM_EXPECTS(st.alive, "begin_capture on a destroyed stream");
  MGM_EXPECTS(st.graph == 0, "the stream is already capturing");
  detail::graph_state g;
  g.device = key.device;
  g.stream = detail::make_stream_id(key.device, key.index, st.generation);
  g.mode = mode;
  g.thread = std::this_thread::get_id();
  state_->graphs.push_back(std::move(g));
  const auto id = static_cast<std::uint64_t>(state_->graphs.size());
  state_->capturing.push_back(id);
  state_->active_captures.fetch_add(1, std::memory_order_release);
  st.graph = id;
  st.captured_ns = 0;
}

graph machine::end_capture(stream_ref s) {
  const auto key = state_->decode_strict(s);
  auto& dev = state_->device(device_id{static_cast<int>(key.device)});
  bool invalidated = false;
  std::uint64_t id = 0;
  detail::stream_id capture_stream = 0;
  {
    const std::lock_guard capture_lock{state_->capture_mutex};
    const std::lock_guard lock{dev.mutex};
    MGM_EXPECTS(key.index < dev.streams.size() && dev.streams[key.index].graph != 0, "the stream is not capturing");
    auto& st = dev.streams[key.index];
    id = st.graph;
    detail::graph_state& g = state_->graphs[id - 1];
    g.capturing = false;
    g.duration_ns = st.captured_ns;
    invalidated = g.invalidated;
    capture_stream = g.stream;
    if (invalidated) g.destroyed = true;  // no graph exists: what it captured is nobody's
    st.graph = 0;
    st.captured_ns = 0;
    std::erase(state_->capturing, id);
    state_->active_captures.fetch_sub(1, std::memory_order_release);
  }
  if (invalidated) {
    throw cuda_error{cudaErrorStreamCaptureInvalidated,
                     "end_capture: a prohibited call during the capture on " + state_->describe_stream(capture_stream) +
                         " invalidated it: cudaErrorStreamCaptureInvalidated"};
  }
  return graph{id};
}

void machine::launch(graph g, stream_ref s) {
  const auto key = state_->decode_strict(s);
  const device_id d{static_cast<int>(key.device)};
  auto& dev = state_->device(d);
  std::vector<std::pair<std::uintptr_t, std::size_t>> captured;
  detail::stream_id dead = 0;
  detail::stream_id launch_stream = 0;
  detail::vector_clock launch_clock;
  std::int64_t now_ns = 0;
  {
    const std::lock_guard capture_lock{state_->capture_mutex};
    MGM_EXPECTS(g.id >= 1 && g.id <= state_->graphs.size(), "launch: unknown graph");
    detail::graph_state& gs = state_->graphs[g.id - 1];
    MGM_EXPECTS(!gs.destroyed, "launch: the graph was destroyed");
    MGM_EXPECTS(!gs.capturing, "launch: the graph is still being captured");
    MGM_EXPECTS(gs.device == key.device, "launch: the stream is on another device than the graph");
    const std::lock_guard lock{dev.mutex};
    state_->check_alive(dev, d);
    MGM_EXPECTS(key.index < dev.streams.size(), "unknown simulated stream");
    auto& st = dev.streams[key.index];
    const auto id = detail::make_stream_id(key.device, key.index, st.generation);
    if (!st.alive) dead = id;
    launch_stream = id;
    if (st.graph != 0) {
      st.captured_ns += gs.duration_ns;  // a launch inside a capture becomes part of that graph
    } else {
      st.tail_ns = std::max(st.tail_ns, dev.now_ns) + gs.duration_ns;
    }
    gs.launched = true;
    detail::advance_to(gs.launches, id, st.tail_ns);  // every stream it ran on, until its last run there
    captured = gs.ranges;
    launch_clock = st.clock;
    now_ns = dev.now_ns;
  }
  if (dead != 0) state_->report_dead_stream(d, dead, "cudaGraphLaunch");
  if (!state_->judge_on()) return;
  // The replay writes every range its capture used: none may belong to someone else now.
  std::vector<hazard> found;
  {
    const std::lock_guard lock{state_->oracle_mutex};
    // Graphs that share memory with this one (a shared private pool): their launches must have
    // ended, or be ordered before this one.
    for (const auto& [a, b] : state_->graph_sharing) {
      if (a != g.id && b != g.id) continue;
      const std::uint64_t partner = a == g.id ? b : a;
      const std::lock_guard capture_lock{state_->capture_mutex};
      for (const auto& [s2, until] : state_->graphs[partner - 1].launches) {
        if (s2 == launch_stream || until <= now_ns || detail::known(launch_clock, s2) >= until) continue;
        hazard h;
        h.kind = hazard_kind::graph_replay;
        h.device = d;
        h.earlier_user = "graph " + std::to_string(partner);
        h.new_user = "graph " + std::to_string(g.id);
        h.earlier_until = std::chrono::nanoseconds{until};
        h.message = "graph " + std::to_string(g.id) + " launched on " + state_->describe_stream(launch_stream) +
                    " while graph " + std::to_string(partner) + ", which shares its memory (one capture pool), runs on " +
                    state_->describe_stream(s2) + " until t=" + std::to_string(until) +
                    " ns: graphs that share a pool must be launched one after another";
        state_->report_locked(h);
        found.push_back(std::move(h));
      }
    }
    for (const auto& [addr, bytes] : captured) {
      auto it = state_->ranges.upper_bound(addr);
      if (it != state_->ranges.begin()) --it;
      for (; it != state_->ranges.end() && it->first < addr + bytes; ++it) {
        const auto& r = it->second;
        if (!r.live || it->first + r.bytes <= addr || r.holder.graph == g.id) continue;
        hazard h;
        h.kind = hazard_kind::graph_replay;
        h.device = d;
        h.address = it->first;
        h.bytes = r.bytes;
        h.earlier_user = "graph " + std::to_string(g.id);
        h.new_user = r.holder.host ? "the host" : state_->describe_stream(r.holder.stream);
        h.message = "graph " + std::to_string(g.id) + " launched on " + state_->describe_stream(launch_stream) +
                    " overwrites [" + detail::hex(it->first) + ", +" + std::to_string(r.bytes) +
                    " B), which its capture used and which is now allocated to " + h.new_user;
        state_->report_locked(h);
        found.push_back(std::move(h));
      }
    }
  }
  if (!found.empty() && judging() == oracle_mode::enforce) throw stream_hazard{std::move(found.front())};
}

void machine::destroy(graph g) {
  const std::lock_guard capture_lock{state_->capture_mutex};
  MGM_EXPECTS(g.id >= 1 && g.id <= state_->graphs.size(), "destroy: unknown graph");
  detail::graph_state& gs = state_->graphs[g.id - 1];
  MGM_EXPECTS(!gs.destroyed, "destroy: the graph was already destroyed");
  MGM_EXPECTS(!gs.capturing, "destroy: the graph is still being captured");
  gs.destroyed = true;
  gs.ranges.clear();
  gs.ranges.shrink_to_fit();
}

}  // namespace mgm::sim
