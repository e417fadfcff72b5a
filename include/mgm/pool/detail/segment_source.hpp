/// @file
/// @brief The caching pool's plain segments (one upstream allocation each), and the one
/// out-of-memory pipeline every way of getting memory goes through.
///
/// ## Invariants
/// - every plain segment's head is in exactly one list: the shared cache's (`heads()`) or one
///   private pool's; its blocks tile it, and `reserved` counts its whole size
/// - a segment is taken from the upstream without the pool's lock held, and under the relaxed
///   capture mode when the requesting stream captures a graph (PyTorch's `cudaMallocMaybeCapturing`)
#pragma once

#include <mgm/bytes.hpp>
#include <mgm/concepts.hpp>
#include <mgm/detail/checks.hpp>
#include <mgm/error.hpp>
#include <mgm/pool/detail/block_space.hpp>
#include <mgm/pool/detail/nvtx.hpp>
#include <mgm/pool/detail/pool_mutex.hpp>
#include <mgm/pool/oom_info.hpp>
#include <mgm/stream.hpp>

#include <algorithm>
#include <cstddef>
#include <mutex>  // std::unique_lock
#include <vector>

namespace mgm::detail {

/// The calling thread's capture mode is relaxed while it lives (when `on`), so that an upstream
/// call made for a capturing stream neither fails nor invalidates the capture.
template <class Ops>
class relaxed_capture {
 public:
  relaxed_capture(Ops& ops, bool on) : ops_{ops}, on_{on} {
    if (on_) previous_ = ops_.exchange_capture_mode(capture_mode::relaxed);
  }
  ~relaxed_capture() {
    if (on_) (void)ops_.exchange_capture_mode(previous_);
  }
  relaxed_capture(const relaxed_capture&) = delete;
  relaxed_capture& operator=(const relaxed_capture&) = delete;

 private:
  Ops& ops_;
  bool on_;
  capture_mode previous_{capture_mode::global};
};

/// The out-of-memory pipeline. `attempt(minimal)` tries once (the lock held on entry and exit; it
/// may release it around the upstream call) and returns nullptr when the upstream is out of
/// memory; `reclaim()` gives back what the pool holds idle; `describe()` gives the figures.
/// 1. try; 2. reclaim, try the minimal size; 3. the user's handler (without the lock), and if
/// it asks, reclaim and try once more; 4. `out_of_memory`. A capture skips 2 and 3: giving
/// memory back would synchronise the device in the middle of it.
template <bool Statistics, class Attempt, class Reclaim, class Describe>
block* with_oom_retries(std::unique_lock<pool_mutex>& lock, pool_statistics& stats, const oom_handler& handler,
                        std::size_t size, bool capturing, Attempt&& attempt, Reclaim&& reclaim, Describe&& describe) {
  if (block* b = attempt(false)) return b;
  if (!capturing) {
    reclaim();
    if constexpr (Statistics) ++stats.oom_retries;
    if (block* b = attempt(true)) return b;
    if (handler) {
      const oom_handler h = handler;  // a copy: another thread may set a new one while it runs
      const oom_info info = describe();
      lock.unlock();
      bool retry = false;
      try {
        retry = h(info);
      } catch (...) {
        lock.lock();
        throw;
      }
      lock.lock();
      if (retry) {
        reclaim();  // what the handler freed may sit in this pool's cache
        if (block* b = attempt(true)) return b;
      }
    }
  }
  if constexpr (Statistics) ++stats.ooms;
  oom_info info = describe();
  info.capturing = capturing;
  throw out_of_memory{describe_pool_oom(info), size};
}

/// Plain segments over `Upstream`.
template <class Upstream, bool Statistics>
class segment_source {
 public:
  using stream_ops_type = typename Upstream::stream_ops_type;

  /// The size of a new segment for a request of `size` (`minimal`: the smallest that serves it).
  [[nodiscard]] static std::size_t segment_size(const pool_options& o, std::size_t size, bool small, bool minimal) noexcept {
    std::size_t seg = size;
    if (small) return minimal ? seg : o.small_segment_bytes;
    if (!minimal && size < o.large_direct_bytes) return std::max(o.large_segment_bytes, size);
    (void)round_up(size, o.segment_round_bytes, seg);
    return seg;
  }

