#include "replay_target.hpp"

#include <mgm/bytes.hpp>
#include <mgm/error.hpp>
#include <mgm/trace/replay.hpp>

#include <array>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace mgm {
namespace {

constexpr std::size_t step = std::size_t{2} << 20;  // the fit's resolution
constexpr std::array<std::string_view, 4> names{"pool", "direct", "cub", "pmr"};

std::size_t round_step(std::size_t bytes) { return (bytes + step - 1) / step * step; }

struct run_counts {
  std::uint64_t calls_after_first{0};
  std::chrono::nanoseconds elapsed{0};
};

// Replays `iterations` times; the upstream calls of the first iteration are set apart.
run_counts run(const compiled_trace& t, detail::replay_target& target, const std::vector<stream_ref>& streams,
               int iterations, sim::machine* m, device_id d) {
  const auto calls = [&] {
    const auto c = m->modelled(d);
    return c.mallocs + c.frees + c.vmm_creates;
  };
  std::uint64_t after_first = 0;
  run_counts r;
  r.elapsed = detail::replay_ops(t, target, streams, iterations, [&] {
    if (m != nullptr) after_first = calls();
  });
  if (m != nullptr) r.calls_after_first = calls() - after_first;
  return r;
}

struct sim_run {
  sim::machine machine;
  std::vector<stream_ref> streams;
  sim_run(const compiled_trace& t, std::size_t capacity, const sim::cost_model& costs)
      : machine{std::vector<sim::device_spec>{{"Simulated GPU", capacity, 90, std::nullopt, true}}} {
    machine.costs() = costs;
    for (const auto s : t.streams) streams.push_back(s == 0 ? machine.default_stream(device_id{0}) : machine.create_stream(device_id{0}));
  }
};

bool fits(const compiled_trace& t, std::string_view allocator, const replay_options& o, std::size_t capacity) {
  sim_run r{t, capacity, o.costs};
  try {
    auto target = detail::make_replay_target(allocator, r.machine, device_id{0}, o.pool);
    (void)run(t, *target, r.streams, o.iterations, nullptr, device_id{0});
    return true;
  } catch (const std::bad_alloc&) {
    return false;
  }
}

replay_fit search_fit(const compiled_trace& t, std::string_view allocator, const replay_options& o,
                      std::size_t peak_reserved) {
  replay_fit f;
  std::size_t lo = round_step(std::max<std::size_t>(t.peak_live_bytes, 1)) / step;  // cannot be less
  std::size_t hi = std::max(lo, round_step(peak_reserved) / step + 1);
  while (!fits(t, allocator, o, hi * step)) {
    MGM_EXPECTS(hi * step < o.capacity_bytes * 4, "the trace fits no capacity up to 4x the device");
    hi *= 2;
  }
  if (fits(t, allocator, o, lo * step)) {
    hi = lo;
  } else {
    while (hi - lo > 1) {  // invariant: lo fails, hi runs
      const std::size_t mid = lo + (hi - lo) / 2;
      (fits(t, allocator, o, mid * step) ? hi : lo) = mid;
    }
  }
  f.capacity_bytes = hi * step;
  f.over_peak_live = t.peak_live_bytes == 0 ? 0.0 : static_cast<double>(f.capacity_bytes) / static_cast<double>(t.peak_live_bytes);
  f.confirmed = fits(t, allocator, o, f.capacity_bytes);
  for (const std::size_t extra : {1, 2, 3, 4, 8, 16}) {
    const std::size_t c = f.capacity_bytes + extra * step;
    if (!fits(t, allocator, o, c)) f.non_monotone.push_back(c);
  }
  return f;
}

std::string json_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}
std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

std::span<const std::string_view> replay_allocators() noexcept { return names; }

