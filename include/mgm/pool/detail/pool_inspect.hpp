/// @file
/// @brief The caching pool's walks over all its parts: snapshots, the invariant check, the
/// out-of-memory figures, stream retirement, private pools' release, and the end.
///
/// Each is a static member of `pool_inspect`, a friend of `caching_pool`, called with the pool's
/// lock held (except `destroy`).
#pragma once

#include <mgm/bytes.hpp>
#include <mgm/concepts.hpp>
#include <mgm/error.hpp>
#include <mgm/log.hpp>
#include <mgm/pool/detail/block.hpp>
#include <mgm/pool/detail/capture_pools.hpp>
#include <mgm/pool/detail/pool_mutex.hpp>
#include <mgm/pool/oom_info.hpp>
#include <mgm/pool/pool_options.hpp>
#include <mgm/pool/pool_snapshot.hpp>
#include <mgm/pool/pool_statistics.hpp>
#include <mgm/pool_observer.hpp>

#include <algorithm>
#include <mutex>  // std::unique_lock
#include <string>
#include <vector>

namespace mgm::detail {

struct pool_inspect {
  /// Calls `fn` on every segment head, without allocating.
  template <class Pool, class Fn>
  static void for_each_head(const Pool& p, Fn&& fn) {
    for (const block* h : p.plain_.heads()) fn(h);
    p.captures_.for_each([&](const private_pool& pp) {
      for (const block* h : pp.segments) fn(h);
    });
    for (const auto& e : p.expand_.segments()) fn(e->head);
  }

  /// Every slot: shared, retired, private.
  template <class Pool, class Fn>
  static void for_each_slot(const Pool& p, Fn&& fn) {
    p.cache_.slots().for_each(fn);
    for (const auto& s : p.cache_.retired()) fn(*s);
    p.captures_.for_each([&](const private_pool& pp) { pp.slots.for_each(fn); });
  }

  template <class Pool>
  static void init(Pool& p) {
    p.round_mask_ = p.space_.options().round_bytes - 1;
    const std::size_t threshold = p.space_.options().release_threshold_bytes;
    p.margin_ = threshold / 8;
    p.trim_at_ = threshold > pool_options::unlimited - p.margin_ ? pool_options::unlimited : threshold + p.margin_;
    p.registration_ = mgm::pool_registration{p.device_, mgm::simulated_ops<typename Pool::stream_ops_type>, [&p] {
      const pool_statistics s = p.statistics();
      mgm::pool_figures f;
      if constexpr (Pool::statistics_enabled) f.allocated = static_cast<std::uint64_t>(s.allocated_bytes.current);
      f.reserved = static_cast<std::uint64_t>(s.reserved_bytes.current);
      return f;
    }};
  }

  template <class Pool>
  static pool_statistics statistics(const Pool& p) {
    const auto& space = p.space_;
    pool_statistics s = space.stats;
    s.reserved_bytes.current = static_cast<std::int64_t>(space.reserved);
    if constexpr (Pool::statistics_enabled) {
      s.active_bytes.current = s.allocated_bytes.current + static_cast<std::int64_t>(space.pending);
      s.active_bytes.peak = std::max(s.active_bytes.peak, s.allocated_bytes.peak);
      s.active_bytes.total = s.allocated_bytes.total;
      s.cache_hits = s.allocations.total - s.cache_misses;
      const auto inactive = static_cast<std::int64_t>(space.reserved - space.pending - space.idle) -
                            s.allocated_bytes.current;  // exact now; peak and total as of its rises
      s.inactive_split_bytes.current = inactive;
      s.inactive_split_bytes.peak = std::max(s.inactive_split_bytes.peak, inactive);
    }
    return s;
  }