  /// One new segment of `seg` bytes, owned by `slot` and listed in `list`: one free block, in no
  /// index. nullptr when the upstream is out of memory. Unlocks around the upstream call. When it
  /// throws, nothing changed.
  block* take(std::unique_lock<pool_mutex>& lock, Upstream& upstream, stream_ops_type& ops, block_space<Statistics>& space,
              std::vector<block*>& list, stream_slot& slot, std::size_t seg, bool small, stream_ref stream,
              bool capturing) {
    space.growing += seg;  // counted by the limits of growths that start meanwhile
    lock.unlock();
    void* p = nullptr;
    try {
      // For a capture: a synchronous allocation (cudaMalloc, never a node of the graph).
      const relaxed_capture<stream_ops_type> relaxed{ops, capturing};
      p = capturing ? upstream.allocate(seg, cuda_allocation_alignment)
                    : upstream.allocate_async(seg, cuda_allocation_alignment, stream);
    } catch (const out_of_memory&) {
      p = nullptr;
    } catch (...) {
      lock.lock();
      space.growing -= seg;
      throw;
    }
    lock.lock();
    space.growing -= seg;
    if (p == nullptr) return nullptr;
    try {  // what the records need, before anything changes
      space.arena.reserve(1);
      list.reserve(list.size() + 1);
      space.reserve_idle(heads_.size() + 1);
    } catch (...) {
      lock.unlock();
      if (capturing) {
        upstream.deallocate(p, seg, cuda_allocation_alignment);
      } else {
        upstream.deallocate_async(p, seg, cuda_allocation_alignment, stream);
      }
      lock.lock();
      throw;
    }
    block* b = space.arena.make();
    b->addr = reinterpret_cast<std::uintptr_t>(p);
    b->size = seg;
    b->small = small ? 1 : 0;
    b->owner = &slot;
    b->free_epoch = slot.next_epoch();  // new memory: no event recorded before now covers it
    list.push_back(b);
    nvtx::register_heap(p, seg);
    space.reserved += seg;
    if constexpr (Statistics) {
      space.stats.reserved_bytes.add(static_cast<std::int64_t>(seg));
      space.stats.segments.add(1);
      ++space.stats.upstream_allocations;
    }
    return b;
  }

  std::vector<block*>& heads() noexcept { return heads_; }
  const std::vector<block*>& heads() const noexcept { return heads_; }

  /// A segment that left the pool, to be given back without the lock.
  struct victim {
    std::uintptr_t addr;
    std::size_t size;
    cudaStream_t stream;
  };

  /// Takes idle segments of the shared cache out (from the idle index when it is kept, else by a
  /// walk) until `reserved <= keep`; they are given back by `give_back`. Never allocates beyond
  /// `out`'s reserved capacity.
  void take_idle(block_space<Statistics>& space, std::size_t keep, std::vector<victim>& out) noexcept {
    std::size_t taken = 0;
    std::size_t next = 0;  // the walk's place in heads_
    const auto next_idle = [&]() -> block* {
      if (space.indexes_idle()) return space.idle_segments().empty() ? nullptr : space.idle_segments().back();
      for (; next < heads_.size(); ++next) {
        block* h = heads_[next];
        if (h->owner != nullptr && h->whole_segment() && h->state == block_state::free) return heads_[next++];
      }
      return nullptr;
    };
    while (space.reserved > keep && out.size() < out.capacity()) {
      block* b = next_idle();
      if (b == nullptr) break;
      space.take_free(b);
      out.push_back({b->addr, b->size, b->owner->stream});
      forget_segment(space, b);
      b->owner = nullptr;  // marked: erased from the list below
      ++taken;
    }
    if (taken == 0) return;
    std::erase_if(heads_, [&](block* h) {
      if (h->owner != nullptr) return false;
      space.arena.recycle(h);
      return true;
    });
  }

  /// Gives taken segments back to the upstream (without the lock); returns their bytes.
  static std::size_t give_back(Upstream& upstream, const std::vector<victim>& victims) noexcept {
    std::size_t bytes = 0;
    for (const auto& v : victims) {
      nvtx::unregister_heap(reinterpret_cast<void*>(v.addr));
      upstream.deallocate_async(reinterpret_cast<void*>(v.addr), v.size, cuda_allocation_alignment, stream_ref{v.stream});
      bytes += v.size;
    }
    return bytes;
  }

  /// The byte counts of a segment that leaves the pool.
  static void forget_segment(block_space<Statistics>& space, const block* head) noexcept {
    space.reserved -= head->size;
    if constexpr (Statistics) {
      space.stats.reserved_bytes.sub(static_cast<std::int64_t>(head->size));
      space.stats.segments.sub(1);
      ++space.stats.upstream_frees;
    }
  }

  /// Gives every segment of `list` back (the pool's end; a release of a private pool).
  static void give_back_all(Upstream& upstream, const std::vector<block*>& list) noexcept {
    for (block* head : list) {
      std::size_t seg = 0;
      for (const block* b = head; b != nullptr; b = b->next) seg += b->size;
      nvtx::unregister_heap(reinterpret_cast<void*>(head->addr));
      upstream.deallocate(reinterpret_cast<void*>(head->addr), seg, cuda_allocation_alignment);
    }
  }

 private:
  std::vector<block*> heads_;  // the shared cache's segments
};

}  // namespace mgm::detail
