/// @file
/// @brief The least modelled driver time that any allocator growing virtual ranges can take on a
/// trace while it keeps reserved / live within a limit: how far a pool's driver time can fall
/// before it must spend memory (issue 17's precedence: memory first, driver time minimised under it).
///
/// ## The model
/// An allocator of the pool's kind obtains memory in *growths* of an address range: one reserve,
/// then per growth at least one create, one map and one set_access (`sim::cost_model`; at the
/// typical prices about 162 us of fixed charges per growth beyond the first, on top of what the
/// bytes cost, which is the same however they are split). The bound grants it more than any real
/// allocator has:
/// - **perfect packing:** every free mapped byte serves any request (one range for every stream
///   and size, no fragmentation, no rounding but the granule's);
/// - **small requests free:** those below `range_from_bytes` (the pool's plain small segments)
///   cost nothing and are counted only as memory the range cannot have;
/// - **the limit checked only when it grows:** after each growth, the range's mapped bytes M and
///   the small requests' live bytes S satisfy `M + S <= ratio x peak live so far`, or M is just
///   what the live range requests need (granule rounding alone may pass the ratio).
///
/// Why "so far": every prefix of a trace is a trace, and an allocator cannot know where the one it
/// runs will peak; one that passes the limit on every prefix may map ahead at most what the limit
/// leaves now. (An allocator told that only traces above some size are judged could map ahead
/// freely below it; the bound does not, since the memory target is one a user sees at every size.)
///
/// Under these rules the fewest growths for a final mapped size C come from mapping as much as
/// the limit allows, capped at C, at every growth (more mapped never makes a growth come sooner,
/// and the limit only loosens as the peak grows). The bound takes each C from what the range
/// must hold to what the limit allows, in granules, and reports two points: the least modelled
/// seconds, and the least ratio of seconds to the point's own `floor` (its peak reserved bytes in
/// one allocation: what `modelled_driver_seconds::floor` is for a replay). A replay's driver-time
/// target `max(cub, 1.1 x floor)` is unreachable under the limit when the first is above cub's
/// seconds and the second above 1.1. (Obtaining idle memory only to raise one's floor does not
/// help: it costs at least the create or malloc slope, more than the tenth of it the floor adds.)
#pragma once

#include <mgm/sim/cost_model.hpp>
#include <mgm/trace/trace.hpp>

#include <cstddef>

namespace mgm {

/// @brief One point of the bound: the fewest growths that end with `range_bytes` mapped.
struct growth_point {
  std::size_t range_bytes{0};     ///< the range's final mapped bytes (the cap)
  std::size_t reserved_bytes{0};  ///< the least peak reserved: max over time of mapped + small live
  std::size_t growths{0};
  double seconds{0.0};            ///< reserve + each growth's create, map and set_access
  double floor_seconds{0.0};      ///< `reserved_bytes` obtained in one handle of a fresh device
  [[nodiscard]] double over_floor() const noexcept { return floor_seconds > 0.0 ? seconds / floor_seconds : 0.0; }
};

/// @brief The bound at one limit (see the file comment).
struct growth_bound {
  double ratio{0.0};
  growth_point least_seconds;
  growth_point least_over_floor;
};

/// @brief The least driver time of a growing allocator on `t` under `reserved <= ratio x peak
/// live`, with requests below `range_from_bytes` outside the range, mapped in `granule` steps.
/// Nothing when the trace allocates nothing the range serves.
/// @throws mgm::logic_error when `ratio < 1` or `granule` is not a power of two.
[[nodiscard]] growth_bound least_growth_driver_time(const compiled_trace& t, const sim::cost_model& costs,
                                                    double ratio, std::size_t range_from_bytes,
                                                    std::size_t granule = sim::cost_model::two_mib);

}  // namespace mgm
