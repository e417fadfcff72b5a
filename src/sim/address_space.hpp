// Best-fit placement of ranges inside one simulated device's memory (the sim's cudaMalloc).
// Not a hot path: it stands for the driver, whose calls cost tens of microseconds.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <utility>

namespace mgm::sim::detail {

// Free ranges of [0, capacity), indexed by offset (for coalescing) and by size (for best fit).
// Invariant: the two indexes hold the same ranges; no two free ranges touch (they are merged).
class address_space {
 public:
  explicit address_space(std::size_t capacity) { insert(0, capacity); }

  // The offset of `bytes` aligned to `alignment` (a power of two), from the smallest free range
  // that holds it; nullopt when none does.
  std::optional<std::size_t> allocate(std::size_t bytes, std::size_t alignment) {
    for (auto it = by_size_.lower_bound({bytes, 0}); it != by_size_.end(); ++it) {
      const auto [size, offset] = *it;
      const std::size_t start = (offset + alignment - 1) & ~(alignment - 1);
      if (start - offset > size || size - (start - offset) < bytes) continue;
      erase(offset, size);
      if (start > offset) insert(offset, start - offset);
      if (start + bytes < offset + size) insert(start + bytes, offset + size - start - bytes);
      return start;
    }
    return std::nullopt;
  }

  void free(std::size_t offset, std::size_t bytes) {
    auto next = by_offset_.lower_bound(offset);
    if (next != by_offset_.end() && next->first == offset + bytes) {
      bytes += next->second;
      erase(next->first, next->second);
    }
    auto prev = by_offset_.lower_bound(offset);
    if (prev != by_offset_.begin()) {
      --prev;
      if (prev->first + prev->second == offset) {
        offset = prev->first;
        bytes += prev->second;
        erase(prev->first, prev->second);
      }
    }
    insert(offset, bytes);
  }

  [[nodiscard]] std::size_t largest_free() const noexcept { return by_size_.empty() ? 0 : by_size_.rbegin()->first; }

 private:
  void insert(std::size_t offset, std::size_t bytes) {
    by_offset_.emplace(offset, bytes);
    by_size_.emplace(bytes, offset);
  }
  void erase(std::size_t offset, std::size_t bytes) {
    by_offset_.erase(offset);
    by_size_.erase({bytes, offset});
  }

  std::map<std::size_t, std::size_t> by_offset_;
  std::set<std::pair<std::size_t, std::size_t>> by_size_;
};

}  // namespace mgm::sim::detail
