/// @file
/// @brief `capture_pool_id`: names a caching pool's private pool for CUDA graph captures.
#pragma once

#include <atomic>
#include <cstdint>

namespace mgm {

/// @brief A private pool of a `caching_pool`, for the memory of CUDA graph captures (PyTorch's
/// `graph_pool_handle()`). Several captures given the same id share its memory: graphs that are
/// replayed one after another, never at the same time. Ids are unique in the process.
struct capture_pool_id {
  std::uint64_t value{0};

  /// @brief A new id, never returned before (never 0).
  [[nodiscard]] static capture_pool_id make() noexcept {
    static std::atomic<std::uint64_t> next{1};
    return capture_pool_id{next.fetch_add(1, std::memory_order_relaxed)};
  }
  friend bool operator==(capture_pool_id, capture_pool_id) = default;
};

}  // namespace mgm
