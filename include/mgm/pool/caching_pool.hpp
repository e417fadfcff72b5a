/// @file
/// @brief `caching_pool`: a per-device, stream-ordered caching allocator with an O(1) free index.
///
/// ## Glossary
/// - *upstream*: the allocator the pool takes memory from (`cuda_allocator`, a simulated device).
/// - *segment*: one upstream allocation. *Small* segments (2 MiB) serve requests up to 1 MiB,
///   *large* ones (at least 20 MiB, or the request rounded to 2 MiB from 10 MiB up) the rest, so
///   small blocks never fragment the large segments.
/// - *block*: a piece of a segment, allocated or free; address neighbours in a segment are linked.
/// - *slot*: the cache of one stream: the free blocks that stream may reuse at once, in two
///   two-level segregated-fit indices (small, large).
/// - *epoch*: a slot's count of frees; an event recorded on the slot's stream at epoch E covers
///   every block the slot freed at an epoch <= E.
///
/// ## Behaviour
/// - Requests are rounded up to `round_bytes` (256). A request looks in its stream's index
///   (`tlsf_index::find`: the head of its own class, then the first class that fits). A free block
///   larger than the request is split when the rest is worth keeping; a freed block merges with
///   its free address neighbours of the same segment and the same stream.
/// - A block freed on stream S is reusable on S at once. Another stream T takes it only after an
///   event on S that covers the free: if the event has completed, directly; otherwise T is made to
///   wait for it on the device (`wait`), never the host. Events come from a pool of events and are
///   recorded lazily, once per batch of frees, when another stream first needs S's blocks.
/// - `record_stream(p, U)`: p is also used on U; when p is freed, events are recorded on each such
///   stream and the block is reused only after they completed.
/// - While T is capturing a CUDA graph, an allocation on T uses T's own free blocks only: no event
///   query, no upstream call; otherwise it fails with `mgm::bad_alloc` saying so.
/// - A miss goes upstream without the lock held. Out of memory: release this pool's idle segments
///   and retry once; then the `oom_handler` (it may free memory and ask for one more retry); then
///   `mgm::out_of_memory` naming the device, the request, allocated / reserved / idle-cached bytes,
///   the largest free block and the device's free memory, and pointing at `max_split_bytes` when
///   the cached memory would have sufficed but is fragmented.
/// - `release(bytes_to_keep)` returns whole idle segments to the upstream; `release_threshold_bytes`
///   does it after a free that leaves more reserved; the destructor returns everything.
///
/// ## Invariants
/// - `reserved == Σ segment sizes == Σ block sizes`
/// - `reserved == allocated + pending + Σ free block sizes`
/// - `Σ free block sizes == inactive_split + idle` (idle: free blocks that are a whole segment)
/// - `allocated - requested == Σ (block size - request) over allocated blocks`
/// - no two free address neighbours have the same stream (they would have merged)
///
/// ## Costs
/// Cache hit (alloc + free): one lock each; two bit scans; no allocation; the pointer is found by
/// one multiply and one compare in the block map. Statistics are a template switch.
#pragma once

#include <mgm/allocator_ref.hpp>
#include <mgm/bytes.hpp>
#include <mgm/concepts.hpp>
#include <mgm/detail/checks.hpp>
#include <mgm/device.hpp>
#include <mgm/error.hpp>
#include <mgm/log.hpp>
#include <mgm/pool/detail/block.hpp>
#include <mgm/pool/detail/nvtx.hpp>
#include <mgm/pool/detail/stream_slot.hpp>
#include <mgm/pool/detail/tlsf_index.hpp>
#include <mgm/pool/pool_options.hpp>
#include <mgm/pool/pool_snapshot.hpp>
#include <mgm/pool/pool_statistics.hpp>
#include <mgm/properties.hpp>
#include <mgm/stream.hpp>
#include <mgm/tag.hpp>
#include <mgm/telemetry/pool_registry.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

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
};

/// @brief Called when the pool could not get memory even after releasing its idle segments.
/// Return true to have the allocation retried once more (after freeing something).
using oom_handler = std::function<bool(const oom_info&)>;

namespace detail {
/// The upstream's virtual-memory seam, or a stand-in type when it has none.
template <class U, bool = vmm_allocator<U>>
struct vmm_of {
  struct none {
    using physical_handle = std::uint64_t;
  };
  using type = none;
};
template <class U>
struct vmm_of<U, true> {
  using type = typename U::vmm_ops_type;
};

/// The text of `mgm::out_of_memory` for a pool.
[[nodiscard]] std::string describe_pool_oom(const oom_info& info);
[[nodiscard]] std::string describe_device(device_id d);
}  // namespace detail

/// @brief A caching, stream-ordered pool of one device's memory over `Upstream`.
/// @tparam Upstream an `mgm::platform_allocator` with a `device_affinity`; its `stream_ops_type`
///   is the pool's seam (so a pool over a simulated device never calls CUDA).
/// @tparam Statistics keep `pool_statistics` (false compiles every update out).
/// @throws from `allocate`: mgm::out_of_memory (see above), mgm::bad_alloc during graph capture,
///   mgm::logic_error for a bad alignment (a power of two up to 256 is honoured).
/// **Thread safety:** safe; one mutex, held once per call on the hit path and never across an
/// upstream call. **Device affinity:** the upstream's device.
template <platform_allocator Upstream, bool Statistics = true>
  requires has_property_with_value<Upstream, device_affinity>
class alignas(64) caching_pool {  // whole cache lines: pools of different devices never share one
 public:
  using upstream_type = Upstream;
  using stream_ops_type = typename Upstream::stream_ops_type;
  using event_type = typename stream_ops_type::event;
  static constexpr bool statistics_enabled = Statistics;

  explicit caching_pool(Upstream upstream, pool_options options = pool_options::from_env(),
                        oom_handler handler = {})
      : upstream_{std::move(upstream)},
        ops_{upstream_.stream_ops()},
        device_{affinity_of(upstream_)},
        options_{std::move(options)},
        handler_{std::move(handler)},
        vmm_{make_vmm(upstream_)} {
    options_.validate();
    round_mask_ = options_.round_bytes - 1;
    peers_.push_back(device_);
    if constexpr (vmm_allocator<Upstream>) {
      if (options_.expandable_segments && vmm_.supported(device_)) {
        granule_ = vmm_.granularity(device_);
        expandable_ = granule_ != 0 && (granule_ & (granule_ - 1)) == 0 && granule_ % options_.round_bytes == 0;
      }
    }
    registration_ = telemetry::pool_registration{device_, telemetry::simulated_ops<stream_ops_type>, [this] {
      const pool_statistics s = statistics();
      telemetry::pool_figures f;
      if constexpr (Statistics) f.allocated = static_cast<std::uint64_t>(s.allocated_bytes.current);
      f.reserved = static_cast<std::uint64_t>(s.reserved_bytes.current);
      return f;
    }};
  }

  caching_pool(const caching_pool&) = delete;
  caching_pool& operator=(const caching_pool&) = delete;
  caching_pool(caching_pool&&) = delete;
  caching_pool& operator=(caching_pool&&) = delete;

  ~caching_pool() { destroy(); }

