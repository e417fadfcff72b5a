/// @file
/// @brief `oom_info` and `oom_handler`: what a caching pool knew when memory ran out.
#pragma once

#include <mgm/device.hpp>
#include <mgm/pool/pool_options.hpp>

#include <cstddef>
#include <functional>
#include <optional>
#include <string>

namespace mgm {

/// @brief What the pool knew when memory ran out; given to the `oom_handler` and the message.
struct oom_info {
  device_id device{0};
  std::size_t requested_bytes{0};
  std::size_t allocated_bytes{0};
  std::size_t reserved_bytes{0};
  std::size_t idle_cached_bytes{0};   ///< reserved but not allocated (free and pending blocks)
  std::size_t largest_free_bytes{0};  ///< the largest free block of the pool
  std::optional<std::size_t> device_free_bytes;
  std::size_t max_split_bytes{0};
  bool capturing{false};   ///< the request came from a stream capturing a CUDA graph
  bool expandable{false};  ///< the request grows an expandable segment (mapped in `map_chunk` pieces)
  bool address_space_exhausted{false};  ///< the driver refused a new virtual address range (cuMemAddressReserve)
  pool_limits limits;      ///< the pool's limits when it ran out
};

/// @brief Called when the pool could not get memory even after releasing its idle segments.
/// Return true to have the allocation retried once more (after freeing something).
using oom_handler = std::function<bool(const oom_info&)>;

namespace detail {
/// The text of `mgm::out_of_memory` for a pool.
[[nodiscard]] std::string describe_pool_oom(const oom_info& info);
[[nodiscard]] std::string describe_device(device_id d);
}  // namespace detail

}  // namespace mgm
