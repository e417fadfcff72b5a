// The least driver time of a growing allocator under a memory limit: a case worked by hand, and
// small random traces against a search of every growth any such allocator could make.
#include <mgm/error.hpp>
#include <mgm/sim/cost_model.hpp>
#include <mgm/trace/growth_bound.hpp>
#include <mgm/trace/replay.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <random>
#include <vector>

namespace {

constexpr std::size_t mib = std::size_t{1} << 20;

// A trace from (slot, bytes) pairs: bytes 0 frees the slot.
mgm::compiled_trace make(const std::vector<std::pair<std::uint32_t, std::size_t>>& steps) {
  mgm::compiled_trace t;
  t.name = "t";
  t.streams = {0};
  std::vector<std::size_t> live;
  std::size_t now = 0;
  for (const auto& [slot, bytes] : steps) {
    if (live.size() <= slot) live.resize(slot + 1, 0);
    const bool is_free = bytes == 0;
    t.ops.push_back({slot, 0, is_free ? live[slot] : bytes, is_free});
    if (is_free) {
      now -= live[slot];
      live[slot] = 0;
    } else {
      live[slot] = bytes;
      now += bytes;
      ++t.allocations;
    }
    t.peak_live_bytes = std::max(t.peak_live_bytes, now);
  }
  t.slots = live.size();
  return t;
}

// Every allocator the bound covers: at each request the range cannot hold, any mapped size from
// what it needs to what the limit allows (granules). The least seconds, and the least seconds
// over their own floor, over every such sequence of growths.
struct searched {
  double seconds{1e30};
  double over_floor{1e30};
};

void search(const mgm::compiled_trace& t, const mgm::sim::cost_model& c, double ratio, std::size_t from,
            std::size_t granule, std::size_t i, std::vector<std::size_t>& live, std::vector<bool>& in_range,
            std::size_t range_live, std::size_t small_live, std::size_t peak, std::size_t mapped, std::size_t reserved,
            std::size_t growths, double us, searched& best) {
  for (; i < t.ops.size(); ++i) {
    const auto& op = t.ops[i];
    if (op.is_free) {
      (in_range[op.slot] ? range_live : small_live) -= live[op.slot];
      live[op.slot] = 0;
      continue;
    }
    live[op.slot] = op.bytes;
    in_range[op.slot] = op.bytes >= from;
    (in_range[op.slot] ? range_live : small_live) += op.bytes;
    peak = std::max(peak, range_live + small_live);
    if (in_range[op.slot] && range_live > mapped) {
      const std::size_t need = (range_live + granule - 1) / granule * granule;
      const double allowed = ratio * static_cast<double>(peak) - static_cast<double>(small_live);
      const std::size_t most = std::max(need, allowed <= 0 ? 0 : static_cast<std::size_t>(allowed) / granule * granule);
      for (std::size_t next = need; next <= most; next += granule) {
        const std::size_t bytes = next - mapped;
        const double cost = (growths == 0 ? c.reserve_us : 0.0) + c.create_charge_us(bytes, mapped, mapped) + c.map_us +
                            c.set_access_charge_us(bytes, 1);
        std::vector<std::size_t> live2 = live;
        std::vector<bool> in2 = in_range;
        search(t, c, ratio, from, granule, i + 1, live2, in2, range_live, small_live, peak, next,
               std::max(reserved, next + small_live), growths + 1, us + cost, best);
      }
      return;
    }
    reserved = std::max(reserved, mapped + small_live);
  }
  if (growths == 0) return;
  const std::size_t whole = (reserved + mgm::sim::cost_model::two_mib - 1) / mgm::sim::cost_model::two_mib * mgm::sim::cost_model::two_mib;
  const double floor_us = c.reserve_us + c.create_charge_us(whole, 0, 0) + c.map_us + c.set_access_charge_us(whole, 1);
  best.seconds = std::min(best.seconds, us * 1e-6);
  best.over_floor = std::min(best.over_floor, us / floor_us);
}

}  // namespace

TEST_CASE("the least growths of a streak, worked by hand", "[trace][growth_bound]") {
  // Ten live 8 MiB requests, reserved at most 1.25 x peak live after each growth: the range maps
  // 10, 20, 30, 40, 60 and 80 MiB (requests 1, 2, 3, 4, 6 and 8 grow): six growths at any cap.
  std::vector<std::pair<std::uint32_t, std::size_t>> steps;
  for (std::uint32_t s = 0; s < 10; ++s) steps.emplace_back(s, 8 * mib);
  const auto t = make(steps);
  const mgm::sim::cost_model c{};
  const auto b = mgm::least_growth_driver_time(t, c, 1.25, 0, mib);
  CHECK(b.ratio == 1.25);
  CHECK(b.least_seconds.growths == 6);
  CHECK(b.least_over_floor.growths == 6);
  CHECK(b.least_seconds.range_bytes == 80 * mib);  // the bytes cost more beyond what the range needs
  // 10 + 10 + 10 + 10 + 20 + 20 MiB: reserve, six creates (first use, 1 us/MiB), maps and set_access.
  double us = c.reserve_us;
  for (const std::size_t m : {10, 10, 10, 10, 20, 20}) {
    us += c.create_charge_us(m * mib, 0, 0) + c.map_us + c.set_access_charge_us(m * mib, 1);
  }
  CHECK(b.least_seconds.seconds == Approx(us * 1e-6));
  // Exact mapping (a limit of 1) grows at every request.
  CHECK(mgm::least_growth_driver_time(t, c, 1.0, 0, mib).least_seconds.growths == 10);
  // Requests below the range's threshold cost nothing and hold no range.
  CHECK(mgm::least_growth_driver_time(t, c, 1.25, 9 * mib, mib).least_seconds.growths == 0);
}

