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
struct stream_slot {
  cudaStream_t stream{nullptr};
  tlsf_index small;
  tlsf_index large;
  tlsf_index unmapped_small;  ///< free ranges of its expandable segments with no memory behind them
  tlsf_index unmapped_large;
  std::uint32_t free_epoch{0};
  std::uint32_t event_epoch{0};
  int event{-1};               ///< index into the pool's events, -1: none yet
  bool event_recorded{false};
  bool event_complete{false};

  tlsf_index& index(bool is_small) noexcept { return is_small ? small : large; }
  tlsf_index& unmapped_index(bool is_small) noexcept { return is_small ? unmapped_small : unmapped_large; }
};

/// `a` happened no later than `b`, on 32-bit counters that wrap.
[[nodiscard]] constexpr bool epoch_covers(std::uint32_t event_epoch, std::uint32_t block_epoch) noexcept {
  return static_cast<std::int32_t>(event_epoch - block_epoch) >= 0;
}

}  // namespace mgm::detail
