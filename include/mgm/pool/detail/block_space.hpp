/// @file
/// @brief The caching pool's blocks and their byte counts: records, the pointer map, merging, the
/// idle index, and the statistics they drive.
///
/// ## Invariants (checked by `caching_pool::check_invariants`)
/// - `reserved == Σ mapped segment bytes == Σ mapped block sizes`
/// - `reserved == allocated + pending + Σ free block sizes` (free: in a slot's mapped index)
/// - `idle == Σ sizes of free blocks that are a whole segment`
/// - the idle index holds exactly the free whole *plain* segments of the shared cache
/// - no two free mapped address neighbours have the same owner (they would have merged), unless
///   the merge of one of them is deferred (`insert_deferred`)
/// - the pointer map holds exactly the allocated blocks
#pragma once

#include <mgm/pool/detail/block.hpp>
#include <mgm/pool/detail/stream_cache.hpp>
#include <mgm/pool/pool_options.hpp>
#include <mgm/pool/pool_statistics.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mgm::detail {

/// What a growth may take under the pool's limits (`pool_limits`), worked out under the lock.
struct growth_budget {
  std::size_t room{pool_options::unlimited};      ///< the most bytes it may map or allocate
  std::size_t capacity{pool_options::unlimited};  ///< what the limits leave of the device (margins, chunks)
};

template <bool Statistics>
class block_space {
 public:
  explicit block_space(pool_options options)
      : options_{std::move(options)}, index_idle_{options_.release_threshold_bytes != pool_options::unlimited} {}

  block_arena arena;
  block_map map;
  pool_statistics stats;
  std::size_t reserved{0};       ///< mapped bytes of every segment
  std::size_t idle{0};           ///< free blocks that are a whole segment
  std::size_t pending{0};        ///< freed blocks waiting on events (record_stream, captures)
  std::size_t growing{0};        ///< bytes being mapped or allocated without the lock (not yet reserved)

  /// What `free` bytes of the device leave once the growths under way have taken theirs.
  [[nodiscard]] std::size_t unclaimed(std::size_t free) const noexcept { return free > growing ? free - growing : 0; }

  [[nodiscard]] const pool_options& options() const noexcept { return options_; }

  /// Puts a free block into its owner's index, merged with free neighbours of the same owner.
  /// Inlined: it is half of every free and of every split on the hit path.
  MGM_HOT_INLINE block* insert_free(block* b) noexcept {
    b->state = block_state::free;
    tlsf_index& index = b->owner->index_of(*b);
    // Loops, not ifs: deferred merges leave runs of free neighbours (at most one on each side otherwise).
    for (block* p = b->prev; p != nullptr && p->state == block_state::free && p->owner == b->owner && !p->unmapped();
         p = b->prev) {
      index.remove(p);
      p->size += b->size;
      p->next = b->next;
      if (b->next != nullptr) b->next->prev = p;
      // The later free: an event covering it covers both (a deferred merge may join a later one).
      if (b->free_epoch > p->free_epoch) p->free_epoch = b->free_epoch;
      arena.recycle(b);
      b = p;
    }
    for (block* n = b->next; n != nullptr && n->state == block_state::free && n->owner == b->owner && !n->unmapped();
         n = b->next) {
      index.remove(n);
      b->size += n->size;
      b->next = n->next;
      if (n->next != nullptr) n->next->prev = b;
      if (n->free_epoch > b->free_epoch) b->free_epoch = n->free_epoch;
      arena.recycle(n);
    }
    b->vm &= ~4U;  // merged with every free neighbour: a deferred block that took in a later free is done
    if (b->whole_segment()) [[unlikely]] become_idle(b);
    index.insert(b);
    return b;
  }

  /// A small plain block freed on its own stream's hit path: into its owner's index unmerged, on
  /// the owner's deferred list (coalesced first when full). A later request of its size takes it
  /// whole. A whole segment has no neighbour to merge with: it is inserted as usual (and idle).
  MGM_HOT_INLINE block* insert_deferred(block* b) noexcept {
    if (b->whole_segment()) [[unlikely]] return insert_free(b);
    stream_slot& s = *b->owner;
    if (s.deferred_count == stream_slot::deferred_capacity) [[unlikely]] coalesce_deferred(s);
    b->state = block_state::free;
    b->vm = 4U;  // plain and mapped (the caller checked vm == 0): now deferred too
    // A block taken and freed again at once is on the list already (its entry is the last).
    if (s.deferred_count == 0 || s.deferred[s.deferred_count - 1] != b) s.deferred[s.deferred_count++] = b;
    s.small.insert(b);
    return b;
  }

