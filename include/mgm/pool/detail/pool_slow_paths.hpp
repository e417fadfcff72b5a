/// @file
/// @brief The caching pool's slow paths: a miss (steal, new memory through the out-of-memory
/// pipeline), an allocation inside a graph capture, the unusual frees (another stream, other
/// uses, a private pool, inside a capture), and giving memory back.
///
/// Static members of `pool_slow_paths`, a friend of `caching_pool`, called with its lock held.
#pragma once

#include <mgm/log.hpp>
#include <mgm/pool/detail/block_space.hpp>
#include <mgm/pool/detail/capture_pools.hpp>
#include <mgm/pool/detail/mapping_policy.hpp>
#include <mgm/pool/detail/pool_inspect.hpp>
#include <mgm/pool/detail/pool_mutex.hpp>
#include <mgm/pool/detail/segment_source.hpp>
#include <mgm/pool/detail/stream_cache.hpp>
#include <mgm/stream.hpp>

#include <cstddef>
#include <cstdint>
#include <mutex>  // std::unique_lock
#include <string>
#include <type_traits>
#include <vector>

namespace mgm::detail {

struct pool_slow_paths {
  template <class Pool>
  static block* allocate_slow(Pool& p, std::unique_lock<pool_mutex>& lock, stream_slot& slot, std::size_t size,
                               bool small, stream_ref stream) {
    p.cache_.slots().prepare();  // a spare slot for a free on a new stream, if an earlier one failed
    // Deferred merges first: a small request may fit in what they join (found by `find` again), and
    // a stream that steals sees merged blocks. Then the request's own class, walked whole.
    if (small) p.space_.coalesce_all(p.cache_.slots());
    const bool huge = size >= p.huge_bytes_;
    if (huge) {
      if (block* b = take_huge(p, slot, size)) {
        if (b->huge()) b->pos.huge_order = ++p.huge_allocs_;
        return b;
      }
    } else {
      tlsf_index& index = slot.index(small);
      block* own = small ? index.find(size) : nullptr;
      if (own == nullptr || !p.acceptable(own, size)) own = index.scan(size);
      if (own != nullptr && p.acceptable(own, size)) {
        p.prepare();
        p.space_.take_free(own);
        return own;
      }
    }
    const auto accept = [&](const block* b) { return p.acceptable(b, size); };
    block* stolen = huge ? p.cache_.steal(p.space_, slot, size, false, stream, accept, true) : nullptr;
    if (stolen == nullptr) stolen = p.cache_.steal(p.space_, slot, size, small, stream, accept);
    if (stolen != nullptr) {
      if constexpr (Pool::statistics_enabled) ++p.space_.stats.stream_steals;
      p.prepare_or_put_back(stolen);
      if (stolen->huge()) stolen->pos.huge_order = ++p.huge_allocs_;
      return stolen;
    }
    // Small requests keep plain segments (2 MiB, 4 MiB on a large device: `plain_segment_size`):
    // released whole when idle, they fragment less than small blocks packed into a shared range
    // whose granules they pin. Shareable memory is all mapped (a plain segment could be neither
    // exported nor registered with NCCL).
    const bool grow = p.expand_.grows(size, p.space_.options());
    block* b = with_oom_retries<Pool::statistics_enabled>(
        lock, p.space_.stats, p.handler_, size, false,
        [&](bool minimal) -> block* {
          const auto budget = [&] { return growth_limits(p); };
          // Under pressure (the limits or the upstream refused a growth), the other pool's
          // cached blocks: first once a growth was refused (a refused growth is a driver call,
          // and a pool at its limit once is there again every step), else after the refusal,
          // before the idle memory goes back.
          const bool pressed = p.pressed_;
          if (pressed) {
            if (block* other = from_other_pool(p, slot, size, !small, stream)) return other;
          }
          block* got = nullptr;
          if (grow) {
            got = p.expand_.try_grow(lock, p.upstream_, p.space_, slot, size, small, budget, minimal, huge);
          } else if (const std::size_t seg = plain_segment_size(p, size, small, minimal); seg <= budget().room) {
            got = p.plain_.take(lock, p.upstream_, p.ops_, p.space_, p.plain_.heads(), slot, seg, small, stream, false);
          }
          if (got == nullptr) p.pressed_ = true;
          return got != nullptr || pressed ? got : from_other_pool(p, slot, size, !small, stream);
        },
        [&] { reclaim(p, lock); }, [&] { return pool_inspect::describe_oom(p, size); });
    if constexpr (Pool::statistics_enabled) ++p.space_.stats.cache_misses;
    p.prepare_or_put_back(b);
    if (b->huge()) b->pos.huge_order = ++p.huge_allocs_;
    return b;
  }

