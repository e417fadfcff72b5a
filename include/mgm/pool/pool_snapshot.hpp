/// @file
/// @brief `pool_snapshot`: every segment and block of a caching pool at one moment.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mgm {

struct block_snapshot {
  enum class state_type { free, allocated, pending, unmapped };
  std::uintptr_t address{0};
  std::size_t size{0};
  std::size_t requested{0};  ///< allocated blocks: what the caller asked for
  state_type state{state_type::free};
  std::uintptr_t stream{0};  ///< the stream whose cache holds it, or that allocated it
  std::string tag;           ///< `tag_scope` of the allocation, if any
};

struct segment_snapshot {
  std::uintptr_t address{0};
  std::size_t size{0};
  bool small{false};
  bool expandable{false};  ///< a reserved range whose 2 MiB granules are mapped as needed
  std::vector<block_snapshot> blocks;  ///< in address order, covering the segment
};

/// @brief A pool's segments, in address order.
struct pool_snapshot {
  int device{0};
  std::vector<segment_snapshot> segments;

  /// @brief `{"device":0,"segments":[{"address":"0x...","size":...,"pool":"small","blocks":[...]}]}`.
  [[nodiscard]] std::string to_json() const;
  /// @brief The Chrome / Perfetto trace-event format (open it in ui.perfetto.dev or
  /// chrome://tracing): one track per segment, each block a slice whose start and length are its
  /// offset and size in KiB (the time axis reads as address), named by state and tag.
  [[nodiscard]] std::string to_chrome_trace() const;
  [[nodiscard]] std::size_t bytes_in(block_snapshot::state_type s) const noexcept;
};

}  // namespace mgm