  // ---- allocation ------------------------------------------------------------------------------

  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) {
    mgm::detail::check_alignment(alignment, cuda_allocation_alignment, "caching_pool");
    if (bytes == 0) return nullptr;
    if (bytes > max_request_) [[unlikely]] throw_too_large(bytes);
    const std::size_t size = (bytes + round_mask_) & ~round_mask_;
    std::unique_lock lock{mutex_};
    detail::stream_slot& slot = slot_for(stream.get());
    // Blocks waiting on other streams' events (record_stream) rejoin the cache as soon as they
    // can; never while this stream captures a graph (an event query would break the capture).
    if (!pending_.empty()) [[unlikely]] {
      if (!ops_.is_capturing(stream)) process_pending(true);
    }
    const bool small = size <= options_.small_request_bytes;
    detail::block* b = slot.index(small).find(size);
    if (b != nullptr && acceptable(b, size)) [[likely]] {
      slot.index(small).remove(b);
    } else {
      b = allocate_slow(lock, slot, size, small, stream);
    }
    return hand_out(b, slot, size, bytes);
  }

  void deallocate_async(void* p, std::size_t bytes, std::size_t /*alignment*/, stream_ref stream) noexcept {
    if (p == nullptr) return;
    std::unique_lock lock{mutex_};
    detail::block* b = map_.take(reinterpret_cast<std::uintptr_t>(p));
    if (b == nullptr) [[unlikely]] {
      lock.unlock();
      report_invalid_free(p, bytes);
      return;
    }
    detail::nvtx::unregister_region(p);
    if constexpr (Statistics) {
      stats_.allocated_bytes.sub(static_cast<std::int64_t>(b->size));
      stats_.requested_bytes.sub(static_cast<std::int64_t>(b->size - b->aux));
      stats_.allocations.sub(1);
    }
    detail::stream_slot* slot = b->owner;
    if (stream.get() != slot->stream) [[unlikely]] {
      try {
        slot = &slot_for(stream.get());
      } catch (...) {  // no memory for a new slot: keep the block with its allocating stream
      }
    }
    if (b->extra_streams != 0) [[unlikely]] {
      free_with_other_uses(b, *slot);
    } else {
      b->owner = slot;
      b->aux = slot->next_epoch();
      insert_free(b);
    }
    if (reserved_ > options_.release_threshold_bytes) [[unlikely]] trim(lock, options_.release_threshold_bytes);
  }

  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = cuda_allocation_alignment) {
    return allocate_async(bytes, alignment, stream_ref{});
  }
  void deallocate(void* p, std::size_t bytes, std::size_t alignment = cuda_allocation_alignment) noexcept {
    deallocate_async(p, bytes, alignment, stream_ref{});
  }

  /// @brief `p` (from this pool) is also used on `stream`: when it is freed, it is reused only
  /// after the work enqueued on `stream` by then has completed (PyTorch's `record_stream`).
  /// @throws mgm::logic_error when `p` is not a live allocation of this pool.
  void record_stream(void* p, stream_ref stream) {
    const std::lock_guard lock{mutex_};
    detail::block* b = map_.find(reinterpret_cast<std::uintptr_t>(p));
    MGM_EXPECTS(b != nullptr, "record_stream: the pointer is not a live allocation of this pool");
    if (stream.get() == b->owner->stream) return;
    auto& uses = extra_uses_[b];
    if (std::find(uses.begin(), uses.end(), stream.get()) == uses.end()) uses.push_back(stream.get());
    b->extra_streams = 1;
  }

  // ---- giving memory back ------------------------------------------------------------------------

  /// @brief Returns whole idle segments to the upstream until at most `bytes_to_keep` stay
  /// reserved (or no idle segment is left). Blocks waiting on other streams' events are collected
  /// first where those events have completed. Returns the bytes released.
  std::size_t release(std::size_t bytes_to_keep = 0) {
    std::unique_lock lock{mutex_};
    process_pending(/*may_query=*/true);
    return trim(lock, bytes_to_keep);
  }

  /// @brief Whether new memory comes from expandable segments (see `pool_options`).
  [[nodiscard]] bool expandable() const noexcept { return expandable_; }

  /// @brief Gives `peer` read-write access to every granule of the expandable segments, mapped
  /// now or later (virtual-memory mappings ignore `cudaDeviceEnablePeerAccess`). The placement
  /// layer calls it after enabling peer access. A no-op for plain segments.
  /// @throws mgm::cuda_error when the platform refuses (the peer cannot access this device).
  void grant_access(device_id peer) {
    const std::lock_guard lock{mutex_};
    if (std::find(peers_.begin(), peers_.end(), peer) != peers_.end()) return;
    std::vector<device_id> next = peers_;
    next.push_back(peer);
    if constexpr (vmm_allocator<Upstream>) {
      for (const auto& seg : expandables_) {
        for_each_mapped_run(*seg, [&](std::uintptr_t va, std::size_t bytes) {
          vmm_.set_access(reinterpret_cast<void*>(va), bytes, next);
        });
      }
    }
    peers_ = std::move(next);
  }

  /// @brief Retires `stream`'s cache; call it before destroying the stream. An event is recorded on
  /// `stream` now, the last one: its cached blocks join the default stream's cache once that
  /// event has completed, and nothing is recorded on `stream` again. Blocks still allocated on it
  /// are freed as usual, in the order of the stream `deallocate_async` names. A later stream with
  /// the same handle value starts with an empty cache. If live blocks were `record_stream`ed on
  /// `stream`, the host waits for that event (this stream can no longer be recorded on at their free).
  /// @throws mgm::logic_error for the default stream; mgm::cuda_error from the platform, with the
  /// pool unchanged.
  void forget_stream(stream_ref stream) {
    MGM_EXPECTS(stream.get() != nullptr, "forget_stream: the default stream cannot be forgotten");
    std::unique_lock lock{mutex_};
    MGM_EXPECTS(!ops_.is_capturing(stream), "forget_stream: the stream is capturing a graph");
    const cudaStream_t handle = stream.get();
    const bool has_slot = std::any_of(slots_.begin(), slots_.end(), [&](const auto& s) { return s->stream == handle; });
    detail::stream_slot* home = has_slot ? &slot_for(nullptr) : nullptr;  // first: it may add a slot
    const auto it = std::find_if(slots_.begin(), slots_.end(), [&](const auto& s) { return s->stream == handle; });
    detail::stream_slot* gone = has_slot ? it->get() : nullptr;
    // Everything that can fail first, with the pool unchanged: the records, and one event recorded
    // on the stream per cached block and per block pending on other streams that it freed (each
    // pending entry owns its events).
    std::vector<detail::block*> cached;
    std::size_t pending_of_gone = 0;
    if (gone != nullptr) {
      for (detail::tlsf_index* index : {&gone->small, &gone->large}) {
        index->for_each([&](detail::block* b) { cached.push_back(b); });
      }
      for (const auto& pf : pending_) pending_of_gone += pf.b->owner == gone ? 1 : 0;
    }
    bool record_stream_users = false;
    for (const auto& [b, users] : extra_uses_) {
      record_stream_users = record_stream_users || std::find(users.begin(), users.end(), handle) != users.end();
    }
    std::vector<int> made;
    std::vector<pending_free> staged;
    try {
      const std::size_t events = cached.size() + pending_of_gone + (record_stream_users ? 1 : 0);
      free_events_.reserve(free_events_.size() + events + 1);
      pending_.reserve(pending_.size() + cached.size());
      if (gone != nullptr) retired_.reserve(retired_.size() + 1);
      for (auto& pf : pending_) {
        if (gone != nullptr && pf.b->owner == gone) pf.events.reserve(pf.events.size() + 1);
      }
      staged.reserve(cached.size());
      for (detail::block* b : cached) staged.push_back(pending_free{b, std::vector<std::pair<int, cudaStream_t>>(1)});
      for (std::size_t i = 0; i < events; ++i) {
        made.push_back(acquire_event());
        ops_.record(events_[static_cast<std::size_t>(made.back())], stream);
      }
      if (record_stream_users) ops_.synchronize(events_[static_cast<std::size_t>(made.back())]);
    } catch (...) {
      for (const int e : made) free_events_.push_back(e);  // reserved above: does not throw
      throw;
    }
    // Nothing below allocates or fails. Events already recorded on the stream are never asked
    // about the stream again (nullptr).
    for (auto& pf : pending_) {
      for (auto& ev : pf.events) {
        if (ev.second == handle) ev.second = nullptr;
      }
    }
    if (record_stream_users) {
      free_events_.push_back(made.back());
      made.pop_back();
      for (auto& [b, users] : extra_uses_) std::erase(users, handle);
    }
    if (gone == nullptr) return;
    std::size_t next_event = 0;
    for (auto& pf : pending_) {  // blocks waiting on other streams: after this stream's work too
      if (pf.b->owner != gone) continue;
      pf.events.emplace_back(made[next_event++], nullptr);
      pf.b->owner = home;
    }
    for (auto& pf : staged) {
      detail::block* b = pf.b;
      gone->index(b->small != 0).remove(b);
      if (b->whole_segment()) idle_bytes_ -= b->size;
      b->owner = home;
      b->state = detail::block_state::pending;
      b->u.used.hash_next = nullptr;
      b->u.used.tag = nullptr;
      pf.events[0] = {made[next_event++], nullptr};
      pending_.push_back(std::move(pf));
      pending_bytes_ += b->size;
    }
    // Unmapped ranges have no memory behind them: they join the default stream's at once. Ranges
    // another call holds busy (mapping or unmapping, the lock released) only change owner: that
    // call puts them back into their segment's owner's index.
    for (auto& seg : expandables_) {
      if (seg->owner == gone) seg->owner = home;
      for (detail::block* b = seg->head; b != nullptr;) {
        detail::block* next = b->next;
        if (b->owner == gone && b->state == detail::block_state::free && b->unmapped()) {
          gone->unmapped_index(b->small != 0).remove(b);
          b->owner = home;
          insert_unmapped(b);
        } else if (b->owner == gone && b->state == detail::block_state::pending) {
          b->owner = home;
        }
        b = next;
      }
    }
    if (gone->event >= 0) free_events_.push_back(gone->event);
    gone->event = -1;
    gone->event_recorded = false;
    // Blocks still allocated keep pointing at the slot: it stays, under a handle no stream has.
    gone->stream = retired_stream();
    retired_.push_back(std::move(*it));
    slots_.erase(it);
    last_slot_ = nullptr;
  }

  /// @brief For tests only: `stream`'s free epoch advances as `frees` frees would (they would take
  /// minutes to make), so that the epoch arithmetic can be tried near its limits.
  void skip_free_epochs_for_testing(stream_ref stream, std::uint64_t frees) {
    const std::lock_guard lock{mutex_};
    slot_for(stream.get()).free_epoch += frees;
  }

  void set_oom_handler(oom_handler handler) {
    const std::lock_guard lock{mutex_};
    handler_ = std::move(handler);
  }

  // ---- observation -------------------------------------------------------------------------------

  /// @brief The statistics (all zero when `Statistics` is false, except `reserved_bytes.current`).
  [[nodiscard]] pool_statistics statistics() const {
    const std::lock_guard lock{mutex_};
    pool_statistics s = stats_;
    s.reserved_bytes.current = static_cast<std::int64_t>(reserved_);
    if constexpr (Statistics) {
      std::size_t free_bytes = 0;
      for (const auto& slot : slots_) free_bytes += slot->small.bytes() + slot->large.bytes();
      s.active_bytes.current = s.allocated_bytes.current + static_cast<std::int64_t>(pending_bytes_);
      s.active_bytes.peak = std::max(s.active_bytes.peak, s.allocated_bytes.peak);
      s.active_bytes.total = s.allocated_bytes.total;
      s.cache_hits = s.allocations.total - s.cache_misses;
      s.inactive_split_bytes.current = static_cast<std::int64_t>(free_bytes - idle_bytes_);
      s.inactive_split_bytes.peak = std::max(s.inactive_split_bytes.peak, s.inactive_split_bytes.current);
    }
    return s;
  }

  /// @brief Every segment and block: address, size, state, stream, tag.
  [[nodiscard]] pool_snapshot snapshot() const {
    const std::lock_guard lock{mutex_};
    pool_snapshot snap;
    snap.device = device_.value();
    std::vector<const detail::block*> heads(segments_.begin(), segments_.end());
    for (const auto& e : expandables_) heads.push_back(e->head);
    for (const detail::block* head : heads) {
      segment_snapshot seg{head->addr, 0, head->small != 0, head->expandable(), {}};
      for (const detail::block* b = head; b != nullptr; b = b->next) {
        block_snapshot bs;
        bs.address = b->addr;
        bs.size = b->size;
        bs.state = b->unmapped()                                ? block_snapshot::state_type::unmapped
                   : b->state == detail::block_state::free        ? block_snapshot::state_type::free
                   : b->state == detail::block_state::allocated ? block_snapshot::state_type::allocated
                                                                : block_snapshot::state_type::pending;
        bs.requested = b->state == detail::block_state::allocated ? b->size - b->aux : 0;
        bs.stream = reinterpret_cast<std::uintptr_t>(b->owner != nullptr ? b->owner->stream : nullptr);
        if (b->state != detail::block_state::free && b->u.used.tag != nullptr) bs.tag = b->u.used.tag;
        seg.size += b->size;
        seg.blocks.push_back(std::move(bs));
      }
      snap.segments.push_back(std::move(seg));
    }
    std::sort(snap.segments.begin(), snap.segments.end(),
              [](const segment_snapshot& a, const segment_snapshot& b) { return a.address < b.address; });
    return snap;
  }

  /// @brief Reserved bytes, whatever `Statistics` is.
  [[nodiscard]] std::size_t reserved_bytes() const noexcept {
    const std::lock_guard lock{mutex_};
    return reserved_;
  }

  [[nodiscard]] device_id device() const noexcept { return device_; }
  [[nodiscard]] const pool_options& options() const noexcept { return options_; }
  [[nodiscard]] Upstream& upstream() noexcept { return upstream_; }
  [[nodiscard]] stream_ops_type stream_ops() const noexcept { return ops_; }

  friend bool operator==(const caching_pool& a, const caching_pool& b) noexcept { return &a == &b; }
  template <class P>
    requires has_property<Upstream, P>
  friend auto get_property(const caching_pool& pool, P tag) noexcept {
    return get_property(pool.upstream_, tag);
  }

 private:
  struct pending_free {
    detail::block* b;
    // event index, the stream it was recorded on (nullptr: a forgotten stream, never asked again)
    std::vector<std::pair<int, cudaStream_t>> events;
  };
  struct idle_segment {
    std::uintptr_t addr;
    std::size_t size;
    cudaStream_t stream;
  };
  // Expandable segments: one reserved range at a time per stream and size class, its granules
  // mapped as blocks need them (handles[g] != 0) and unmapped again when idle.
  struct expandable_segment {
    std::uintptr_t base{0};
    std::size_t bytes{0};
    detail::stream_slot* owner{nullptr};
    bool small{false};
    detail::block* head{nullptr};
    std::vector<typename detail::vmm_of<Upstream>::type::physical_handle> handles;
  };


  static constexpr std::size_t large_buffer_bytes = std::size_t{20} << 20;
  /// The handle of a forgotten stream's slot: never a stream's (CUDA's and the simulator's
  /// handles are aligned pointers or tagged values; this one is odd and has no tag).
  static cudaStream_t retired_stream() noexcept {
    return reinterpret_cast<cudaStream_t>(~std::uintptr_t{0});
  }
  static constexpr std::size_t max_request_ = std::size_t{1} << 60;

  // ---- the hot path's helpers ----------------------------------------------------------------

  detail::stream_slot& slot_for(cudaStream_t s) {
    if (last_slot_ != nullptr && last_slot_->stream == s) [[likely]] return *last_slot_;
    for (auto& slot : slots_) {
      if (slot->stream == s) {
        last_slot_ = slot.get();
        return *slot;
      }
    }
    slots_.push_back(std::make_unique<detail::stream_slot>());
    slots_.back()->stream = s;
    last_slot_ = slots_.back().get();
    return *last_slot_;
  }

  /// `max_split_bytes`: an oversize block never serves a smaller request, and serves a larger one
  /// only when little of it would be wasted.
  [[nodiscard]] bool acceptable(const detail::block* b, std::size_t size) const noexcept {
    if (size < options_.max_split_bytes) return b->size < options_.max_split_bytes;
    return b->size < size + large_buffer_bytes;
  }

  void* hand_out(detail::block* b, detail::stream_slot& slot, std::size_t size, std::size_t bytes) {
    if (b->whole_segment()) idle_bytes_ -= b->size;
    b->state = detail::block_state::allocated;  // before the rest is inserted: it must not merge back
    const std::size_t rest = b->size - size;
    // As PyTorch: a block serving a request of max_split_bytes or more is never split.
    // In an expandable segment any rest is worth keeping (as PyTorch does): it merges with the
    // range's next growth instead of being wasted.
    const bool split = size < options_.max_split_bytes &&
                       (b->small != 0 || b->expandable() ? rest >= options_.round_bytes
                                                          : rest > options_.small_request_bytes);
    if (split) {
      detail::block* r = split_off(b, size, arena_.make());
      r->owner = &slot;
      r->aux = b->owner == &slot ? b->aux : slot.current_epoch();
      insert_free(r);
    }
    b->owner = &slot;
    b->aux = static_cast<std::uint32_t>(b->size - bytes);
    b->u.used.tag = tag_scope::current();
    map_.insert(b);
    if constexpr (Statistics) {
      stats_.allocated_bytes.add(static_cast<std::int64_t>(b->size));
      stats_.requested_bytes.add(static_cast<std::int64_t>(bytes));
      stats_.allocations.add(1);  // cache_hits is derived from it in statistics()
      // active == allocated + pending, and it rises only here: its peak needs tracking only
      // while blocks are pending (otherwise it is the allocated peak, folded in by statistics()).
      if (pending_bytes_ != 0) [[unlikely]] {
        const auto active = stats_.allocated_bytes.current + static_cast<std::int64_t>(pending_bytes_);
        if (active > stats_.active_bytes.peak) stats_.active_bytes.peak = active;
      }
    }
    detail::nvtx::register_region(reinterpret_cast<void*>(b->addr), bytes);
    return reinterpret_cast<void*>(b->addr);
  }

  /// Puts a free block into its owner's index, merged with free neighbours of the same owner.
  /// Inlined: it is half of every free and of every split on the hit path.
  MGM_HOT_INLINE detail::block* insert_free(detail::block* b) noexcept {
    b->state = detail::block_state::free;
    detail::tlsf_index& index = b->owner->index(b->small != 0);
    if (detail::block* p = b->prev;
        p != nullptr && p->state == detail::block_state::free && p->owner == b->owner && !p->unmapped()) {
      index.remove(p);
      p->size += b->size;
      p->next = b->next;
      if (b->next != nullptr) b->next->prev = p;
      p->aux = b->aux;  // the later free: an event covering it covers both
      arena_.recycle(b);
      b = p;
    }
    if (detail::block* n = b->next;
        n != nullptr && n->state == detail::block_state::free && n->owner == b->owner && !n->unmapped()) {
      index.remove(n);
      b->size += n->size;
      b->next = n->next;
      if (n->next != nullptr) n->next->prev = b;
      arena_.recycle(n);
    }
    if (b->whole_segment()) idle_bytes_ += b->size;
    index.insert(b);
    return b;
  }

  /// Puts a range without memory behind it into its owner's unmapped index, merged with unmapped
  /// neighbours.
  void insert_unmapped(detail::block* b) noexcept {
    b->state = detail::block_state::free;
    b->set_unmapped(true);
    detail::tlsf_index& index = b->owner->unmapped_index(b->small != 0);
    if (detail::block* p = b->prev; p != nullptr && p->state == detail::block_state::free && p->unmapped()) {
      index.remove(p);
      p->size += b->size;
      p->next = b->next;
      if (b->next != nullptr) b->next->prev = p;
      arena_.recycle(b);
      b = p;
    }
    if (detail::block* n = b->next; n != nullptr && n->state == detail::block_state::free && n->unmapped()) {
      index.remove(n);
      b->size += n->size;
      b->next = n->next;
      if (n->next != nullptr) n->next->prev = b;
      arena_.recycle(n);
    }
    index.insert(b);
  }

  // ---- the slow path -----------------------------------------------------------------------------

  detail::block* allocate_slow(std::unique_lock<std::mutex>& lock, detail::stream_slot& slot, std::size_t size,
                               bool small, stream_ref stream) {
    detail::tlsf_index& index = slot.index(small);
    const bool capturing = ops_.is_capturing(stream);
    if (detail::block* b = index.scan(size); b != nullptr && acceptable(b, size)) {
      index.remove(b);
      return b;
    }
    if (capturing) {
      throw bad_alloc{"caching_pool on " + detail::describe_device(device_) + ": no cached block of " +
                      format_bytes(size) +
                      " for a stream that is capturing a CUDA graph, and no upstream allocation is allowed "
                      "during capture; run the captured work once before capturing so the pool holds its blocks"};
    }
    if (detail::block* b = steal(slot, size, small, stream)) return b;
    // Small requests keep plain 2 MiB segments (one granule each): released whole when idle, they
    // fragment less than small blocks packed into a shared range whose granules they pin.
    if (expandable_ && size >= options_.large_direct_bytes) return grow_expandable(lock, slot, size, small, stream);
    return allocate_segment(lock, slot, size, small, stream);
  }

  /// A block of another stream's cache, made safe for `stream` by an event.
  detail::block* steal(detail::stream_slot& slot, std::size_t size, bool small, stream_ref stream) {
    for (auto& other : slots_) {
      if (other.get() == &slot) continue;
      detail::tlsf_index& index = other->index(small);
      if (index.empty()) continue;
      detail::block* b = index.find(size);
      if (b == nullptr || !acceptable(b, size)) b = index.scan(size);
      if (b == nullptr || !acceptable(b, size)) continue;
      if (ops_.is_capturing(stream_ref{other->stream})) continue;
      event_type& e = covering_event(b);
      if (!other->event_complete) other->event_complete = ops_.query(e);
      if (!other->event_complete) ops_.wait(stream, e);  // on the device: the host does not block
      index.remove(b);
      b->owner = &slot;
      b->aux = slot.next_epoch();  // events recorded on `stream` before the wait do not cover it
      if constexpr (Statistics) ++stats_.stream_steals;
      return b;
    }
    return nullptr;
  }

  [[nodiscard]] std::size_t segment_size(std::size_t size, bool small) const noexcept {
    if (small) return options_.small_segment_bytes;
    if (size < options_.large_direct_bytes) return std::max(options_.large_segment_bytes, size);
    std::size_t seg = size;
    (void)mgm::detail::round_up(size, options_.segment_round_bytes, seg);
    return seg;
  }

  /// Goes upstream (without the lock) through the out-of-memory pipeline, and returns the new
  /// segment as one free block, not yet in any index.
  detail::block* allocate_segment(std::unique_lock<std::mutex>& lock, detail::stream_slot& slot, std::size_t size,
                                  bool small, stream_ref stream) {
    std::size_t seg = segment_size(size, small);
    lock.unlock();
    void* p = try_upstream(seg, stream);
    if (p == nullptr) {
      // 1. Give back what this pool holds idle, and retry with the smallest segment that serves.
      {
        std::unique_lock relock{mutex_};
        process_pending(true);
        trim(relock, 0);
        if constexpr (Statistics) ++stats_.oom_retries;
      }
      std::size_t minimal = size;
      (void)mgm::detail::round_up(size, small ? options_.round_bytes : options_.segment_round_bytes, minimal);
      seg = small ? seg : minimal;
      p = try_upstream(seg, stream);
      // 2. The user's handler may free memory and ask for one more try.
      if (p == nullptr) {
        oom_info info = describe_oom(size);
        oom_handler handler;
        {
          const std::lock_guard relock{mutex_};
          handler = handler_;
        }
        if (handler && handler(info)) {
          {
            std::unique_lock relock{mutex_};  // what the handler freed may sit in this pool's cache
            process_pending(true);
            trim(relock, 0);
          }
          p = try_upstream(seg, stream);
        }
        if (p == nullptr) {
          info = describe_oom(size);
          {
            const std::lock_guard relock{mutex_};
            if constexpr (Statistics) ++stats_.ooms;
          }
          throw out_of_memory{detail::describe_pool_oom(info), size};
        }
      }
    }
    lock.lock();
    detail::block* b = nullptr;
    try {
      b = arena_.make();
    } catch (...) {
      lock.unlock();
      upstream_.deallocate_async(p, seg, cuda_allocation_alignment, stream);
      throw;
    }
    b->addr = reinterpret_cast<std::uintptr_t>(p);
    b->size = seg;
    b->small = small ? 1 : 0;
    b->owner = &slot;
    b->aux = slot.next_epoch();  // new memory: no event recorded before now covers it
    segments_.push_back(b);
    detail::nvtx::register_heap(p, seg);
    reserved_ += seg;
    idle_bytes_ += seg;  // hand_out takes it off again
    if constexpr (Statistics) {
      stats_.reserved_bytes.add(static_cast<std::int64_t>(seg));
      stats_.segments.add(1);
      ++stats_.upstream_allocations;
      ++stats_.cache_misses;
    }
    return b;
  }

  /// One upstream allocation; nullptr when the upstream is out of memory.
  void* try_upstream(std::size_t bytes, stream_ref stream) {
    try {
      return upstream_.allocate_async(bytes, cuda_allocation_alignment, stream);
    } catch (const out_of_memory&) {
      return nullptr;
    }
  }

  oom_info describe_oom(std::size_t size) const {
    oom_info info;
    info.device = device_;
    info.requested_bytes = size;
    info.max_split_bytes = options_.max_split_bytes;
    {
      const std::lock_guard lock{mutex_};
      std::size_t largest = 0;
      std::size_t free_bytes = 0;
      for (const auto& slot : slots_) {
        for (const detail::tlsf_index* index : {&slot->small, &slot->large}) {
          free_bytes += index->bytes();
          if (const detail::block* b = index->largest(); b != nullptr) largest = std::max(largest, b->size);
        }
      }
      info.reserved_bytes = reserved_;
      info.idle_cached_bytes = free_bytes + pending_bytes_;
      info.allocated_bytes = reserved_ - info.idle_cached_bytes;
      info.largest_free_bytes = largest;
    }
    if constexpr (requires(const Upstream& u) { { u.free_bytes() } -> std::convertible_to<std::size_t>; }) {
      try {
        info.device_free_bytes = upstream_.free_bytes();
      } catch (...) {  // a figure for the message only
      }
    }
    return info;
  }

  /// A segment whose blocks are all free but cached by different streams cannot merge (each
  /// stream may reuse only its own blocks at once). For release, give every block to the head's
  /// stream: that stream waits, on the device, for an event on each other stream; then the
  /// segment is one idle block again. Streams capturing a graph are left alone.
  void unify_free_segments() {
    for (detail::block* head : segments_) {
      if (head->whole_segment() || head->state != detail::block_state::free) continue;
      bool all_free = true;
      bool capturing = false;
      for (const detail::block* b = head; b != nullptr && all_free; b = b->next) {
        all_free = b->state == detail::block_state::free;
      }
      if (!all_free) continue;
      detail::stream_slot* target = head->owner;
      for (const detail::block* b = head; b != nullptr && !capturing; b = b->next) {
        capturing = ops_.is_capturing(stream_ref{b->owner->stream});
      }
      if (capturing) continue;
      for (detail::block* b = head->next; b != nullptr; b = b->next) {
        detail::stream_slot* other = b->owner;
        if (other == target || (detail::event_covers(*other, b->aux) && other->event_complete)) {
          continue;
        }
        if (other->event < 0) other->event = acquire_event();
        event_type& e = events_[static_cast<std::size_t>(other->event)];
        if (!detail::event_covers(*other, b->aux)) {
          ops_.record(e, stream_ref{other->stream});
          other->event_epoch = other->free_epoch;
          other->event_recorded = true;
          other->event_complete = false;
        }
        ops_.wait(stream_ref{target->stream}, e);
      }
      // Merge the whole chain into the head, now owned by the target stream.
      std::size_t total = 0;
      for (detail::block* b = head; b != nullptr;) {
        detail::block* next = b->next;
        b->owner->index(b->small != 0).remove(b);
        total += b->size;
        if (b != head) arena_.recycle(b);
        b = next;
      }
      head->size = total;
      head->next = nullptr;
      head->owner = target;
      head->aux = target->next_epoch();
      insert_free(head);
    }
  }

  /// Returns idle segments to the upstream until `reserved <= keep`; unlocks for the upstream calls.
  std::size_t trim(std::unique_lock<std::mutex>& lock, std::size_t keep) noexcept {
    std::vector<idle_segment> victims;
    try {
      unify_free_segments();
    } catch (const std::exception& e) {
      log(log_level::warning, std::string{"caching_pool: release could not merge a segment cached by several "
                                          "streams: "} + e.what());
    }
    try {
      for (auto& slot : slots_) {
        for (detail::tlsf_index* index : {&slot->small, &slot->large}) {
          index->for_each([&](detail::block* b) {
            if (reserved_ <= keep || !b->whole_segment() || b->expandable()) return;
            index->remove(b);
            victims.push_back({b->addr, b->size, b->owner->stream});
            reserved_ -= b->size;
            idle_bytes_ -= b->size;
            segments_.erase(std::find(segments_.begin(), segments_.end(), b));
            if constexpr (Statistics) {
              stats_.reserved_bytes.sub(static_cast<std::int64_t>(b->size));
              stats_.segments.sub(1);
              ++stats_.upstream_frees;
            }
            arena_.recycle(b);
          });
        }
      }
    } catch (...) {  // no memory for the victim list: release what was collected
    }
    lock.unlock();
    std::size_t released = 0;
    for (const auto& v : victims) {
      detail::nvtx::unregister_heap(reinterpret_cast<void*>(v.addr));
      upstream_.deallocate_async(reinterpret_cast<void*>(v.addr), v.size, cuda_allocation_alignment,
                                 stream_ref{v.stream});
      released += v.size;
    }
    lock.lock();
    if (expandable_ && reserved_ > keep) released += unmap_idle_granules(lock, keep);
    return released;
  }

  // ---- expandable segments ----------------------------------------------------------------------

  static typename detail::vmm_of<Upstream>::type make_vmm(const Upstream& u) {
    if constexpr (vmm_allocator<Upstream>) {
      return u.vmm_ops();
    } else {
      (void)u;
      return {};
    }
  }

  expandable_segment& segment_of(const detail::block* b) {
    for (auto& seg : expandables_) {
      if (b->addr >= seg->base && b->addr < seg->base + seg->bytes) return *seg;
    }
    MGM_FAIL("caching_pool: a block outside its expandable segments");
  }

  template <class Fn>
  void for_each_mapped_run(const expandable_segment& seg, Fn&& fn) {
    std::size_t g = 0;
    while (g < seg.handles.size()) {
      if (seg.handles[g] == 0) {
        ++g;
        continue;
      }
      const std::size_t first = g;
      while (g < seg.handles.size() && seg.handles[g] != 0) ++g;
      fn(seg.base + first * granule_, (g - first) * granule_);
    }
  }

  /// Serves a miss from the stream's expandable segments: maps the granules the request needs
  /// (after a free neighbour below, if any) without the lock, then hands out the block. Reserves a
  /// new range when none has room. Out of memory: unmap idle granules everywhere and retry; then
  /// the handler; then `out_of_memory`.
  detail::block* grow_expandable(std::unique_lock<std::mutex>& lock, detail::stream_slot& slot, std::size_t size,
                                 bool small, stream_ref stream) {
    if constexpr (!vmm_allocator<Upstream>) {
      return allocate_segment(lock, slot, size, small, stream);
    } else {
      int attempt = 0;
      while (true) {
        detail::tlsf_index& free_ranges = slot.unmapped_index(small);
        detail::block* u = free_ranges.find(size);
        if (u == nullptr) u = free_ranges.scan(size);
        if (u == nullptr) {
          reserve_expandable(lock, slot, size, small);
          continue;
        }
        // Start from a free mapped neighbour below, so that growth extends it.
        detail::block* below = u->prev;
        if (below != nullptr && !(below->state == detail::block_state::free && !below->unmapped() &&
                                  below->owner == &slot && below->size < size)) {
          below = nullptr;  // (a free block below as large as the request was passed over on purpose)
        }
        const std::uintptr_t start = below != nullptr ? below->addr : u->addr;
        std::size_t map_bytes = start + size - u->addr;
        (void)mgm::detail::round_up(map_bytes, granule_, map_bytes);
        map_bytes = std::min(map_bytes, u->size);
        free_ranges.remove(u);
        mark_busy(u);  // no one else touches it while unlocked
        if (below != nullptr) {
          slot.index(small).remove(below);
          if (below->whole_segment()) idle_bytes_ -= below->size;
          mark_busy(below);
        }
        expandable_segment& seg = segment_of(u);
        const std::uintptr_t va = u->addr;
        const std::vector<device_id> readers = peers_;  // read under the lock
        lock.unlock();
        std::vector<typename Upstream::vmm_ops_type::physical_handle> made;
        bool ok = true;
        try {
          for (std::size_t off = 0; off < map_bytes; off += granule_) {
            const auto h = vmm_.create(device_, granule_);
            made.push_back(h);
            vmm_.map(reinterpret_cast<void*>(va + off), granule_, h);
          }
          vmm_.set_access(reinterpret_cast<void*>(va), map_bytes, readers);
        } catch (const out_of_memory&) {
          ok = false;
        } catch (...) {
          undo_map(va, made);
          lock.lock();
          restore_after_failed_map(u, below, slot, small);
          throw;
        }
        if (!ok) undo_map(va, made);
        lock.lock();
        if (!ok) {
          restore_after_failed_map(u, below, slot, small);
          ++attempt;
          if (attempt == 1) {
            process_pending(true);
            trim(lock, 0);
            if constexpr (Statistics) ++stats_.oom_retries;
            continue;
          }
          if (attempt == 2) {
            lock.unlock();
            oom_info info = describe_oom(size);
            oom_handler handler;
            {
              const std::lock_guard relock{mutex_};
              handler = handler_;
            }
            const bool retry = handler && handler(info);
            lock.lock();
            if (retry) {
              process_pending(true);
              trim(lock, 0);
              continue;
            }
          }
          if constexpr (Statistics) ++stats_.ooms;
          lock.unlock();
          const oom_info info = describe_oom(size);
          lock.lock();
          throw out_of_memory{detail::describe_pool_oom(info), size};
        }
        // A peer granted access while the lock was released: give it these granules too.
        if (peers_ != readers) vmm_.set_access(reinterpret_cast<void*>(va), map_bytes, peers_);
        // Record the new granules, split the range, and merge the mapped part with `below`.
        const std::size_t first = (va - seg.base) / granule_;
        for (std::size_t i = 0; i < made.size(); ++i) seg.handles[first + i] = made[i];
        reserved_ += map_bytes;
        if constexpr (Statistics) {
          stats_.reserved_bytes.add(static_cast<std::int64_t>(map_bytes));
          stats_.upstream_allocations += made.size();
          ++stats_.cache_misses;
        }
        if (map_bytes < u->size) insert_unmapped(split_off(u, map_bytes, arena_.make()));
        u->set_unmapped(false);
        u->owner = &slot;
        u->aux = slot.next_epoch();  // new memory: no earlier event covers it
        if (below != nullptr) {
          below->state = detail::block_state::free;
          if (below->whole_segment()) idle_bytes_ += below->size;
          slot.index(small).insert(below);
        }
        detail::block* b = insert_free(u);
        slot.index(small).remove(b);  // hand_out takes it off idle_bytes_ if it is a whole segment
        return b;
      }
    }
  }

  void undo_map(std::uintptr_t va, const auto& made) noexcept {
    if constexpr (vmm_allocator<Upstream>) {
      for (std::size_t i = 0; i < made.size(); ++i) {
        vmm_.unmap(reinterpret_cast<void*>(va + i * granule_), granule_);  // logs if it was not mapped
        vmm_.release(made[i]);
      }
    }
  }

  void restore_after_failed_map(detail::block* u, detail::block* below, detail::stream_slot& slot, bool small) noexcept {
    u->state = detail::block_state::free;
    slot.unmapped_index(small).insert(u);
    if (below != nullptr) {
      below->state = detail::block_state::free;
      if (below->whole_segment()) idle_bytes_ += below->size;
      slot.index(small).insert(below);
    }
  }

  /// A new reserved range for the stream and size class (the device's memory and an eighth, as
  /// PyTorch reserves, or the request if larger).
  void reserve_expandable(std::unique_lock<std::mutex>& lock, detail::stream_slot& slot, std::size_t size, bool small) {
    if constexpr (vmm_allocator<Upstream>) {
      std::size_t bytes = upstream_.total_bytes() / 8 * 9;
      bytes = std::max(bytes, size);
      (void)mgm::detail::round_up(bytes, granule_, bytes);
      lock.unlock();
      void* va = nullptr;
      try {
        va = vmm_.reserve(device_, bytes);
      } catch (...) {
        lock.lock();
        throw;
      }
      lock.lock();
      auto seg = std::make_unique<expandable_segment>();
      seg->base = reinterpret_cast<std::uintptr_t>(va);
      seg->bytes = bytes;
      seg->owner = &slot;
      seg->small = small;
      seg->handles.assign(bytes / granule_, 0);
      detail::block* head = arena_.make();
      head->addr = seg->base;
      head->size = bytes;
      head->small = small ? 1 : 0;
      head->vm = 1;
      head->owner = &slot;
      seg->head = head;
      expandables_.push_back(std::move(seg));
      detail::nvtx::register_heap(va, bytes);
      if constexpr (Statistics) stats_.segments.add(1);
      insert_unmapped(head);
    }
  }

  /// Unmaps every whole granule of every free mapped block of the expandable segments, until
  /// `reserved <= keep`. A block's stream may still use it: its event is waited for first (the
  /// release path may block the host). Unmapping happens without the lock.
  std::size_t unmap_idle_granules(std::unique_lock<std::mutex>& lock, std::size_t keep) noexcept {
    if constexpr (!vmm_allocator<Upstream>) {
      return 0;
    } else {
      struct work {
        detail::block* b;
        std::vector<typename Upstream::vmm_ops_type::physical_handle> handles;
      };
      std::vector<work> todo;
      std::size_t released = 0;
      try {
        for (auto& seg : expandables_) {
          merge_idle_runs(*seg);
          for (detail::block* b = seg->head; b != nullptr && reserved_ > keep; b = b->next) {
            if (b->state != detail::block_state::free || b->unmapped()) continue;
            std::uintptr_t ga = b->addr;
            (void)mgm::detail::round_up(ga, granule_, ga);
            std::uintptr_t gb = (b->addr + b->size) & ~(static_cast<std::uintptr_t>(granule_) - 1);
            if (gb <= ga) continue;
            gb = std::min<std::uintptr_t>(gb, ga + std::max<std::size_t>(reserved_ - keep, granule_) / granule_ * granule_ +
                                                  (((reserved_ - keep) % granule_) != 0 ? granule_ : 0));
            detail::stream_slot* owner = b->owner;
            if (ops_.is_capturing(stream_ref{owner->stream})) continue;
            wait_idle(b);  // the stream may still read this memory
            // Split b into [addr, ga) [ga, gb) [gb, end); the middle goes. The records are made
            // first: nothing may fail once b has left its index.
            detail::block* spare_low = arena_.make();
            detail::block* spare_tail = arena_.make();
            owner->index(b->small != 0).remove(b);
            if (b->whole_segment()) idle_bytes_ -= b->size;
            const std::uintptr_t end = b->addr + b->size;
            detail::block* low = nullptr;
            detail::block* mid = b;
            detail::block* tail = nullptr;
            if (ga > b->addr) {
              low = b;
              mid = split_off(b, ga - b->addr, std::exchange(spare_low, nullptr));  // b keeps [addr, ga)
            }
            if (gb < end) tail = split_off(mid, gb - mid->addr, std::exchange(spare_tail, nullptr));  // mid keeps [ga, gb)
            if (spare_low != nullptr) arena_.recycle(spare_low);
            if (spare_tail != nullptr) arena_.recycle(spare_tail);
            // Busy before the neighbours go back: they must not merge with it.
            mark_busy(mid);
            mid->set_unmapped(true);
            if (low != nullptr) insert_free(low);
            if (tail != nullptr) insert_free(tail);
            work w{mid, {}};
            const std::size_t first = (mid->addr - seg->base) / granule_;
            for (std::size_t g = 0; g < mid->size / granule_; ++g) {
              w.handles.push_back(seg->handles[first + g]);
              seg->handles[first + g] = 0;
            }
            reserved_ -= mid->size;
            if constexpr (Statistics) {
              stats_.reserved_bytes.sub(static_cast<std::int64_t>(mid->size));
              stats_.upstream_frees += w.handles.size();
            }
            released += mid->size;
            b = mid;
            todo.push_back(std::move(w));
          }
        }
      } catch (const std::exception& ex) {
        log(log_level::warning, std::string{"caching_pool: could not unmap idle granules: "} + ex.what());
      }
      lock.unlock();
      for (const auto& w : todo) {
        for (std::size_t g = 0; g < w.handles.size(); ++g) {
          vmm_.unmap(reinterpret_cast<void*>(w.b->addr + g * granule_), granule_);
          vmm_.release(w.handles[g]);
        }
      }
      lock.lock();
      for (const auto& w : todo) {
        w.b->owner = segment_of(w.b).owner;
        insert_unmapped(w.b);
      }
      return released;
    }
  }

  /// The owner's event, recorded anew unless it already covers `b`'s free (one event per batch
  /// of frees: every free before the recording is covered).
  event_type& covering_event(const detail::block* b) {
    detail::stream_slot* owner = b->owner;
    if (owner->event < 0) owner->event = acquire_event();
    event_type& e = events_[static_cast<std::size_t>(owner->event)];
    if (!detail::event_covers(*owner, b->aux)) {
      ops_.record(e, stream_ref{owner->stream});
      owner->event_epoch = owner->free_epoch;
      owner->event_recorded = true;
      owner->event_complete = false;
    }
    return e;
  }

  /// The host waits until `b`'s stream has finished with it (release paths only).
  void wait_idle(const detail::block* b) {
    detail::stream_slot* owner = b->owner;
    event_type& e = covering_event(b);
    if (!owner->event_complete) {
      ops_.synchronize(e);
      owner->event_complete = true;
    }
  }

  /// Free mapped neighbours cached by different streams cannot merge while in use; on release the
  /// host waits for their streams, then merges them, so that the granules they share can go too.
  void merge_idle_runs(expandable_segment& seg) {
    for (detail::block* b = seg.head; b != nullptr; b = b->next) {
      if (b->state != detail::block_state::free || b->unmapped()) continue;
      // Wait for every stream of the run first: nothing leaves its index before all waits succeed.
      detail::block* end = b;
      while (detail::block* n = end->next) {
        if (n->state != detail::block_state::free || n->unmapped()) break;
        if (ops_.is_capturing(stream_ref{end->owner->stream}) || ops_.is_capturing(stream_ref{n->owner->stream})) break;
        wait_idle(end);
        wait_idle(n);
        end = n;
      }
      bool taken = false;
      while (b != end) {
        detail::block* n = b->next;
        if (!taken) {
          b->owner->index(b->small != 0).remove(b);
          if (b->whole_segment()) idle_bytes_ -= b->size;
          taken = true;
        }
        n->owner->index(n->small != 0).remove(n);
        if (n->whole_segment()) idle_bytes_ -= n->size;
        b->size += n->size;
        b->next = n->next;
        if (n->next != nullptr) n->next->prev = b;
        if (n == end) end = b;
        arena_.recycle(n);
      }
      if (taken) {
        b->aux = b->owner->next_epoch();
        b = insert_free(b);
      }
    }
  }

  /// Out of every index while the lock is released (growing, unmapping): no free-list links, no tag.
  static void mark_busy(detail::block* b) noexcept {
    b->state = detail::block_state::pending;
    b->u.used.hash_next = nullptr;
    b->u.used.tag = nullptr;
  }

  /// Splits `b` at `offset`; returns the upper part (same state and flags, not in any index).
  /// `r` is a fresh record from the arena.
  detail::block* split_off(detail::block* b, std::size_t offset, detail::block* r) noexcept {
    r->addr = b->addr + offset;
    r->size = b->size - offset;
    r->prev = b;
    r->next = b->next;
    if (b->next != nullptr) b->next->prev = r;
    b->next = r;
    r->small = b->small;
    r->vm = b->vm;
    r->owner = b->owner;
    r->aux = b->aux;
    r->state = b->state;
    b->size = offset;
    return r;
  }

  // ---- blocks used on several streams -------------------------------------------------------------

  int acquire_event() {
    if (!free_events_.empty()) {
      const int e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
    // A host pool's events live on device 0 (CUDA records them on whichever device's stream).
    events_.push_back(ops_.create_event(device_.is_host() ? device_id{0} : device_));
    return static_cast<int>(events_.size() - 1);
  }

  void free_with_other_uses(detail::block* b, detail::stream_slot& slot) noexcept {
    pending_free pf{b, {}};
    try {
      auto node = extra_uses_.extract(b);
      if (!node.empty()) {
        for (cudaStream_t u : node.mapped()) {
          const int e = acquire_event();
          pf.events.emplace_back(e, u);
          ops_.record(events_[static_cast<std::size_t>(e)], stream_ref{u});
        }
      }
      b->extra_streams = 0;
      b->owner = &slot;
      b->state = detail::block_state::pending;
      pending_.push_back(std::move(pf));
      pending_bytes_ += b->size;
    } catch (const std::exception& e) {
      // Without the events the block cannot be proven idle on the other streams: keep it out of
      // the cache for good rather than risk handing it out early.
      log(log_level::error, std::string{"caching_pool: cannot record the events of a block used on other streams; "
                                        "it stays reserved: "} + e.what());
      b->extra_streams = 0;
      b->state = detail::block_state::pending;
    }
  }

  void process_pending(bool may_query) noexcept {
    if (!may_query) return;
    for (std::size_t i = 0; i < pending_.size();) {
      bool done = true;
      try {
        for (const auto& [e, s] : pending_[i].events) {
          if ((s != nullptr && ops_.is_capturing(stream_ref{s})) || !ops_.query(events_[static_cast<std::size_t>(e)])) {
            done = false;
            break;
          }
        }
      } catch (...) {
        done = false;
      }
      if (!done) {
        ++i;
        continue;
      }
      pending_free pf = std::move(pending_[i]);
      pending_[i] = std::move(pending_.back());
      pending_.pop_back();
      for (const auto& ev : pf.events) free_events_.push_back(ev.first);
      pending_bytes_ -= pf.b->size;
      pf.b->aux = pf.b->owner->next_epoch();
      insert_free(pf.b);
    }
  }

  // ---- errors and the end -----------------------------------------------------------------------

  [[noreturn]] void throw_too_large(std::size_t bytes) const {
    throw out_of_memory{"caching_pool on " + detail::describe_device(device_) + ": a request of " +
                            mgm::detail::describe_bytes(bytes) + " exceeds any device's memory",
                        bytes};
  }

  void report_invalid_free(void* p, std::size_t bytes) const noexcept {
    try {
      char addr[32];
      std::snprintf(addr, sizeof addr, "%p", p);
      log(log_level::error, "caching_pool on " + detail::describe_device(device_) + ": deallocate(" + addr + ", " +
                                std::to_string(bytes) +
                                ") of a pointer that is not a live allocation of this pool (never allocated here, "
                                "or already freed); nothing was changed");
    } catch (...) {
    }
  }

  void destroy() noexcept {
    registration_.reset();  // first: the registry must not read a pool being torn down
    std::size_t leaked = map_.size();
    for (const auto& pf : pending_) {
      for (const auto& ev : pf.events) {
        try {
          ops_.synchronize(events_[static_cast<std::size_t>(ev.first)]);
        } catch (...) {
        }
      }
    }
    for (detail::block* head : segments_) {
      std::size_t seg = 0;
      for (const detail::block* b = head; b != nullptr; b = b->next) seg += b->size;
      detail::nvtx::unregister_heap(reinterpret_cast<void*>(head->addr));
      upstream_.deallocate(reinterpret_cast<void*>(head->addr), seg, cuda_allocation_alignment);
    }
    if constexpr (vmm_allocator<Upstream>) {
      for (const auto& seg : expandables_) {
        for (std::size_t g = 0; g < seg->handles.size(); ++g) {
          if (seg->handles[g] == 0) continue;
          vmm_.unmap(reinterpret_cast<void*>(seg->base + g * granule_), granule_);
          vmm_.release(seg->handles[g]);
        }
        detail::nvtx::unregister_heap(reinterpret_cast<void*>(seg->base));
        vmm_.unreserve(reinterpret_cast<void*>(seg->base), seg->bytes);
      }
    }
    for (auto& e : events_) ops_.destroy_event(e);
    if (leaked != 0) {
      try {
        log(log_level::warning, "caching_pool on " + detail::describe_device(device_) + ": destroyed with " +
                                    std::to_string(leaked) + " blocks still allocated; their memory was freed");
      } catch (...) {
      }
    }
  }

  Upstream upstream_;
  stream_ops_type ops_;
  device_id device_;
  pool_options options_;
  oom_handler handler_;
  std::size_t round_mask_{255};

  mutable std::mutex mutex_;
  detail::block_arena arena_;
  detail::block_map map_;
  std::vector<std::unique_ptr<detail::stream_slot>> slots_;
  detail::stream_slot* last_slot_{nullptr};
  std::vector<std::unique_ptr<detail::stream_slot>> retired_;  // forgotten streams' slots (live blocks point at them)
  std::vector<detail::block*> segments_;  // segment heads
  std::vector<event_type> events_;
  std::vector<int> free_events_;
  std::vector<pending_free> pending_;
  std::unordered_map<detail::block*, std::vector<cudaStream_t>> extra_uses_;
  typename detail::vmm_of<Upstream>::type vmm_;
  bool expandable_{false};
  std::size_t granule_{0};
  std::vector<device_id> peers_;  // readers of every mapped granule: the device first
  std::vector<std::unique_ptr<expandable_segment>> expandables_;
  std::size_t reserved_{0};
  std::size_t idle_bytes_{0};
  std::size_t pending_bytes_{0};
  pool_statistics stats_;
  telemetry::pool_registration registration_;  // last member: leaves before the rest is destroyed
};

}  // namespace mgm