  /// A huge request (`pool_options::huge_request_bytes`) from `slot`'s own cache: a free block of
  /// its huge range, else one of its large range (before the huge range grows); nullptr when
  /// neither has one that fits. In the huge range the request takes one end of the free block:
  /// - the end away from its *predecessor*, a live block of its size allocated before the last
  ///   free of a huge block (a step's logits are allocated while the previous step's live:
  ///   beside them, the new ones would cut in two the space that the blocks freed with the old
  ///   ones join);
  /// - else the end beside the younger live neighbour (the blocks of one phase are packed
  ///   together and freed together; a free or absent neighbour counts as the oldest);
  /// - else the lower end.
  /// Measured with the unit test of the pattern (double-buffered logits beside the loss's fp32
  /// blocks) and `scripts/bench`: see expandable_source.hpp. A misjudged order (2^31 huge
  /// allocations apart) changes where a block goes, nothing else.
  template <class Pool>
  static block* take_huge(Pool& p, stream_slot& slot, std::size_t size) {
    block* h = slot.huge.find(size);
    if (h == nullptr) h = slot.huge.scan(size);
    if (h == nullptr) {
      block* l = slot.large.find(size);
      if (l == nullptr || !p.acceptable(l, size)) l = slot.large.scan(size);
      if (l == nullptr || !p.acceptable(l, size)) return nullptr;
      p.prepare();
      p.space_.take_free(l);
      return l;
    }
    p.prepare();  // the one record a split needs: the block taken is the request's size, hand_out splits nothing
    p.space_.take_free(h);
    if (h->size > size && place_high(p, h, size)) {
      block* top = p.space_.split_off(h, h->size - size);
      top->state = block_state::allocated;  // handed out next: h must not merge it back
      p.space_.insert_free(h);
      return top;
    }
    return h;
  }
  template <class Pool>
  static bool place_high(const Pool& p, const block* h, std::size_t size) noexcept {
    const auto live = [](const block* n) { return n != nullptr && n->state == block_state::allocated; };
    const auto before = [](std::uint32_t a, std::uint32_t b) { return static_cast<std::int32_t>(a - b) <= 0; };
    const auto predecessor = [&](const block* n) {
      return live(n) && n->size == size && before(n->pos.huge_order, p.huge_freed_at_);
    };
    const bool lo = predecessor(h->prev);
    const bool hi = predecessor(h->next);
    if (lo != hi) return lo;
    if (live(h->prev) && live(h->next)) return !before(h->next->pos.huge_order, h->prev->pos.huge_order);
    return live(h->next);
  }

