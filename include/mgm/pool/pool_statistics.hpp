/// @file
/// @brief `pool_statistics`: what a caching pool did, in PyTorch's vocabulary.
#pragma once

#include <cstdint>
#include <string>

namespace mgm {

/// @brief One quantity: its current value, the highest it reached, and the sum of its increases.
struct stat {
  std::int64_t current{0};
  std::int64_t peak{0};
  std::uint64_t total{0};

  void add(std::int64_t n) noexcept {
    current += n;
    total += static_cast<std::uint64_t>(n);
    if (current > peak) peak = current;
  }
  void sub(std::int64_t n) noexcept { current -= n; }
  friend bool operator==(const stat&, const stat&) = default;
};

/// @brief A pool's statistics (`torch.cuda.memory_stats` names, without the pool split).
///
/// - `allocated_bytes`: blocks handed out (rounded sizes); `requested_bytes`: what callers asked for;
/// - `reserved_bytes`: segments obtained from the upstream;
/// - `active_bytes`: allocated, plus blocks freed but still in use on another stream (`record_stream`);
/// - `inactive_split_bytes`: free blocks inside segments that are split (not releasable as a whole);
/// - `allocations`, `segments`: counts.
/// Invariant: `reserved == active + inactive_split + idle` where idle is whole free segments.
struct pool_statistics {
  stat allocated_bytes;
  stat requested_bytes;
  stat reserved_bytes;
  stat active_bytes;
  stat inactive_split_bytes;
  stat allocations;
  stat segments;
  std::uint64_t upstream_allocations{0};
  std::uint64_t upstream_frees{0};
  std::uint64_t cache_hits{0};    ///< allocations served from cached blocks
  std::uint64_t cache_misses{0};  ///< allocations that needed a new segment (`hits + misses == allocations.total`)
  std::uint64_t stream_steals{0};  ///< blocks taken from another stream's cache (after its event)
  std::uint64_t oom_retries{0};
  std::uint64_t ooms{0};

  /// @brief `1 - peak allocated / peak reserved`: the share of the reserved peak never used.
  [[nodiscard]] double fragmentation() const noexcept {
    return reserved_bytes.peak == 0
               ? 0.0
               : 1.0 - static_cast<double>(allocated_bytes.peak) / static_cast<double>(reserved_bytes.peak);
  }
  /// @brief Adds another pool's figures (peaks add: an upper bound of the joint peak).
  pool_statistics& operator+=(const pool_statistics& o) noexcept;
  /// @brief One line per figure, for people.
  [[nodiscard]] std::string to_string() const;

  friend bool operator==(const pool_statistics&, const pool_statistics&) = default;
};

}  // namespace mgm
