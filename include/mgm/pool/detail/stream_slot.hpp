/// @file
/// @brief The caching pool's per-stream cache.
#pragma once

#include <mgm/pool/detail/tlsf_index.hpp>

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mgm::detail {

/// The free blocks a stream may reuse at once (they were freed in its order), with the event
/// that lets other streams take them. Epochs count this stream's frees: a block freed at epoch
/// `e` is covered by an event recorded at epoch `E >= e`.
///
/// The slot counts in 64 bits (it never wraps); a block keeps the low 32 bits of its epoch. The
/// comparison is exact while the event is fewer than 2^31 frees old, so an older event is never
/// trusted to cover anything: it is recorded anew (`event_covers`).
struct stream_slot {
  cudaStream_t stream{nullptr};
  tlsf_index small;
  tlsf_index large;
  tlsf_index unmapped_small;  ///< free ranges of its expandable segments with no memory behind them
  tlsf_index unmapped_large;
  std::uint64_t free_epoch{0};
  std::uint64_t event_epoch{0};
  int event{-1};               ///< index into the pool's events, -1: none yet
  bool event_recorded{false};
  bool event_complete{false};

  tlsf_index& index(bool is_small) noexcept { return is_small ? small : large; }
  /// The epoch of the next free (its low 32 bits, as a block keeps it).
  std::uint32_t next_epoch() noexcept { return static_cast<std::uint32_t>(++free_epoch); }
  /// The epoch of the last free, as a block keeps it.
  [[nodiscard]] std::uint32_t current_epoch() const noexcept { return static_cast<std::uint32_t>(free_epoch); }
  tlsf_index& unmapped_index(bool is_small) noexcept { return is_small ? unmapped_small : unmapped_large; }
};

/// `a` happened no later than `b`, on 32-bit counters that wrap (exact within 2^31 of each other).
[[nodiscard]] constexpr bool epoch_covers(std::uint32_t event_epoch, std::uint32_t block_epoch) noexcept {
  return static_cast<std::int32_t>(event_epoch - block_epoch) >= 0;
}

/// The slot's recorded event covers a block it freed at `block_epoch`. An event recorded 2^31 or
/// more frees ago covers nothing: the 32-bit comparison could no longer tell.
[[nodiscard]] inline bool event_covers(const stream_slot& slot, std::uint32_t block_epoch) noexcept {
  return slot.event_recorded && slot.free_epoch - slot.event_epoch < (std::uint64_t{1} << 31) &&
         epoch_covers(static_cast<std::uint32_t>(slot.event_epoch), block_epoch);
}

}  // namespace mgm::detail