TEST_CASE("small requests take their share of the limit", "[trace][growth_bound]") {
  // 40 MiB of small live requests, then 10 MiB range requests: at 1.25 the limit leaves the range
  // (40 + k 10) / 4 MiB ahead, beyond the 40 MiB of small ones.
  std::vector<std::pair<std::uint32_t, std::size_t>> steps;
  for (std::uint32_t s = 0; s < 40; ++s) steps.emplace_back(s, mib);
  for (std::uint32_t s = 40; s < 44; ++s) steps.emplace_back(s, 10 * mib);
  const auto t = make(steps);
  // Growth 1 at 50 MiB live: 1.25 x 50 - 40 = 22 MiB; then 20 ≤ 22 fits; 30 > 22: 1.25 x 70 - 40
  // = 47; 40 ≤ 47 fits. Two growths.
  CHECK(mgm::least_growth_driver_time(t, mgm::sim::cost_model{}, 1.25, 2 * mib, mib).least_seconds.growths == 2);
}

TEST_CASE("the bound equals a search of every growth on small traces", "[trace][growth_bound]") {
  std::mt19937 rng{20261207};
  const mgm::sim::cost_model c{};
  for (int trial = 0; trial < 60; ++trial) {
    std::vector<std::pair<std::uint32_t, std::size_t>> steps;
    std::vector<std::uint32_t> live;
    std::uint32_t next = 0;
    for (int k = 0; k < 9; ++k) {
      if (!live.empty() && rng() % 3 == 0) {
        const std::size_t at = rng() % live.size();
        steps.emplace_back(live[at], 0);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(at));
      } else {
        steps.emplace_back(next, (1 + rng() % 6) * mib + (rng() % 2) * (mib / 2));
        live.push_back(next++);
      }
    }
    const auto t = make(steps);
    const double ratio = trial % 3 == 0 ? 1.0 : trial % 3 == 1 ? 1.2 : 1.5;
    const std::size_t from = trial % 2 == 0 ? 0 : 2 * mib;
    const auto b = mgm::least_growth_driver_time(t, c, ratio, from, 2 * mib);
    searched best;
    std::vector<std::size_t> lv(t.slots, 0);
    std::vector<bool> in(t.slots, false);
    search(t, c, ratio, from, 2 * mib, 0, lv, in, 0, 0, 0, 0, 0, 0, 0.0, best);
    INFO("trial " << trial << " ratio " << ratio << " from " << from);
    if (b.least_seconds.growths == 0) {
      CHECK(best.seconds == 1e30);
      continue;
    }
    CHECK(b.least_seconds.seconds == Approx(best.seconds).margin(1e-9));  // the bound rounds to the nanosecond
    CHECK(b.least_over_floor.over_floor() == Approx(best.over_floor).epsilon(1e-5));
  }
}

TEST_CASE("the bound refuses a limit below 1", "[trace][growth_bound]") {
  const auto t = make({{0, mib}});
  CHECK_THROWS_AS(mgm::least_growth_driver_time(t, mgm::sim::cost_model{}, 0.9, 0), mgm::logic_error);
  CHECK_THROWS_AS(mgm::least_growth_driver_time(t, mgm::sim::cost_model{}, 1.05, 0, 3 * mib), mgm::logic_error);
}

TEST_CASE("a pool replay reports the bound under the memory limit, a cudaMalloc replay none", "[trace][growth_bound]") {
  std::vector<std::pair<std::uint32_t, std::size_t>> steps;
  for (std::uint32_t s = 0; s < 12; ++s) steps.emplace_back(s, 24 * mib);
  const auto t = make(steps);
  mgm::replay_options o;
  o.iterations = 2;
  o.capacity_bytes = std::size_t{4} << 30;
  o.pool.expandable_segments = true;
  const auto pool = mgm::replay_on_sim(t, "pool", o);
  REQUIRE(pool.modelled_driver_seconds);
  const auto& b = pool.modelled_driver_seconds->least_under_memory_limit;
  REQUIRE(b);
  CHECK(b->ratio == 1.05);
  CHECK(b->least_seconds.growths >= 1);
  CHECK(pool.modelled_driver_seconds->total >= b->least_seconds.seconds);
  CHECK(pool.to_json().find("\"least_under_memory_limit\":{") != std::string::npos);
  const auto direct = mgm::replay_on_sim(t, "direct", o);
  CHECK_FALSE(direct.modelled_driver_seconds->least_under_memory_limit);
}
