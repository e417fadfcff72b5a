/// @file
/// @brief The caching pool's block records, their arena, and the pointer -> block map.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

/// The pool's hit path (the index, the records): always inlined, whatever the compiler's budget.
#if defined(__GNUC__)
#define MGM_HOT_INLINE [[gnu::always_inline]] inline
#else
#define MGM_HOT_INLINE inline
#endif

struct CUstream_st;  // cudaStream_t's pointee

namespace mgm::detail {

struct stream_slot;

enum class block_state : std::uint8_t { free, allocated, pending };

/// One block of a segment. Free blocks sit in a TLSF class list (`link`); allocated ones in a
/// chain of the pointer map (`hash_next`). Every field has one meaning.
///
/// Invariants: `prev`/`next` link address neighbours of one segment (`prev->addr + prev->size ==
/// addr`); a free block is in exactly one index, that of `owner` (its unmapped index when
/// `unmapped()`); an allocated block is in the pointer map; a pending one in neither; a block whose
/// merge is deferred is free, small, plain, and on its owner's deferred list.
struct block {
  std::uintptr_t addr{0};
  std::size_t size{0};
  block* prev{nullptr};  ///< address neighbour below, in the same segment (nullptr: segment start)
  block* next{nullptr};  ///< address neighbour above, in the same segment (nullptr: segment end)
  union {
    struct {
      block* prev_free;
      block* next_free;
    } link;  ///< state free: the TLSF class list
    struct {
      block* hash_next;  ///< the pointer map's chain
      const char* tag;
    } used;  ///< state allocated
    struct {
      block* next;            ///< the list of pending blocks it is in (stuck, held, orphans)
      CUstream_st* freed_on;  ///< an orphan: the stream that freed it
    } waiting;  ///< state pending
  } u{};
  stream_slot* owner{nullptr};   ///< the stream whose cache holds it, or that allocated it
  std::uint64_t free_epoch{0};   ///< the owner's free count when it was last freed into its cache
  union {
    std::size_t slack;          ///< state allocated: size - the bytes requested
    std::uint32_t index_class;  ///< state free: the class it is filed under (`tlsf_index`), set when inserted
  } sized{0};
  union {
    std::uint32_t idle_pos;    ///< an idle plain segment: its place in the idle index + 1 (0: not there)
    std::uint32_t huge_order;  ///< allocated in a huge range: the pool's huge allocations until it (modulo 2^32)
  } pos{0};
  block_state state{block_state::free};
  std::uint8_t small{0};          ///< from a small segment
  std::uint8_t extra_streams{0};  ///< used on other streams too (record_stream)
  /// bit 0: in an expandable segment; bit 1: no memory mapped behind it; bit 2: merge deferred;
  /// bit 3: in a huge range (`pool_options::huge_request_bytes`)
  std::uint8_t vm{0};

  [[nodiscard]] bool whole_segment() const noexcept { return prev == nullptr && next == nullptr; }
  [[nodiscard]] bool expandable() const noexcept { return (vm & 1U) != 0; }
  [[nodiscard]] bool unmapped() const noexcept { return (vm & 2U) != 0; }
  [[nodiscard]] bool huge() const noexcept { return (vm & 8U) != 0; }
  void set_unmapped(bool value) noexcept { vm = static_cast<std::uint8_t>(value ? (vm | 2U) : (vm & ~2U)); }
  /// Free, in its owner's index unmerged with its free neighbours, and on the owner's deferred list
  /// (`stream_slot::deferred`): the merge waits for the list's next coalescing.
  [[nodiscard]] bool merge_deferred() const noexcept { return (vm & 4U) != 0; }
};
static_assert(sizeof(block) <= 80, "a block record stays small: 80 bytes, from slabs");

/// Block records from slabs, recycled through a free list: no allocation in steady state.
class block_arena {
 public:
  /// Makes sure that `n` more records can be made without allocating.
  MGM_HOT_INLINE void reserve(std::size_t n) {
    if (free_ == nullptr) [[unlikely]] grow();
    if (n > 1) {  // off the hit path: count the free list
      std::size_t have = 0;
      for (const block* b = free_; b != nullptr && have < n; b = b->next) ++have;
      if (have < n) grow();
    }
  }
  block* make() {
    if (free_ == nullptr) grow();
    block* b = free_;
    free_ = b->next;
    *b = block{};
    ++live_;
    return b;
  }
  void recycle(block* b) noexcept {
    b->vm = 0;  // a dead record is on no deferred list (the list may still name it)
    b->next = free_;
    free_ = b;
    --live_;
  }
  [[nodiscard]] std::size_t live() const noexcept { return live_; }

 private:
  void grow() {
    constexpr std::size_t n = 256;
    slabs_.push_back(std::make_unique<block[]>(n));
    block* slab = slabs_.back().get();
    for (std::size_t i = 0; i < n; ++i) {
      slab[i].next = free_;
      free_ = &slab[i];
    }
  }
  std::vector<std::unique_ptr<block[]>> slabs_;
  block* free_{nullptr};
  std::size_t live_{0};
};

/// Allocated blocks by address: a power-of-two bucket array chained through the records
/// themselves, so a lookup is a multiply, a shift and (almost always) one compare. It grows
/// when the number of live blocks passes the bucket count: only when live blocks reach a new high.
class block_map {
 public:
  block_map() : buckets_(1024, nullptr), shift_(64 - 10) {}

  /// Makes room for one more block, so that the next `insert` cannot fail.
  void reserve_one() {
    if (count_ + 1 > buckets_.size()) grow();
  }
  void insert(block* b) noexcept {  // after reserve_one()
    ++count_;
    block*& head = buckets_[slot(b->addr)];
    b->u.used.hash_next = head;
    head = b;
  }
  /// Removes and returns the block at `addr`, or nullptr.
  block* take(std::uintptr_t addr) noexcept {
    block** link = &buckets_[slot(addr)];
    while (*link != nullptr) {
      block* b = *link;
      if (b->addr == addr) {
        *link = b->u.used.hash_next;
        --count_;
        return b;
      }
      link = &b->u.used.hash_next;
    }
    return nullptr;
  }
  [[nodiscard]] block* find(std::uintptr_t addr) const noexcept {
    for (block* b = buckets_[slot(addr)]; b != nullptr; b = b->u.used.hash_next) {
      if (b->addr == addr) return b;
    }
    return nullptr;
  }
  [[nodiscard]] std::size_t size() const noexcept { return count_; }

 private:
  [[nodiscard]] std::size_t slot(std::uintptr_t addr) const noexcept {
    return static_cast<std::size_t>(((addr >> 8) * 0x9E3779B97F4A7C15ULL) >> shift_);
  }
  void grow() {
    std::vector<block*> old(buckets_.size() * 2, nullptr);
    old.swap(buckets_);
    --shift_;
    for (block* head : old) {
      while (head != nullptr) {
        block* next = head->u.used.hash_next;
        block*& dst = buckets_[slot(head->addr)];
        head->u.used.hash_next = dst;
        dst = head;
        head = next;
      }
    }
  }
  std::vector<block*> buckets_;
  unsigned shift_;
  std::size_t count_{0};
};

}  // namespace mgm::detail