  /// A new plain segment's size (`segment_source::segment_size`), but a small segment is twice
  /// `small_segment_bytes` where the pool may hold 1024 of those (a 4 GiB device, or limits) and
  /// is not near full (`mapping_policy::near_full`). Measured with `mgm replay` (6 iterations):
  /// with 2 MiB small segments the generated ResNet-152 took a second one in its second pass, a
  /// late driver call, on an 80 GiB device, and 4 MiB ones avoid it and halve the small segments'
  /// mallocs on most traces (InceptionV4 42 to 27, DenseNet-121 28 to 15); but at the smallest
  /// capacity that runs a trace (`--fit`, 3 iterations) 4 MiB ones cost fit: the generated
  /// ResNet-50 1.0084 to 1.0114 over its peak live bytes (2.6 GiB: 2 MiB segments there now) and
  /// the DTR transformer 1.0024 to 1.0026 (9.9 GiB: near full, 2 MiB ones again). ResNet-152 at
  /// 1.05 x its peak live (6 GiB) needs the 4 MiB ones too.
  template <class Pool>
  static std::size_t plain_segment_size(Pool& p, std::size_t size, bool small, bool minimal) {
    const std::size_t seg = Pool::plain_type::segment_size(p.space_.options(), size, small, minimal);
    if (!small || minimal) return seg;
    constexpr std::size_t large_device_share = 1024;
    using expand_type = std::remove_cvref_t<decltype(p.expand_)>;
    const growth_budget limits = growth_limits(p);
    const std::size_t cap = expand_type::capacity(p.upstream_, limits);
    const std::size_t twice = 2 * seg;
    if (cap == 0 || twice > cap / large_device_share) return seg;
    const std::size_t avail = expand_type::available(p.upstream_, p.space_, limits.room);
    return mapping_policy::near_full(cap, avail, twice) ? seg : twice;
  }

  /// Under pressure (the limits leave no room for a growth, or the upstream refused one), a
  /// request that its own pool cannot serve takes a cached block of the other pool (`small`: the small one) before asking for new memory.
  /// The small segments may hold many idle bytes in pieces too short for a small request while a
  /// large segment has room, and a large request of a few MiB fits in an idle small segment (the
  /// TreeLSTM trace at a capacity of 1.05 x its peak live ran out of memory with 23 MiB idle, most
  /// of it in a 20 MiB segment that four 1 MiB blocks kept). The block keeps its pool: freed, it
  /// merges back into its segment.
  template <class Pool>
  static block* from_other_pool(Pool& p, stream_slot& slot, std::size_t size, bool small, stream_ref stream) {
    if (small) p.space_.coalesce_all(p.cache_.slots());  // an idle small segment is one block again
    const auto accept = [&](const block* b) { return p.acceptable(b, size); };
    const auto look = [&](tlsf_index& index) -> block* {
      block* found = index.find(size);
      if (found == nullptr || !accept(found)) found = index.scan(size);
      if (found == nullptr || !accept(found)) return nullptr;
      p.space_.take_free(found);
      return found;
    };
    // A large request also takes a free block of the huge range: at its limit the pool can no
    // longer keep the huge requests' memory apart.
    if (block* found = look(slot.index(small))) return found;
    if (small) {
      if (block* found = look(slot.huge)) return found;
    }
    if (block* b = p.cache_.steal(p.space_, slot, size, small, stream, accept)) return b;
    return small ? p.cache_.steal(p.space_, slot, size, false, stream, accept, true) : nullptr;
  }

  /// An allocation on a capturing stream: from its capture's private pool, with no event query;
  /// a new segment is taken under the relaxed capture mode, with nothing given back to retry.
  template <class Pool>
  static void* allocate_captured(Pool& p, std::unique_lock<pool_mutex>& lock, std::size_t size, std::size_t bytes, stream_ref stream,
                          std::uint64_t capture) {
    private_pool& pool = p.captures_.for_capture(capture);
    stream_slot& slot = pool.slots.slot_for(stream.get());
    const bool small = size <= p.space_.options().small_request_bytes;
    block* b = slot.index(small).find(size);
    if (b == nullptr || !p.acceptable(b, size)) b = slot.index(small).scan(size);
    if (b != nullptr && p.acceptable(b, size)) {
      p.prepare();
      p.space_.take_free(b);
    } else {
      b = with_oom_retries<Pool::statistics_enabled>(
          lock, p.space_.stats, p.handler_, size, true,
          [&](bool) -> block* {
            const std::size_t seg = Pool::plain_type::segment_size(p.space_.options(), size, small, false);
            if (seg > growth_limits(p).room) return nullptr;
            return p.plain_.take(lock, p.upstream_, p.ops_, p.space_, pool.segments, slot, seg, small, stream, true);
          },
          [] {}, [&] { return pool_inspect::describe_oom(p, size); });
      if constexpr (Pool::statistics_enabled) ++p.space_.stats.cache_misses;
      p.prepare_or_put_back(b);
    }
    return p.hand_out(b, slot, size, bytes);
  }