  template <class Pool>
  static pool_snapshot snapshot(const Pool& p) {
    pool_snapshot snap;
    snap.device = p.device_.value();
    for_each_head(p, [&](const block* head) {
      segment_snapshot seg{head->addr, 0, head->small != 0, head->expandable(), {}};
      for (const block* b = head; b != nullptr; b = b->next) {
        block_snapshot bs;
        bs.address = b->addr;
        bs.size = b->size;
        bs.state = b->unmapped()                          ? block_snapshot::state_type::unmapped
                   : b->state == block_state::free        ? block_snapshot::state_type::free
                   : b->state == block_state::allocated ? block_snapshot::state_type::allocated
                                                          : block_snapshot::state_type::pending;
        bs.requested = b->state == block_state::allocated ? b->size - b->sized.slack : 0;
        bs.stream = reinterpret_cast<std::uintptr_t>(b->owner != nullptr ? b->owner->stream : nullptr);
        if (b->state == block_state::allocated && b->u.used.tag != nullptr) bs.tag = b->u.used.tag;
        seg.size += b->size;
        seg.blocks.push_back(std::move(bs));
      }
      snap.segments.push_back(std::move(seg));
    });
    std::sort(snap.segments.begin(), snap.segments.end(),
              [](const segment_snapshot& a, const segment_snapshot& b) { return a.address < b.address; });
    return snap;
  }

  template <class Pool>
  static oom_info describe_oom(const Pool& p, std::size_t size) {
    oom_info info;
    info.device = p.device_;
    info.requested_bytes = size;
    info.max_split_bytes = p.space_.options().max_split_bytes;
    info.expandable = p.expand_.grows(size, p.space_.options());
    info.address_space_exhausted = p.expand_.address_space_refused();
    std::size_t largest = 0;
    std::size_t free_bytes = 0;
    for_each_slot(p, [&](const stream_slot& slot) {
      for (const tlsf_index* index : {&slot.small, &slot.large, &slot.huge}) {
        free_bytes += index->bytes();
        if (const block* b = index->largest(); b != nullptr) largest = std::max(largest, b->size);
      }
    });
    info.reserved_bytes = p.space_.reserved;
    info.idle_cached_bytes = free_bytes + p.space_.pending;
    info.allocated_bytes = p.space_.reserved - info.idle_cached_bytes;
    info.largest_free_bytes = largest;
    info.limits = p.limits_;
    using U = typename Pool::upstream_type;
    if constexpr (requires(const U& u) { { u.free_bytes() } -> std::convertible_to<std::size_t>; }) {
      try {
        info.device_free_bytes = p.upstream_.free_bytes();
      } catch (...) {  // a figure for the message only
      }
    }
    return info;
  }

