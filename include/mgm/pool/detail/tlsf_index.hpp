/// @file
/// @brief The caching pool's free-block index: two-level segregated fit with bitmaps.
#pragma once

#include <mgm/pool/detail/block.hpp>

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>


namespace mgm::detail {

/// Free blocks by size class, found in O(1).
///
/// Sizes are counted in 256-byte units `u`. Below 32 units every size has a class of its own;
/// above, the power-of-two range [2^m, 2^(m+1)) of `u` is cut into 32 equal classes, so a class
/// spans at most 1/32 of its sizes (at most ~3 % waste from rounding a request up to a class).
/// `first_bits_` marks the non-empty first-level ranges, `second_bits_[f]` the non-empty classes
/// of range f: a search is two bit scans.
///
/// A block records the class it is filed under (`block::sized.index_class`), so that its removal
/// computes none.
///
/// `find` looks at the head of the request's own class first (an exact-size block freed earlier
/// is found again), then takes the first block of the first non-empty class whose every block
/// fits; `scan` walks the request's own class (for the slow path, before going upstream).
class tlsf_index {
 public:
  static constexpr unsigned second_bits = 5;
  static constexpr unsigned classes_per_range = 1U << second_bits;
  static constexpr unsigned ranges = 54;  // up to 2^56 units of 256 B

  MGM_HOT_INLINE void insert(block* b) noexcept {
    const auto [f, s] = class_of(b->size >> 8);
    b->sized.index_class = f * classes_per_range + s;  // `remove` reads it: no second class computation
    block*& head = heads_[f][s];
    b->u.link.prev_free = nullptr;
    b->u.link.next_free = head;
    if (head != nullptr) head->u.link.prev_free = b;
    head = b;
    first_bits_ |= std::uint64_t{1} << f;
    second_bits_[f] |= 1U << s;
    bytes_ += b->size;
  }

  MGM_HOT_INLINE void remove(block* b) noexcept {
    const unsigned f = b->sized.index_class / classes_per_range;
    const unsigned s = b->sized.index_class % classes_per_range;
    if (b->u.link.prev_free != nullptr) {
      b->u.link.prev_free->u.link.next_free = b->u.link.next_free;
    } else {
      heads_[f][s] = b->u.link.next_free;
      if (heads_[f][s] == nullptr) {
        second_bits_[f] &= ~(1U << s);
        if (second_bits_[f] == 0) first_bits_ &= ~(std::uint64_t{1} << f);
      }
    }
    if (b->u.link.next_free != nullptr) b->u.link.next_free->u.link.prev_free = b->u.link.prev_free;
    bytes_ -= b->size;
  }

  /// A free block of at least `size` bytes (a multiple of 256), or nullptr. O(1).
  [[nodiscard]] MGM_HOT_INLINE block* find(std::size_t size) const noexcept {
    const std::size_t u = size >> 8;
    const auto [f, s] = class_of(u);
    if (block* head = heads_[f][s]; head != nullptr && head->size >= size) return head;
    // Round up to the first class all of whose blocks fit.
    std::size_t up = u;
    if (u >= classes_per_range) up += (std::size_t{1} << (std::bit_width(u) - 1 - second_bits)) - 1;
    auto [uf, us] = class_of(up);
    if (uf >= ranges) return nullptr;
    std::uint32_t second = us < classes_per_range ? second_bits_[uf] & (~0U << us) : 0;
    if (second == 0) {
      const std::uint64_t first = uf + 1 < 64 ? first_bits_ & (~std::uint64_t{0} << (uf + 1)) : 0;
      if (first == 0) return nullptr;
      uf = static_cast<unsigned>(std::countr_zero(first));
      second = second_bits_[uf];
    }
    return heads_[uf][static_cast<unsigned>(std::countr_zero(second))];
  }

  /// The smallest block of the request's own class that fits, or nullptr. O(class length).
  [[nodiscard]] block* scan(std::size_t size) const noexcept {
    const auto [f, s] = class_of(size >> 8);
    block* best = nullptr;
    for (block* b = heads_[f][s]; b != nullptr; b = b->u.link.next_free) {
      if (b->size >= size && (best == nullptr || b->size < best->size)) best = b;
    }
    return best;
  }

  /// The largest free block, or nullptr (diagnostics).
  [[nodiscard]] block* largest() const noexcept {
    if (first_bits_ == 0) return nullptr;
    const unsigned f = 63U - static_cast<unsigned>(std::countl_zero(first_bits_));
    const unsigned s = 31U - static_cast<unsigned>(std::countl_zero(second_bits_[f]));
    block* best = nullptr;
    for (block* b = heads_[f][s]; b != nullptr; b = b->u.link.next_free) {
      if (best == nullptr || b->size > best->size) best = b;
    }
    return best;
  }

  /// Calls `fn` on every block (it may remove the block it is given). Visits non-empty classes only.
  template <class Fn>
  void for_each(Fn&& fn) const {
    for (std::uint64_t first = first_bits_; first != 0; first &= first - 1) {
      const auto f = static_cast<unsigned>(std::countr_zero(first));
      for (std::uint32_t second = second_bits_[f]; second != 0; second &= second - 1) {
        const auto s = static_cast<unsigned>(std::countr_zero(second));
        for (block* b = heads_[f][s]; b != nullptr;) {
          block* next = b->u.link.next_free;
          fn(b);
          b = next;
        }
      }
    }
  }

  [[nodiscard]] bool empty() const noexcept { return first_bits_ == 0; }
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }

  struct class_id {
    unsigned first;
    unsigned second;
  };
  /// The class of a size of `u` units.
  [[nodiscard]] MGM_HOT_INLINE static constexpr class_id class_of(std::size_t u) noexcept {
    if (u < classes_per_range) return {0, static_cast<unsigned>(u)};
    const unsigned m = static_cast<unsigned>(std::bit_width(u)) - 1;  // u in [2^m, 2^(m+1))
    return {m - second_bits + 1, static_cast<unsigned>((u >> (m - second_bits)) & (classes_per_range - 1))};
  }

 private:
  std::uint64_t first_bits_{0};
  std::array<std::uint32_t, ranges> second_bits_{};
  std::array<std::array<block*, classes_per_range>, ranges> heads_{};
  std::size_t bytes_{0};
};

}  // namespace mgm::detail