  /// A free on another stream, of a block used on several streams, of a private pool's block, or
  /// during a capture.
  template <class Pool>
  static void free_slow(Pool& p, std::unique_lock<pool_mutex>& lock, block* b, stream_ref stream, std::uint64_t capture) noexcept {
    // A block of a forgotten stream's slot gives it up when it gets another owner (an orphan or
    // a block held without a slot keeps it).
    stream_slot* const old = b->owner;
    const auto left_old = [&] {
      if (old->stream == retired_stream()) p.cache_.release_retired(old);
    };
    private_pool* pool = nullptr;
    if (b->owner->capture_pool != 0) pool = p.captures_.find(b->owner->capture_pool);
    if (capture != 0) {
      // Freed inside a capture: the graph may use it in every replay. Unless the block is the
      // capture's own pool's (whose graphs replay in turn), that pool holds it until released.
      private_pool* holder = nullptr;
      try {
        holder = &p.captures_.for_capture(capture);
      } catch (...) {
      }
      if (holder == nullptr) return pool_inspect::quarantine(p, b);
      if (holder != pool) {
        // At the release a shared block joins the freeing stream's cache (else the allocating
        // one's); a private pool's block goes back to its own pool.
        if (pool == nullptr) {
          if (stream_slot* home = p.cache_.slots().slot_for_free(stream.get()); home != nullptr) {
            b->owner = home;
            left_old();
          }
        }
        pool_inspect::make_pending(p, b);
        return holder->hold(b);
      }
    }
    slot_set& slots = pool != nullptr ? pool->slots : p.cache_.slots();
    stream_slot* slot = slots.slot_for_free(stream.get());
    if (slot == nullptr) return p.pending_.add_orphan(b, stream.get(), p.space_);  // never reused early
    left_old();
    if (b->extra_streams != 0) return p.pending_.free_used(b, *slot, p.space_, p.cache_.events(), p.ops_, p.device_);
    b->owner = slot;
    b->free_epoch = slot->next_epoch();
    b = p.space_.insert_free(b);
    if (pool != nullptr && pool->released()) pool_inspect::release_private(p, lock, *pool);
  }

  /// What a growth may take under the pool's limits (`pool_limits`), counting what other growths
  /// are taking meanwhile (`block_space::growing`). Under the lock. The device's free memory is
  /// asked only when a limit needs it.
  template <class Pool>
  static growth_budget growth_limits(Pool& p) {
    const pool_limits& l = p.limits_;
    growth_budget b;
    const std::size_t held = p.space_.reserved + p.space_.growing;
    if (l.max_reserved_bytes != pool_options::unlimited) {
      b.room = l.max_reserved_bytes > held ? l.max_reserved_bytes - held : 0;
      b.capacity = l.max_reserved_bytes;
    }
    using U = typename Pool::upstream_type;
    if constexpr (requires(const U& u) { { u.free_bytes() } -> std::convertible_to<std::size_t>; }) {
      if (l.keep_free_bytes != 0) {
        const std::size_t free = p.space_.unclaimed(p.upstream_.free_bytes());
        b.room = std::min(b.room, free > l.keep_free_bytes ? free - l.keep_free_bytes : 0);
        if constexpr (requires(const U& u) { { u.total_bytes() } -> std::convertible_to<std::size_t>; }) {
          const std::size_t total = p.upstream_.total_bytes();
          b.capacity = std::min(b.capacity, total > l.keep_free_bytes ? total - l.keep_free_bytes : 0);
        }
      }
    }
    return b;
  }

  /// Gives back what this pool holds idle (the out-of-memory pipeline's second step).
  template <class Pool>
  static void reclaim(Pool& p, std::unique_lock<pool_mutex>& lock) {
    process_pending(p);
    trim(p, lock, 0);
  }