  /// @throws mgm::logic_error naming the first broken invariant. Call it while no other call of
  /// the pool is under way (a call that released the lock holds busy blocks).
  template <class Pool>
  static void check_invariants(const Pool& p) {
    const auto fail = [](const std::string& what) { throw logic_error{"caching_pool invariant broken: " + what}; };
    const auto& space = p.space_;
    std::size_t mapped = 0, allocated = 0, free_bytes = 0, unmapped = 0, pending = 0, idle = 0;
    std::size_t allocated_count = 0, idle_plain = 0;
    for_each_head(p, [&](const block* head) {
      if (head->prev != nullptr) fail("a segment head has a neighbour below");
      for (const block* b = head; b != nullptr; b = b->next) {
        if (b->next != nullptr && (b->next->prev != b || b->addr + b->size != b->next->addr)) {
          fail("address neighbours are not linked end to start");
        }
        if (b->owner == nullptr) fail("a block has no owning slot");
        if (b->unmapped()) {
          if (b->state != block_state::free) fail("an unmapped range is not free");
          if (b->next != nullptr && b->next->unmapped()) {
            fail("two unmapped neighbours did not merge (a request needing both would reserve a new range)");
          }
          unmapped += b->size;
          continue;
        }
        mapped += b->size;
        if (b->state == block_state::allocated) {
          allocated += b->size;
          ++allocated_count;
          if (space.map.find(b->addr) != b) fail("an allocated block is not in the block map");
        } else if (b->state == block_state::pending) {
          pending += b->size;
        } else {
          free_bytes += b->size;
          if (b->whole_segment()) {
            idle += b->size;
            if (space.indexes_idle() && !b->expandable() && b->owner->capture_pool == 0) {
              ++idle_plain;
              const auto& list = space.idle_segments();
              if (b->pos.idle_pos == 0 || b->pos.idle_pos > list.size() || list[b->pos.idle_pos - 1] != b) {
                fail("an idle plain segment is not in the idle index");
              }
            }
          }
          if (const block* n = b->next; n != nullptr && n->state == block_state::free && !n->unmapped() &&
                                        n->owner == b->owner && !b->merge_deferred() && !n->merge_deferred()) {
            fail("two free neighbours of the same stream did not merge");
          }
        }
      }
    });
    std::size_t indexed = 0, indexed_unmapped = 0;
    for_each_slot(p, [&](const stream_slot& slot) {
      for (const tlsf_index* index : {&slot.small, &slot.large, &slot.huge}) {
        index->for_each([&](const block* b) {
          if (b->state != block_state::free || b->unmapped() || b->owner != &slot) {
            fail("a slot's index holds a block that is not its free mapped block");
          }
          const auto [f, s] = tlsf_index::class_of(b->size >> 8);
          if (b->sized.index_class != f * tlsf_index::classes_per_range + s) {
            fail("a free block's size changed while it was in its index (its class is not its size's)");
          }
          if (b->merge_deferred()) {
            const auto listed = slot.deferred.begin() + slot.deferred_count;
            if (b->small == 0 || b->expandable() || b->whole_segment() || slot.capture_pool != 0 ||
                std::find(slot.deferred.begin(), listed, b) == listed) {
              fail("a block whose merge is deferred is not a small plain block on its slot's deferred list");
            }
          }
        });
        indexed += index->bytes();
      }
      for (const tlsf_index* index : {&slot.unmapped_small, &slot.unmapped_large, &slot.unmapped_huge}) {
        index->for_each([&](const block* b) {
          if (b->state != block_state::free || !b->unmapped() || b->owner != &slot) {
            fail("a slot's unmapped index holds a block that is not its unmapped range");
          }
        });
        indexed_unmapped += index->bytes();
      }
    });
    if (mapped != space.reserved) fail("reserved != the sum of mapped block sizes");
    if (space.reserved != allocated + pending + free_bytes) fail("reserved != allocated + pending + free");
    if (indexed != free_bytes) fail("the indices and the free blocks disagree");
    if (indexed_unmapped != unmapped) fail("the unmapped indices and the unmapped ranges disagree");
    if (pending != space.pending) fail("pending bytes != the sum of pending blocks");
    if (idle != space.idle) fail("idle bytes != the sum of free whole segments");
    if (idle_plain != space.idle_segments().size()) fail("the idle index holds blocks that are not idle segments");
    if (allocated_count != space.map.size()) fail("the block map and the allocated blocks disagree");
    if constexpr (Pool::statistics_enabled) {  // (a pool without statistics counts none)
      if (static_cast<std::size_t>(space.stats.reserved_bytes.current) != space.reserved) {
        fail("the reserved statistic != reserved");
      }
      if (static_cast<std::size_t>(space.stats.allocated_bytes.current) != allocated) {
        fail("the allocated statistic != the sum of allocated blocks");
      }
    }
  }

  /// `pool_options::check_invariants` in a build without NDEBUG (the lock held). A free cannot
  /// throw: a broken invariant there terminates, with its name logged.
  template <class Pool>
  static void debug_check(const Pool& p) {
#ifndef NDEBUG
    if (p.space_.options().check_invariants) [[unlikely]] check_invariants(p);
#else
    (void)p;
#endif
  }

  /// A block freed inside a capture when no private pool could be made to hold it: pending for
  /// good (its memory returns at the end), never reused: the graph may still replay into it.
  template <class Pool>
  static void quarantine(Pool& p, block* b) noexcept {
    make_pending(p, b);
    b->u.waiting.next = p.quarantine_;
    p.quarantine_ = b;
    log(log_level::error, "caching_pool: no memory to hold a block freed during a capture; it stays reserved");
  }
  template <class Pool>
  static void make_pending(Pool& p, block* b) noexcept {
    b->state = block_state::pending;
    b->u.waiting = {nullptr, nullptr};
    p.space_.pending += b->size;
  }

