// What the caching pool's tests over the simulator share (pool_test.cpp, pool_hazard_test.cpp,
// pool_deferred_test.cpp, pool_oom_test.cpp, interop_test.cpp): sizes, the pool type,
// plain-segment options, and a pool under the judge in record mode (`judged_pool`) or in the
// machine's default mode (`judged_setup`).
#pragma once

#include <mgm/pool/caching_pool.hpp>
#include <mgm/sim/judged.hpp>
#include <mgm/sim/machine.hpp>

#include "sizes.hpp"

#include <catch2/catch.hpp>

#include <cstddef>

namespace pool_test {
using sim_pool = mgm::caching_pool<mgm::sim::device_allocator>;

/// Plain `cudaMalloc`-style segments only (expandable segments are on by default on the simulator).
inline mgm::pool_options plain() {
  mgm::pool_options o;
  o.expandable_segments = false;
  return o;
}

/// Record mode: the test itself asserts that no hazard was found, so a finding fails it cleanly
/// (rather than through an exception thrown out of the pool).
struct judged_pool {
  mgm::sim::machine m{mgm::sim::parse_device_list("1GiB"), {mgm::sim::oracle_mode::record}};
  sim_pool raw{m.allocator(mgm::device_id{0}), plain()};
  mgm::sim::judged<sim_pool> pool{m, raw};
  void require_no_hazard() {
    const auto hazards = m.hazards();
    for (const auto& h : hazards) UNSCOPED_INFO(mgm::sim::name(h.kind) << ": " << h.message);
    REQUIRE(hazards.empty());
  }
};

/// The pool under test, judged: every hand-out is checked by the simulator's oracle, and the
/// test fails on the first unsafe reuse. `pool->` reaches the pool's other members.
struct judged_setup {
  mgm::sim::machine m;
  sim_pool raw;
  mgm::sim::judged<sim_pool> pool{m, raw};
  explicit judged_setup(const char* devices = "1GiB", mgm::pool_options o = plain())
      : m{mgm::sim::parse_device_list(devices)}, raw{m.allocator(mgm::device_id{0}), o} {}
  ~judged_setup() { CHECK(m.hazards().empty()); }
  judged_setup(const judged_setup&) = delete;
  judged_setup& operator=(const judged_setup&) = delete;
  std::size_t device_used() { return m.memory(mgm::device_id{0}).used_bytes; }
};

}  // namespace pool_test
