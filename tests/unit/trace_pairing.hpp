// The generators' first invariant, checked event by event: time grows, sizes are the caching
// allocator's (multiples of 512 B), every free names a live allocation of the same size.
#pragma once

#include <mgm/trace/trace.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <unordered_map>

namespace mgm_test {

// Returns how many allocations are still live at the end.
inline std::size_t check_pairing(const mgm::trace& t) {
  std::unordered_map<std::uint64_t, std::size_t> live;
  double last = -1.0;
  for (const auto& e : t.events) {
    REQUIRE(e.seconds > last);
    last = e.seconds;
    REQUIRE(e.bytes % 512 == 0);
    REQUIRE(e.bytes >= 512);
    if (e.action == mgm::trace_event::action_type::allocate) {
      REQUIRE(live.emplace(e.pointer, e.bytes).second);
    } else {
      const auto it = live.find(e.pointer);
      REQUIRE(it != live.end());
      REQUIRE(it->second == e.bytes);
      live.erase(it);
    }
  }
  return live.size();
}

}  // namespace mgm_test