  /// Returns idle memory until `reserved <= keep`; unlocks for the upstream calls.
  template <class Pool>
  static std::size_t trim(Pool& p, std::unique_lock<pool_mutex>& lock, std::size_t keep) noexcept {
    // Released private pools whose blocks came back late (pending frees, orphans) go too.
    std::vector<private_pool*> done;
    try {
      p.captures_.for_each([&](private_pool& pp) {
        if (pp.released()) done.push_back(&pp);
      });
    } catch (...) {
    }
    for (private_pool* pp : done) pool_inspect::release_private(p, lock, *pp);
    p.space_.coalesce_all(p.cache_.slots());  // segments held apart only by deferred merges become idle
    try {
      p.cache_.unify(p.space_, p.plain_.heads());
    } catch (const std::exception& e) {
      log(log_level::warning, std::string{"caching_pool: release could not merge a segment cached by several "
                                          "streams: "} + e.what());
    }
    std::size_t released = give_back_idle(p, lock, keep);
    if (p.expand_.on() && p.space_.reserved > keep) released += p.expand_.unmap_idle(lock, p.space_, p.cache_, p.ops_, keep);
    return released;
  }
  template <class Pool>
  static std::size_t give_back_idle(Pool& p, std::unique_lock<pool_mutex>& lock, std::size_t keep) noexcept {
    std::vector<typename Pool::plain_type::victim> victims;
    try {
      victims.reserve(p.space_.indexes_idle() ? p.space_.idle_segments().size() : p.plain_.heads().size());
    } catch (...) {  // no memory for the list: give back what fits in none
    }
    p.plain_.take_idle(p.space_, keep, victims);
    lock.unlock();
    const std::size_t released = Pool::plain_type::give_back(p.upstream_, victims);
    lock.lock();
    return released;
  }
  /// Above the release threshold by its margin: idle plain segments go (from the idle index), and
  /// idle granules are unmapped once per margin freed.
  template <class Pool>
  static void trim_for_threshold(Pool& p, std::unique_lock<pool_mutex>& lock, std::size_t freed) noexcept {
    const std::size_t threshold = p.space_.options().release_threshold_bytes;
    p.space_.coalesce_all(p.cache_.slots());
    if (!p.space_.idle_segments().empty()) give_back_idle(p, lock, threshold);
    if (!p.expand_.on() || p.space_.reserved <= p.trim_at_) return;
    p.freed_above_ += freed;
    if (p.freed_above_ < p.margin_) return;
    p.freed_above_ = 0;
    (void)p.expand_.unmap_idle(lock, p.space_, p.cache_, p.ops_, threshold);
  }

  /// Pending frees whose events completed rejoin their caches; orphans get their slots.
  template <class Pool>
  static void process_pending(Pool& p) noexcept {
    p.pending_.process(p.space_, p.cache_.events(), p.ops_, p.device_, [&](block* b, cudaStream_t s) -> stream_slot* {
      private_pool* pool = b->owner->capture_pool != 0 ? p.captures_.find(b->owner->capture_pool) : nullptr;
      slot_set& slots = pool != nullptr ? pool->slots : p.cache_.slots();
      try {
        return &slots.slot_for(s);
      } catch (...) {
        return nullptr;
      }
    });
  }

  /// The capture under way on `stream`; when the platform cannot tell, treated as one (a block
  /// freed then is held, never reused early).
  template <class Pool>
  static std::uint64_t capture_of(Pool& p, stream_ref stream) noexcept {
    try {
      return p.ops_.capture_id(stream);
    } catch (...) {
      return ~std::uint64_t{0};
    }
  }

  /// A host pool's synchronous allocation: the host waits until the default stream is done with it.
  template <class Pool>
  static void wait_for_host(Pool& p, void* ptr, std::size_t bytes) {
    try {
      const std::lock_guard lock{p.mutex_};
      const block* b = p.space_.map.find(reinterpret_cast<std::uintptr_t>(ptr));
      p.cache_.wait_idle(*b->owner, b->free_epoch);
    } catch (...) {
      p.deallocate_async(ptr, bytes, cuda_allocation_alignment, stream_ref{});
      throw;
    }
  }
};

}  // namespace mgm::detail