  /// A private pool no capture uses any more: held blocks rejoin the shared cache, idle segments
  /// go back to the upstream (a synchronous free: the device's work is done with them first).
  template <class Pool>
  static void release_private(Pool& p, std::unique_lock<pool_mutex>& lock, private_pool& pool) noexcept {
    std::vector<private_pool*> owners;  // other released pools its held blocks return to
    for (block* b = std::exchange(pool.held, nullptr); b != nullptr;) {
      block* next = b->u.waiting.next;
      if (b->owner->capture_pool != 0 && b->owner->capture_pool != pool.id) {
        private_pool* owner = p.captures_.find(b->owner->capture_pool);
        if (owner != nullptr && owner->released() && std::find(owners.begin(), owners.end(), owner) == owners.end()) {
          try {
            owners.push_back(owner);
          } catch (...) {  // it goes at the next release()
          }
        }
      }
      p.space_.pending -= b->size;
      if (b->extra_streams != 0) {
        p.pending_.free_used(b, *b->owner, p.space_, p.cache_.events(), p.ops_, p.device_);
      } else {
        b->free_epoch = b->owner->next_epoch();
        p.space_.insert_free(b);
      }
      b = next;
    }
    std::vector<block*> gone;
    try {
      gone.reserve(pool.segments.size());
    } catch (...) {
      return;  // tried again at the next free into the pool
    }
    // A segment all of whose blocks are free goes, whichever streams cache them: its free is
    // synchronous (cudaFree waits for the device), so no stream's work can still touch it.
    std::erase_if(pool.segments, [&](block* head) {
      for (const block* b = head; b != nullptr; b = b->next) {
        if (b->state != block_state::free) return false;
      }
      std::size_t total = 0;
      for (block* b = head; b != nullptr;) {
        block* next = b->next;
        p.space_.take_free(b);
        total += b->size;
        if (b != head) p.space_.arena.recycle(b);
        b = next;
      }
      head->size = total;
      head->next = nullptr;
      Pool::plain_type::forget_segment(p.space_, head);
      gone.push_back(head);
      return true;
    });
    lock.unlock();
    for (block* head : gone) {
      nvtx::unregister_heap(reinterpret_cast<void*>(head->addr));
      p.upstream_.deallocate(reinterpret_cast<void*>(head->addr), head->size, cuda_allocation_alignment);
    }
    lock.lock();
    for (block* head : gone) p.space_.arena.recycle(head);
    p.captures_.erase_if_empty(&pool);
    for (private_pool* owner : owners) release_private(p, lock, *owner);
  }

  template <class Pool>
  static void forget_stream(Pool& p, stream_ref stream);

  template <class Pool>
  static void destroy(Pool& p) noexcept {
    p.registration_.reset();  // first: the registry must not read a pool being torn down
    const std::size_t leaked = p.space_.map.size();
    p.pending_.drain(p.cache_.events(), p.ops_);
    Pool::plain_type::give_back_all(p.upstream_, p.plain_.heads());
    p.captures_.for_each([&](const private_pool& pp) { Pool::plain_type::give_back_all(p.upstream_, pp.segments); });
    // Unlike cudaFree, cuMemUnmap and cuMemRelease need not wait for work that still uses the
    // memory (PyTorch synchronises before unmapping for that reason), and a block freed on its
    // own stream may still be in use there. The device's work is waited for, never a stream's:
    // a stream the user destroyed before the pool must not be touched.
    if constexpr (stream_ops_can_synchronize_device<typename Pool::stream_ops_type>) {
      if (p.expand_.holds_mapped()) {
        try {
          p.ops_.synchronize_device(p.device_);
        } catch (const std::exception& e) {
          try {
            log(log_level::warning, "caching_pool on " + describe_device(p.device_) +
                                        ": could not wait for the device before unmapping its memory: " + e.what());
          } catch (...) {
          }
        }
      }
    }
    p.expand_.destroy();
    p.cache_.events().destroy_all(p.ops_);
    if (leaked != 0) {
      try {
        log(log_level::warning, "caching_pool on " + describe_device(p.device_) + ": destroyed with " +
                                    std::to_string(leaked) + " blocks still allocated; their memory was freed");
      } catch (...) {
      }
    }
  }

  [[noreturn]] static void throw_too_large(device_id d, std::size_t bytes) {
    throw out_of_memory{"caching_pool on " + describe_device(d) + ": a request of " + describe_bytes(bytes) +
                            " exceeds any device's memory",
                        bytes};
  }

  static void report_invalid_free(device_id d, void* ptr, std::size_t bytes) noexcept {
    refuse_deallocation([&] {
      return "caching_pool on " + describe_device(d) + ": deallocate(" + describe_address(ptr) + ", " +
             std::to_string(bytes) +
             ") of a pointer that is not a live allocation of this pool (never allocated here, or already freed); "
             "nothing was changed";
    });
  }
};

}  // namespace mgm::detail