  /// Merges every deferred block of `s` with its free neighbours, as its free would have.
  void coalesce_deferred(stream_slot& s) noexcept {
    for (std::uint32_t i = 0; i < s.deferred_count; ++i) {
      block* b = s.deferred[i];
      // Taken, or merged into a neighbour, since; or a recycled record, deferred now in another slot.
      if (!b->merge_deferred() || b->owner != &s) continue;
      take_free(b);
      insert_free(b);
    }
    s.deferred_count = 0;
    if constexpr (Statistics) inactive_split_rose(0, static_cast<std::size_t>(stats.allocated_bytes.current));
  }
  template <class Slots>
  void coalesce_all(Slots& slots) noexcept {
    slots.for_each([&](stream_slot& s) {
      if (s.deferred_count != 0) coalesce_deferred(s);
    });
  }

  /// Takes a free block out of its owner's index (and the idle figures).
  MGM_HOT_INLINE void take_free(block* b) noexcept {
    b->vm &= ~4U;  // no longer deferred: its list entry is skipped
    b->owner->index_of(*b).remove(b);
    if (b->whole_segment()) [[unlikely]] leave_idle(b);
  }

  /// Puts a range without memory behind it into its owner's unmapped index, merged with unmapped
  /// neighbours.
  void insert_unmapped(block* b) noexcept {
    b->state = block_state::free;
    b->set_unmapped(true);
    tlsf_index& index = b->owner->unmapped_of(*b);
    if (block* p = b->prev; p != nullptr && p->state == block_state::free && p->unmapped()) {
      index.remove(p);
      p->size += b->size;
      p->next = b->next;
      if (b->next != nullptr) b->next->prev = p;
      arena.recycle(b);
      b = p;
    }
    if (block* n = b->next; n != nullptr && n->state == block_state::free && n->unmapped()) {
      index.remove(n);
      b->size += n->size;
      b->next = n->next;
      if (n->next != nullptr) n->next->prev = b;
      arena.recycle(n);
    }
    index.insert(b);
  }

  /// Splits `b` at `offset`; returns the upper part (same state and flags, not in any index).
  block* split_off(block* b, std::size_t offset) noexcept {  // after arena.reserve(1)
    return split_off(b, offset, arena.make());
  }
  /// The same, the upper part's record `r` made beforehand (`arena.make()`).
  block* split_off(block* b, std::size_t offset, block* r) noexcept {
    r->addr = b->addr + offset;
    r->size = b->size - offset;
    r->prev = b;
    r->next = b->next;
    if (b->next != nullptr) b->next->prev = r;
    b->next = r;
    r->small = b->small;
    r->vm = b->vm;
    r->owner = b->owner;
    r->free_epoch = b->free_epoch;
    r->state = b->state;
    b->size = offset;
    return r;
  }

  /// Out of every index while the lock is released (growing, unmapping): no free-list links, no tag.
  static void mark_busy(block* b) noexcept {
    b->state = block_state::pending;
    b->u.waiting = {nullptr, nullptr};
  }

  // ---- the idle index: whole free plain segments of the shared cache, kept when a release
  // threshold is set (its trims then need no walk; without one, a release walks the segments) ----
  [[nodiscard]] bool indexes_idle() const noexcept { return index_idle_; }

  /// Room for one more segment in the idle index, so that `become_idle` never allocates.
  void reserve_idle(std::size_t segments) { idle_segments_.reserve(segments); }
  [[nodiscard]] const std::vector<block*>& idle_segments() const noexcept { return idle_segments_; }

  /// `inactive_split = free - idle` rose by `by`: its total and peak (its current value is
  /// computed when asked). Called where it rises on the hit path (an idle segment split, a free
  /// that leaves its segment partly used) and after the slow paths.
  void inactive_split_rose(std::size_t by, std::size_t allocated) noexcept {
    if constexpr (Statistics) {
      stat& s = stats.inactive_split_bytes;
      s.total += by;
      const auto now = static_cast<std::int64_t>(reserved - allocated - pending - idle);
      if (now > s.peak) s.peak = now;
    }
  }

 private:
  MGM_HOT_INLINE void become_idle(block* b) noexcept {
    idle += b->size;
    if (index_idle_ && !b->expandable() && b->owner->capture_pool == 0) {
      idle_segments_.push_back(b);  // capacity reserved when the segment was made
      b->pos.idle_pos = static_cast<std::uint32_t>(idle_segments_.size());
    }
  }
  MGM_HOT_INLINE void leave_idle(block* b) noexcept {
    idle -= b->size;
    if (!b->expandable() && b->pos.idle_pos != 0) {
      block* last = idle_segments_.back();
      idle_segments_[b->pos.idle_pos - 1] = last;
      last->pos.idle_pos = b->pos.idle_pos;
      idle_segments_.pop_back();
      b->pos.idle_pos = 0;
    }
  }

  pool_options options_;
  bool index_idle_;
  std::vector<block*> idle_segments_;
};

}  // namespace mgm::detail