replay_result replay_on_sim(const compiled_trace& t, std::string_view allocator, const replay_options& o) {
  MGM_EXPECTS(o.iterations >= 1, "a replay needs at least one iteration");
  bool known = false;
  for (const auto n : names) known = known || n == allocator;
  MGM_EXPECTS(known, "unknown allocator '" + std::string{allocator} + "'; the allocators are pool, direct, cub, pmr");

  replay_result r;
  r.trace = t.name;
  r.allocator = std::string{allocator};
  r.iterations = o.iterations;
  r.events = t.ops.size();
  r.peak_live_bytes = t.peak_live_bytes;

  // The do-nothing replay: what the loop itself costs (a clock read costs more than the budget
  // of one event, so time is taken once per batch).
  std::chrono::nanoseconds baseline{0};
  {
    sim_run n{t, o.capacity_bytes, o.costs};
    auto null = detail::make_replay_target("null", n.machine, device_id{0}, o.pool);
    baseline = run(t, *null, n.streams, o.iterations, nullptr, device_id{0}).elapsed;
  }
  sim_run s{t, o.capacity_bytes, o.costs};
  {
    auto target = detail::make_replay_target(allocator, s.machine, device_id{0}, o.pool);
    const auto counts = run(t, *target, s.streams, o.iterations, &s.machine, device_id{0});
    const auto c = s.machine.modelled(device_id{0});
    r.upstream_allocations = c.mallocs + c.vmm_creates;
    r.upstream_frees = c.frees;
    r.upstream_calls_after_first_iteration = counts.calls_after_first;
    r.modelled_upstream_seconds = c.upstream_seconds();
    const double events = static_cast<double>(r.events) * o.iterations;
    const auto net = std::max<std::int64_t>(0, (counts.elapsed - baseline).count());
    r.host_ns_per_event = static_cast<double>(net) / events;
    r.events_per_second = net == 0 ? 0.0 : events * 1e9 / static_cast<double>(net);
    r.peak_reserved_bytes = s.machine.memory(device_id{0}).peak_used_bytes;
  }
  r.reserved_over_live =
      r.peak_live_bytes == 0 ? 0.0 : static_cast<double>(r.peak_reserved_bytes) / static_cast<double>(r.peak_live_bytes);
  if (o.fit) r.fit = search_fit(t, allocator, o, r.peak_reserved_bytes);
  return r;
}

std::string replay_result::to_json() const {
  std::string out = "{";
  const auto field = [&](const char* k, const std::string& v) { out += (out.size() > 1 ? "," : "") + json_string(k) + ":" + v; };
  field("trace", json_string(trace));
  field("allocator", json_string(allocator));
  field("device", std::to_string(device));
  field("iterations", std::to_string(iterations));
  field("events", std::to_string(events));
  field("host_ns_per_event", json_number(host_ns_per_event));
  field("events_per_second", json_number(events_per_second));
  field("upstream_allocations", std::to_string(upstream_allocations));
  field("upstream_frees", std::to_string(upstream_frees));
  field("upstream_calls_after_first_iteration", std::to_string(upstream_calls_after_first_iteration));
  field("peak_live_bytes", std::to_string(peak_live_bytes));
  field("peak_reserved_bytes", std::to_string(peak_reserved_bytes));
  field("reserved_over_live", json_number(reserved_over_live));
  if (fit) {
    std::string nm = "[";
    for (std::size_t i = 0; i < fit->non_monotone.size(); ++i) nm += (i ? "," : "") + std::to_string(fit->non_monotone[i]);
    field("fit", "{\"capacity_bytes\":" + std::to_string(fit->capacity_bytes) + ",\"over_peak_live\":" +
                     json_number(fit->over_peak_live) + ",\"confirmed\":" + (fit->confirmed ? "true" : "false") +
                     ",\"non_monotone\":" + nm + "]}");
  } else {
    field("fit", "null");
  }
  if (modelled_upstream_seconds) field("modelled_upstream_seconds", json_number(*modelled_upstream_seconds));
  if (measured_upstream_seconds) field("measured_upstream_seconds", json_number(*measured_upstream_seconds));
  return out + "}";
}

std::string data_parallel_result::to_json() const {
  const std::string trace = per_device.empty() ? std::string{} : per_device.front().trace;
  const std::string alloc = per_device.empty() ? std::string{} : per_device.front().allocator;
  return "{\"trace\":" + json_string(trace) + ",\"allocator\":" + json_string(alloc) +
         ",\"devices\":" + std::to_string(per_device.size()) + ",\"wall_seconds\":" + json_number(wall_seconds) +
         ",\"cpu_seconds\":" + json_number(cpu_seconds) + ",\"events_per_second\":" + json_number(events_per_second) + "}";
}

}  // namespace mgm
