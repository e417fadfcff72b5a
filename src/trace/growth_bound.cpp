// The least driver time of a growing allocator under a memory limit (growth_bound.hpp says why
// each rule makes it a bound).
#include <mgm/error.hpp>
#include <mgm/trace/growth_bound.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

namespace mgm {
namespace {

std::size_t round_up(std::size_t bytes, std::size_t granule) { return (bytes + granule - 1) / granule * granule; }
std::size_t round_down(double bytes, std::size_t granule) {
  return bytes <= 0.0 ? 0 : static_cast<std::size_t>(bytes) / granule * granule;
}

// One pass of the greedy allocator whose range ends at `cap` bytes (a multiple of the granule).
growth_point greedy(const compiled_trace& t, std::size_t range_from_bytes, const sim::cost_model& c, double ratio,
                    std::size_t granule, std::size_t cap) {
  growth_point p;
  p.range_bytes = cap;
  std::vector<std::size_t> live_bytes(t.slots, 0);
  std::vector<bool> in_range(t.slots, false);
  std::size_t range_live = 0;
  std::size_t small_live = 0;
  std::size_t peak = 0;
  std::size_t mapped = 0;
  double us = 0.0;
  for (const replay_op& op : t.ops) {
    if (op.is_free) {
      (in_range[op.slot] ? range_live : small_live) -= live_bytes[op.slot];
      live_bytes[op.slot] = 0;
      continue;
    }
    const bool range = op.bytes >= range_from_bytes;
    in_range[op.slot] = range;
    live_bytes[op.slot] = op.bytes;
    (range ? range_live : small_live) += op.bytes;
    peak = std::max(peak, range_live + small_live);
    if (range && range_live > mapped) {
      const std::size_t need = round_up(range_live, granule);
      const double allowed = ratio * static_cast<double>(peak) - static_cast<double>(small_live);
      const std::size_t next = std::min(cap, std::max(need, round_down(allowed, granule)));
      const std::size_t bytes = next - mapped;
      if (p.growths == 0) us += c.reserve_us;
      us += c.create_charge_us(bytes, mapped, mapped) + c.map_us + c.set_access_charge_us(bytes, 1);
      ++p.growths;
      mapped = next;
    }
    p.reserved_bytes = std::max(p.reserved_bytes, mapped + small_live);
  }
  p.seconds = std::round(us * 1e3) * 1e-9;  // to the nanosecond: the sum of many charges carries noise below it
  if (p.reserved_bytes > 0) {
    const std::size_t whole = round_up(p.reserved_bytes, sim::cost_model::two_mib);
    p.floor_seconds = (c.reserve_us + c.create_charge_us(whole, 0, 0) + c.map_us + c.set_access_charge_us(whole, 1)) * 1e-6;
  }
  return p;
}

}  // namespace

growth_bound least_growth_driver_time(const compiled_trace& t, const sim::cost_model& costs, double ratio,
                                      std::size_t range_from_bytes, std::size_t granule) {
  MGM_EXPECTS(ratio >= 1.0 && std::isfinite(ratio), "least_growth_driver_time: the limit must be a ratio of at least 1");
  MGM_EXPECTS(granule != 0 && (granule & (granule - 1)) == 0, "least_growth_driver_time: the granule must be a power of two");
  growth_bound b;
  b.ratio = ratio;
  // The least and the most the range can end with mapped.
  std::vector<std::size_t> live_bytes(t.slots, 0);
  std::size_t range_live = 0;
  std::size_t all_live = 0;
  std::size_t need = 0;
  std::size_t peak = 0;
  for (const replay_op& op : t.ops) {
    if (op.is_free) {
      if (live_bytes[op.slot] >= range_from_bytes) range_live -= live_bytes[op.slot];
      all_live -= live_bytes[op.slot];
      live_bytes[op.slot] = 0;
      continue;
    }
    live_bytes[op.slot] = op.bytes;
    all_live += op.bytes;
    peak = std::max(peak, all_live);
    if (op.bytes >= range_from_bytes) {
      range_live += op.bytes;
      need = std::max(need, round_up(range_live, granule));
    }
  }
  if (need == 0) return b;
  const std::size_t most = std::max(need, round_down(ratio * static_cast<double>(peak), granule));
  bool first = true;
  for (std::size_t cap = need; cap <= most; cap += granule) {
    const growth_point p = greedy(t, range_from_bytes, costs, ratio, granule, cap);
    if (first || p.seconds < b.least_seconds.seconds) b.least_seconds = p;
    if (first || p.over_floor() < b.least_over_floor.over_floor()) b.least_over_floor = p;
    first = false;
  }
  return b;
}

}  // namespace mgm
