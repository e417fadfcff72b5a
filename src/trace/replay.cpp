#include "replay_target.hpp"

#include <mgm/bytes.hpp>
#include <mgm/error.hpp>
#include <mgm/trace/replay.hpp>

#include <nlohmann/json.hpp>

#include <array>
#include <chrono>
#include <string>
#include <vector>

namespace mgm {
namespace {

constexpr std::size_t step = std::size_t{2} << 20;  // the fit's resolution
constexpr std::array<std::string_view, 5> names{"pool", "direct", "cub", "pmr", "bump"};

std::size_t round_step(std::size_t bytes) { return (bytes + step - 1) / step * step; }

struct run_counts {
  sim::modelled_costs first;  // the driver calls of the first iteration
  std::chrono::nanoseconds elapsed{0};
};

// Replays `iterations` times; the driver calls of the first iteration are set apart.
run_counts run(const compiled_trace& t, detail::replay_target& target, const std::vector<stream_ref>& streams,
               int iterations, sim::machine* m, device_id d) {
  run_counts r;
  r.elapsed = detail::replay_ops(t, target, streams, iterations, [&] {
    if (m != nullptr) r.first = m->modelled(d);
  });
  return r;
}

struct sim_run {
  sim::machine machine;
  std::vector<stream_ref> streams;
  sim_run(const compiled_trace& t, std::size_t capacity, const replay_options& o)
      : machine{std::vector<sim::device_spec>{{"Simulated GPU", capacity, 90, std::nullopt, true}},
                sim::machine_options{o.judge ? sim::oracle_mode::record : sim::oracle_mode::off, o.costs}} {
    for (const auto s : t.streams) streams.push_back(s == 0 ? machine.default_stream(device_id{0}) : machine.create_stream(device_id{0}));
  }
};

// The floor: the allocator's peak reserved bytes obtained once, in one allocation of its kind,
// on a device that never held memory.
double floor_seconds(const sim::cost_model& c, const sim::modelled_costs& used, std::size_t peak_reserved) {
  if (peak_reserved == 0) return 0.0;
  if (used.count(sim::driver_call::create) > 0) {
    const std::size_t granule = sim::cost_model::two_mib;
    const std::size_t bytes = (peak_reserved + granule - 1) / granule * granule;
    return (c.reserve_us + c.create_charge_us(bytes, 0, 0) + c.map_us + c.set_access_charge_us(bytes, 1)) * 1e-6;
  }
  return c.malloc_charge_us(peak_reserved, 0, 0, 0) * 1e-6;
}

// `iterations` of `allocator` over `t` on a machine of its own with `capacity` bytes, unjudged:
// the time they took.
std::chrono::nanoseconds run_alone(const compiled_trace& t, std::string_view allocator, const replay_options& o,
                                   std::size_t capacity, int iterations) {
  replay_options quiet = o;
  quiet.judge = false;
  sim_run r{t, capacity, quiet};
  auto target = detail::make_replay_target(allocator, r.machine, device_id{0}, o.pool, false);
  return run(t, *target, r.streams, iterations, nullptr, device_id{0}).elapsed;
}

bool fits(const compiled_trace& t, std::string_view allocator, const replay_options& o, std::size_t capacity) {
  try {
    (void)run_alone(t, allocator, o, capacity, o.iterations);
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

}  // namespace

std::span<const std::string_view> replay_allocators() noexcept { return names; }

replay_result replay_on_sim(const compiled_trace& t, std::string_view allocator, const replay_options& o) {
  MGM_EXPECTS(o.iterations >= 1, "a replay needs at least one iteration");
  bool known = false;
  for (const auto n : names) known = known || n == allocator;
  MGM_EXPECTS(known, "unknown allocator '" + std::string{allocator} + "'; the allocators are pool, direct, cub, pmr, bump");

  replay_result r;
  r.trace = t.name;
  r.allocator = std::string{allocator};
  r.iterations = o.iterations;
  r.events = t.ops.size();
  r.peak_live_bytes = t.peak_live_bytes;

  // A warm-up pass, untimed, of the same allocator on a machine of its own: the timed run then
  // pays no start-up costs of the process (code and heap pages first touched, symbols bound), which
  // fell on whichever allocator a process replayed first. Measured (`mgm replay` of U-Net, 812
  // events, one pass, the pool): about 1.0 ms in a fresh process, 0.06 to 0.15 ms once the process
  // had replayed it twice. The timed run still starts from a new allocator on a new machine, so
  // every growth of its first pass counts. (A trace that does not fit fails here as it would below.)
  (void)run_alone(t, allocator, o, o.capacity_bytes, 1);
  // The do-nothing replay: what the loop itself costs (a clock read costs more than the budget
  // of one event, so time is taken once per batch).
  const std::chrono::nanoseconds baseline = run_alone(t, "null", o, o.capacity_bytes, o.iterations);
  sim_run s{t, o.capacity_bytes, o};
  {
    const device_id d{0};
    auto target = detail::make_replay_target(allocator, s.machine, d, o.pool, o.judge);
    const auto counts = run(t, *target, s.streams, o.iterations, &s.machine, d);
    const sim::modelled_costs c = s.machine.modelled(d);
    const sim::modelled_costs later = c - counts.first;
    using sim::driver_call;
    r.upstream_allocations = c.count(driver_call::malloc) + c.count(driver_call::create);
    r.upstream_frees = c.count(driver_call::free) + c.count(driver_call::release);
    r.upstream_calls_after_first_iteration = later.upstream_calls();
    r.driver_calls = c.calls;
    mgm::modelled_driver_seconds ms;
    for (std::size_t k = 0; k < sim::driver_call_kinds; ++k) ms.by_kind[k] = c.micros[k] * 1e-6;
    ms.total = c.total_seconds();
    ms.after_first_iteration = later.total_seconds();
    r.peak_reserved_bytes = s.machine.memory(d).peak_used_bytes;
    ms.floor = floor_seconds(o.costs, c, r.peak_reserved_bytes);
    if (c.count(driver_call::create) > 0) {
      ms.least_under_memory_limit = least_growth_driver_time(t, o.costs, o.memory_limit, o.pool.large_direct_bytes);
    }
    r.modelled_driver_seconds = ms;
    r.modelled_upstream_seconds = ms.total;
    const double events = static_cast<double>(r.events) * o.iterations;
    // The simulator's own work inside modelled calls is not the allocator's: it is measured and taken off.
    detail::set_host_times(r, counts.elapsed - s.machine.bookkeeping(d), baseline, events);
    if (o.judge) r.hazards = s.machine.hazards().size();
    target.reset();  // the teardown's frees are not part of the replay
  }
  r.reserved_over_live =
      r.peak_live_bytes == 0 ? 0.0 : static_cast<double>(r.peak_reserved_bytes) / static_cast<double>(r.peak_live_bytes);
  if (o.fit) r.fit = search_fit(t, allocator, o, r.peak_reserved_bytes);
  return r;
}

namespace {
nlohmann::json driver_kinds_json(const auto& values) {
  nlohmann::json o = nlohmann::json::object();
  for (std::size_t k = 0; k < sim::driver_call_kinds; ++k) o[std::string{sim::name(static_cast<sim::driver_call>(k))}] = values[k];
  return o;
}

nlohmann::json to_json_value(const growth_point& p) {
  return {{"growths", p.growths},          {"range_bytes", p.range_bytes}, {"reserved_bytes", p.reserved_bytes},
          {"seconds", p.seconds},          {"floor", p.floor_seconds},     {"over_floor", p.over_floor()}};
}

nlohmann::json to_json_value(const replay_result& r) {
  nlohmann::json j;
  j["trace"] = r.trace;
  j["allocator"] = r.allocator;
  j["device"] = r.device;
  j["iterations"] = r.iterations;
  j["events"] = r.events;
  j["host_ns_per_event"] = r.host_ns_per_event;
  j["loop_ns_per_event"] = r.loop_ns_per_event;
  j["events_per_second"] = r.events_per_second;
  j["upstream_allocations"] = r.upstream_allocations;
  j["upstream_frees"] = r.upstream_frees;
  j["upstream_calls_after_first_iteration"] = r.upstream_calls_after_first_iteration;
  j["peak_live_bytes"] = r.peak_live_bytes;
  j["peak_reserved_bytes"] = r.peak_reserved_bytes;
  j["reserved_over_live"] = r.reserved_over_live;
  if (r.fit) {
    j["fit"] = {{"capacity_bytes", r.fit->capacity_bytes},
                {"over_peak_live", r.fit->over_peak_live},
                {"confirmed", r.fit->confirmed},
                {"non_monotone", r.fit->non_monotone}};
  } else {
    j["fit"] = nullptr;
  }
  if (r.driver_calls) j["driver_calls"] = driver_kinds_json(*r.driver_calls);
  if (r.modelled_driver_seconds) {
    j["modelled_driver_seconds"] = {{"by_kind", driver_kinds_json(r.modelled_driver_seconds->by_kind)},
                                    {"total", r.modelled_driver_seconds->total},
                                    {"after_first_iteration", r.modelled_driver_seconds->after_first_iteration},
                                    {"floor", r.modelled_driver_seconds->floor}};
    if (const auto& b = r.modelled_driver_seconds->least_under_memory_limit) {
      j["modelled_driver_seconds"]["least_under_memory_limit"] = {{"ratio", b->ratio},
                                                                  {"least_seconds", to_json_value(b->least_seconds)},
                                                                  {"least_over_floor", to_json_value(b->least_over_floor)}};
    }
  }
  if (r.modelled_upstream_seconds) j["modelled_upstream_seconds"] = *r.modelled_upstream_seconds;  // deprecated
  if (r.measured_upstream_seconds) j["measured_upstream_seconds"] = *r.measured_upstream_seconds;
  if (r.hazards) j["hazards"] = *r.hazards;
  return j;
}

}  // namespace

std::string replay_result::to_json() const { return to_json_value(*this).dump(); }

std::string data_parallel_result::to_json() const {
  nlohmann::json j;
  j["trace"] = per_device.empty() ? std::string{} : per_device.front().trace;
  j["allocator"] = per_device.empty() ? std::string{} : per_device.front().allocator;
  j["devices"] = per_device.size();
  j["wall_seconds"] = wall_seconds;
  j["cpu_seconds"] = cpu_seconds;
  j["events_per_second"] = events_per_second;
  return j.dump();
}

}  // namespace mgm
