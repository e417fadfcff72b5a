/// @file
/// @brief `caching_pool`: a per-device, stream-ordered caching allocator with an O(1) free index.
///
/// ## Glossary
/// - *upstream*: the allocator the pool takes memory from (`cuda_allocator`, a simulated device).
/// - *segment*: one upstream allocation (plain), or a reserved range mapped granule by granule
///   (expandable). *Small* segments (2 MiB) serve requests up to 1 MiB, *large* ones (at least
///   20 MiB, or the request rounded to 2 MiB from 10 MiB up) the rest.
/// - *block*: a piece of a segment, allocated or free; address neighbours in a segment are linked.
/// - *slot*: the cache of one stream: the free blocks that stream may reuse at once.
/// - *epoch*: a slot's count of frees; an event recorded at epoch E covers every free up to E.
/// - *private pool*: the memory of CUDA graph captures (`capture_pool_id`).
///
/// ## Behaviour
/// - Requests are rounded up to `round_bytes` (256) and looked up in the stream's index; a larger
///   free block is split when the rest is worth keeping; a freed block merges with its free
///   neighbours of the same stream. A small block of a plain segment freed on its own stream
///   merges later (delayed coalescing, up to 64 blocks a stream): the next request of its size
///   takes it whole, with no split. The merges are done when the list is full, before a small
///   request leaves the hit path, before memory is given back, and before the pool is observed.
/// - A block freed on stream S is reusable on S at once; another stream takes it only after an
///   event on S that covers the free, found complete or waited for on the device, never the host.
/// - `record_stream(p, U)`: p is also used on U; its free records an event on U, and the block is
///   reused only after those events completed.
/// - `allocate()`/`deallocate()` without a stream are ordered on the legacy default stream, as
///   RMM's are (the host touches device memory only through it: `cudaMemcpy`, `cudaMemset`). A
///   pool of host memory, which the host touches directly, waits for that stream first.
/// - A miss goes upstream without the lock held, through one out-of-memory pipeline: release this
///   pool's idle memory and retry; the `oom_handler`; then `mgm::out_of_memory` with the figures.
/// - `release(bytes_to_keep)` gives back idle segments and unmaps idle granules. With
///   `release_threshold_bytes`, a free that leaves reserved more than an eighth above it gives
///   back idle plain segments (from an index: no walk) and, once per such eighth freed, unmaps.
/// - Over shareable virtual memory (an upstream made with `vmm_sharing::shareable`) every segment
///   of the shared cache is expandable, small ones too, so that any of its blocks can be exported
///   (`export_block`, for another process) or registered with NCCL. A graph capture's private
///   pool still takes plain segments: its blocks are not shareable.
///
/// ## CUDA graphs: the contract
/// - What is allocated on a stream while it captures comes from a *private pool*: the capture's
///   own (automatic), or the one named with `begin_capture_pool(stream, id)` right after the
///   capture began (several captures may share one: graphs replayed one after another). Its
///   segments are taken under the relaxed capture mode; nothing is given back during a capture.
/// - Its memory, and every block of the shared cache freed during the capture, serve no work
///   outside that pool until `release_capture_pool(id)` (`capture_pool_of(stream)` names an
///   automatic pool). Call it once per capture that used the pool, after destroying its graphs
///   and after their launches completed. Buffers the graph reads but did not allocate during the
///   capture (its inputs) must stay allocated while it may be launched.
///
/// ## Streams
/// Call `forget_stream(s)` before destroying a stream the pool has seen: its cache then joins the
/// default stream's after its last work, and a later stream with the same handle starts afresh.
/// The pool cannot tell a destroyed stream from a new one with the same handle.
///
/// ## Failure
/// An allocation that throws (host `bad_alloc`, upstream out of memory, an event or a slot that
/// cannot be made) leaves every block as it was (a new segment may stay cached). A free never
/// fails: without memory for a slot or an event, the block waits (pending) until it can be proven
/// idle. `check_invariants()` checks what the parts' headers state.
///
/// ## Costs
/// Cache hit (alloc + free): one lock each (`pool_mutex`: an atomic exchange; the unlock is a
/// store); two bit scans; no allocation; one multiply and one compare in the block map; for a
/// small block freed and asked for again, no split and no merge (`scripts/measure-hit-path`:
/// 290 instructions per 4 KiB pair without statistics, 328 with them; 490 and 545 with a split
/// and a merge).
/// A pool is never `const` in use (it allocates): its observers do the deferred merges under the lock.
/// Statistics are a template switch.
#pragma once

#include <mgm/allocator_ref.hpp>
#include <mgm/bytes.hpp>
#include <mgm/concepts.hpp>
#include <mgm/device.hpp>
#include <mgm/error.hpp>
#include <mgm/log.hpp>
#include <mgm/pool/capture_pool_id.hpp>
#include <mgm/pool/detail/block_space.hpp>
#include <mgm/pool/detail/capture_pools.hpp>
#include <mgm/pool/detail/expandable_source.hpp>
#include <mgm/pool/detail/nvtx.hpp>
#include <mgm/pool/detail/pending_frees.hpp>
#include <mgm/pool/detail/pool_inspect.hpp>
#include <mgm/pool/detail/pool_mutex.hpp>
#include <mgm/pool/detail/pool_slow_paths.hpp>
#include <mgm/pool/detail/stream_retirement.hpp>
#include <mgm/pool/detail/segment_source.hpp>
#include <mgm/pool/detail/stream_cache.hpp>
#include <mgm/pool/oom_info.hpp>
#include <mgm/pool/pool_options.hpp>
#include <mgm/pool/pool_snapshot.hpp>
#include <mgm/pool/pool_statistics.hpp>
#include <mgm/pool/shared_block.hpp>
#include <mgm/properties.hpp>
#include <mgm/stream.hpp>
#include <mgm/tag.hpp>
#include <mgm/pool_observer.hpp>

#include <cstddef>
#include <cstdint>
#include <mutex>  // std::lock_guard, std::unique_lock
#include <vector>

namespace mgm {

/// @brief A caching, stream-ordered pool of one device's memory over `Upstream`.
/// @tparam Upstream an `mgm::platform_allocator` with a `device_affinity`; its `stream_ops_type`
///   is the pool's seam (so a pool over a simulated device never calls CUDA).
/// @tparam Statistics keep `pool_statistics` (false compiles every update out).
/// @throws from `allocate`: mgm::out_of_memory (see above), mgm::logic_error for a bad alignment
///   (a power of two up to 256 is honoured).
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

  explicit caching_pool(Upstream upstream, pool_options options = pool_options::from_env(), oom_handler handler = {})
      : upstream_{std::move(upstream)},
        ops_{upstream_.stream_ops()},
        device_{affinity_of(upstream_)},
        handler_{std::move(handler)},
        space_{validated(std::move(options))},
        cache_{ops_, device_},
        expand_{upstream_, device_, space_.options()} {
    if (expand_.on()) huge_bytes_ = std::max(space_.options().huge_request_bytes, space_.options().large_direct_bytes);
    detail::pool_inspect::init(*this);  // the threshold's margin, the telemetry registration
  }
  caching_pool(const caching_pool&) = delete;
  caching_pool& operator=(const caching_pool&) = delete;
  ~caching_pool() { detail::pool_inspect::destroy(*this); }

  // ---- allocation ------------------------------------------------------------------------------

  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) {
    mgm::detail::check_alignment(alignment, cuda_allocation_alignment, "caching_pool");
    if (bytes == 0) return nullptr;
    if (bytes > max_request_) [[unlikely]] detail::pool_inspect::throw_too_large(device_, bytes);
    const std::size_t size = (bytes + round_mask_) & ~round_mask_;
    const std::uint64_t capture = stream.get() == nullptr ? 0 : ops_.capture_id(stream);
    std::unique_lock lock{mutex_};
    if (capture != 0) [[unlikely]] return detail::pool_slow_paths::allocate_captured(*this, lock, size, bytes, stream, capture);
    detail::stream_slot& slot = cache_.slots().slot_for(stream.get());
    if (!pending_.empty()) [[unlikely]] detail::pool_slow_paths::process_pending(*this);
    const bool small = size <= space_.options().small_request_bytes;
    detail::block* b = slot.index(small).find(size);
    if (size < huge_bytes_ && b != nullptr && acceptable(b, size)) [[likely]] {
      prepare();
      space_.take_free(b);
    } else {
      b = detail::pool_slow_paths::allocate_slow(*this, lock, slot, size, small, stream);
    }
    void* p = hand_out(b, slot, size, bytes);
    detail::pool_inspect::debug_check(*this);
    return p;
  }

  void deallocate_async(void* p, std::size_t bytes, std::size_t /*alignment*/, stream_ref stream) noexcept {
    if (p == nullptr) return;
    const std::uint64_t capture = stream.get() == nullptr ? 0 : detail::pool_slow_paths::capture_of(*this, stream);
    std::unique_lock lock{mutex_};
    detail::block* b = space_.map.take(reinterpret_cast<std::uintptr_t>(p));
    if (b == nullptr) [[unlikely]] {
      lock.unlock();
      return detail::pool_inspect::report_invalid_free(device_, p, bytes);
    }
    detail::nvtx::unregister_region(p);
    if constexpr (Statistics) {
      space_.stats.allocated_bytes.sub(static_cast<std::int64_t>(b->size));
      space_.stats.requested_bytes.sub(static_cast<std::int64_t>(b->size - b->sized.slack));
      space_.stats.allocations.sub(1);
    }
    if (b->huge()) [[unlikely]] huge_freed_at_ = huge_allocs_;
    detail::stream_slot* slot = b->owner;
    const std::size_t freed = b->size;
    if (stream.get() != slot->stream || (slot->capture_pool | capture | b->extra_streams) != 0) [[unlikely]] {
      detail::pool_slow_paths::free_slow(*this, lock, b, stream, capture);
      if constexpr (Statistics) space_.inactive_split_rose(0, static_cast<std::size_t>(space_.stats.allocated_bytes.current));
    } else {
      b->free_epoch = slot->next_epoch();
      // A small plain block's merge waits (`insert_deferred`): the next request of its size takes it whole.
      // Its inactive bytes are counted now; the peak when the merges are done (`coalesce_deferred`),
      // for until then its segment looks split even when nothing else in it is used.
      if (b->small != 0 && b->vm == 0) {
        b = space_.insert_deferred(b);
        if constexpr (Statistics) {
          if (!b->whole_segment()) space_.stats.inactive_split_bytes.total += freed;
        }
      } else {
        b = space_.insert_free(b);
        if constexpr (Statistics) {
          if (!b->whole_segment()) space_.inactive_split_rose(freed, static_cast<std::size_t>(space_.stats.allocated_bytes.current));
        }
      }
    }
    if (space_.reserved > trim_at_) [[unlikely]] detail::pool_slow_paths::trim_for_threshold(*this, lock, freed);
    detail::pool_inspect::debug_check(*this);
  }

  /// @brief `allocate_async` on the legacy default stream (see above: a host pool waits for it).
  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = cuda_allocation_alignment) {
    void* p = allocate_async(bytes, alignment, stream_ref{});
    if (device_.is_host() && p != nullptr) [[unlikely]] detail::pool_slow_paths::wait_for_host(*this, p, bytes);
    return p;
  }
  void deallocate(void* p, std::size_t bytes, std::size_t alignment = cuda_allocation_alignment) noexcept {
    deallocate_async(p, bytes, alignment, stream_ref{});
  }

  /// @brief `p` (from this pool) is also used on `stream`: when it is freed, it is reused only
  /// after the work enqueued on `stream` by then has completed (PyTorch's `record_stream`).
  /// @throws mgm::logic_error when `p` is not a live allocation of this pool.
  void record_stream(void* p, stream_ref stream) {
    const std::lock_guard lock{mutex_};
    detail::block* b = space_.map.find(reinterpret_cast<std::uintptr_t>(p));
    MGM_EXPECTS(b != nullptr, "record_stream: the pointer is not a live allocation of this pool");
    if (stream.get() != b->owner->stream) pending_.add_use(b, stream.get());
  }

  // ---- CUDA graphs -----------------------------------------------------------------------------

  /// @brief The capture under way on `stream` allocates from private pool `id` (made if new),
  /// shared with the other captures given `id`. Call it right after the capture began.
  /// @throws mgm::logic_error when the stream is not capturing, or its capture has a pool already.
  void begin_capture_pool(stream_ref stream, capture_pool_id id) {
    MGM_EXPECTS(id.value != 0, "begin_capture_pool: capture_pool_id{0} names no pool (use capture_pool_id::make())");
    const std::uint64_t capture = ops_.capture_id(stream);
    MGM_EXPECTS(capture != 0, "begin_capture_pool: the stream is not capturing (call it after the capture began)");
    const std::lock_guard lock{mutex_};
    (void)captures_.bind(capture, id.value);
  }
  /// @brief The private pool of the capture under way on `stream` (its automatic one if none was
  /// named), to release after its graphs are destroyed. @throws mgm::logic_error when not capturing.
  [[nodiscard]] capture_pool_id capture_pool_of(stream_ref stream) {
    const std::uint64_t capture = ops_.capture_id(stream);
    MGM_EXPECTS(capture != 0, "capture_pool_of: the stream is not capturing");
    const std::lock_guard lock{mutex_};
    return capture_pool_id{captures_.for_capture(capture).id};
  }
  /// @brief One capture that used pool `id` is over for good (its graphs destroyed, their
  /// launches completed). After the last, the pool's memory rejoins the shared cache or the
  /// upstream. @throws mgm::logic_error for an unknown or already released pool.
  void release_capture_pool(capture_pool_id id) {
    std::unique_lock lock{mutex_};
    detail::private_pool* pool = captures_.find(id.value);
    MGM_EXPECTS(pool != nullptr && !pool->released(), "release_capture_pool: no such pool in use");
    captures_.unuse(*pool);
    if (pool->released()) detail::pool_inspect::release_private(*this, lock, *pool);
  }

  // ---- giving memory back ------------------------------------------------------------------------

  /// @brief Gives idle segments back and unmaps idle granules until at most `bytes_to_keep` stay
  /// reserved (or nothing idle is left). Returns the bytes released.
  std::size_t release(std::size_t bytes_to_keep = 0) {
    std::unique_lock lock{mutex_};
    detail::pool_slow_paths::process_pending(*this);
    const std::size_t released = detail::pool_slow_paths::trim(*this, lock, bytes_to_keep);
    if (space_.reserved == 0) pressed_ = false;  // an empty pool starts again
    return released;
  }

  /// @brief Bounds on what the pool takes from its upstream from now on (see `pool_limits`). What
  /// it holds already stays: lowering `max_reserved_bytes` below it gives nothing back by itself
  /// (call `release`).
  void set_limits(pool_limits limits) {
    const std::lock_guard lock{mutex_};
    limits_ = limits;
  }
  [[nodiscard]] pool_limits limits() const {
    const std::lock_guard lock{mutex_};
    return limits_;
  }

  /// @brief Whether new memory comes from expandable segments (see `pool_options`).
  [[nodiscard]] bool expandable() const noexcept { return expand_.on(); }

  /// @brief Gives `peer` read-write access to every granule of the expandable segments, mapped
  /// now or later. The placement layer calls it after enabling peer access. A no-op for plain segments.
  /// @throws mgm::cuda_error when the platform refuses (the peer cannot access this device).
  void grant_access(device_id peer) {
    const std::lock_guard lock{mutex_};
    expand_.grant_access(peer);
  }

  /// @brief Exports live allocation `p` for another process (see `shared_block.hpp`): a new
  /// descriptor for each physical chunk behind it, and its place in them. The block must stay
  /// allocated while this runs, and until every importer has let it go.
  /// @throws mgm::logic_error when `p` is not a live allocation of this pool, when it is not in an
  /// expandable segment, or when the upstream's virtual memory is process-local (make the upstream
  /// with `vmm_sharing::shareable`); mgm::cuda_error when the driver refuses.
  [[nodiscard]] shared_block export_block(const void* p)
    requires shareable_vmm_ops<typename detail::vmm_of<Upstream>::type>
  {
    std::vector<std::pair<typename detail::vmm_of<Upstream>::type::physical_handle, std::size_t>> chunks;
    shared_block out;
    out.device = device_;
    {
      const std::lock_guard lock{mutex_};
      const auto addr = reinterpret_cast<std::uintptr_t>(p);
      const detail::block* b = space_.map.find(addr);
      MGM_EXPECTS(b != nullptr, "export_block: " + mgm::detail::describe_address(p) +
                                    " is not a live allocation of this pool");
      MGM_EXPECTS(expand_.vmm().sharing() == vmm_sharing::shareable,
                  "export_block: the pool's virtual memory is process-local; make its upstream with "
                  "vmm_sharing::shareable (MGM_ALLOC_CONF shareable:True)");
      MGM_EXPECTS(b->expandable(), "export_block: the block is in a plain segment (from the upstream's allocate), "
                                   "which cannot be shared; turn expandable_segments on");
      auto [start, list] = expand_.chunks_behind(*b);
      MGM_EXPECTS(!list.empty(), "export_block: the block lies in no segment of this pool");
      out.offset = addr - start;
      out.size = b->size;
      chunks = std::move(list);
    }
    out.chunks.reserve(chunks.size());
    for (const auto& [h, bytes] : chunks) out.chunks.push_back(shared_chunk{unique_fd{expand_.vmm().export_handle(h)}, bytes});
    return out;
  }

  /// @brief Retires `stream`'s cache (see "Streams"); call it before destroying the stream. Blocks
  /// still allocated on it are freed as usual. If live blocks were `record_stream`ed on it, the
  /// host waits for it. @throws mgm::logic_error for the default stream or a capturing one;
  /// mgm::cuda_error from the platform, with the pool unchanged.
  void forget_stream(stream_ref stream) {
    MGM_EXPECTS(stream.get() != nullptr, "forget_stream: the default stream cannot be forgotten");
    std::unique_lock lock{mutex_};
    MGM_EXPECTS(!ops_.is_capturing(stream), "forget_stream: the stream is capturing a graph");
    detail::pool_inspect::forget_stream(*this, stream);
  }

  /// @brief For tests only: `stream`'s free epoch advances as `frees` frees would.
  void skip_free_epochs_for_testing(stream_ref stream, std::uint64_t frees) {
    const std::lock_guard lock{mutex_};
    cache_.slots().slot_for(stream.get()).free_epoch += frees;
  }

  void set_oom_handler(oom_handler handler) {
    const std::lock_guard lock{mutex_};
    handler_ = std::move(handler);
  }

  // ---- observation -------------------------------------------------------------------------------

  /// @brief The statistics (all zero when `Statistics` is false, except `reserved_bytes.current`).
  [[nodiscard]] pool_statistics statistics() const {
    const std::lock_guard lock{mutex_};
    coalesce_deferred();
    return detail::pool_inspect::statistics(*this);
  }
  /// @brief Every segment and block: address, size, state, stream, tag.
  [[nodiscard]] pool_snapshot snapshot() const {
    const std::lock_guard lock{mutex_};
    coalesce_deferred();
    return detail::pool_inspect::snapshot(*this);
  }
  /// @brief Checks every invariant the pool's parts state. @throws mgm::logic_error naming the
  /// first one broken.
  void check_invariants() const {
    const std::lock_guard lock{mutex_};
    detail::pool_inspect::check_invariants(*this);
  }
  [[nodiscard]] std::size_t reserved_bytes() const noexcept {
    const std::lock_guard lock{mutex_};
    return space_.reserved;
  }
  [[nodiscard]] device_id device() const noexcept { return device_; }
  [[nodiscard]] const pool_options& options() const noexcept { return space_.options(); }
  [[nodiscard]] Upstream& upstream() noexcept { return upstream_; }
  [[nodiscard]] stream_ops_type stream_ops() const noexcept { return ops_; }

  friend bool operator==(const caching_pool& a, const caching_pool& b) noexcept { return &a == &b; }
  template <class P>
    requires has_property<Upstream, P>
  friend auto get_property(const caching_pool& pool, P tag) noexcept {
    return get_property(pool.upstream_, tag);
  }

 private:
  friend struct detail::pool_inspect;
  friend struct detail::pool_slow_paths;
  using space_type = detail::block_space<Statistics>;
  static constexpr std::size_t large_buffer_bytes = std::size_t{20} << 20;
  static constexpr std::size_t max_request_ = std::size_t{1} << 60;

  static pool_options validated(pool_options o) {
    o.validate();
    return o;
  }

  /// `max_split_bytes`: an oversize block of a plain segment never serves a smaller request, and
  /// serves a larger one only when little of it would be wasted. A block of an expandable segment
  /// serves any request it holds: splitting it fragments nothing, since its rest merges back with
  /// its neighbours (with the rule, free runs of a range, merged past `max_split_bytes`, refused
  /// every smaller request, and a GPT-2 replay under `max_split_size:64MiB` reserved 8 x its live
  /// bytes).
  [[nodiscard]] bool acceptable(const detail::block* b, std::size_t size) const noexcept {
    const std::size_t max_split = space_.options().max_split_bytes;
    if (size < max_split ? b->size < max_split : b->size < size + large_buffer_bytes) return true;
    return b->expandable();  // looked at only when the rule refuses: not on the usual hit
  }
  /// As PyTorch: a block of a plain segment serving a request of max_split_bytes or more is never
  /// split, and a large block keeps a rest only above the small-request size. In an expandable
  /// segment any rest is worth keeping, whatever the request: it merges with its neighbours and
  /// the range's next growth (a growth into an unmapped hole can merge with a free block above it,
  /// far larger than the request). A small request served by a large block under pressure
  /// (`pool_slow_paths::from_other_pool`) takes only what it needs.
  [[nodiscard]] bool splits(const detail::block* b, std::size_t size) const noexcept {
    const std::size_t rest = b->size - size;
    if (b->expandable()) return rest >= space_.options().round_bytes;
    return size < space_.options().max_split_bytes &&
           (b->small != 0 || size <= space_.options().small_request_bytes ? rest >= space_.options().round_bytes
                                                                           : rest > space_.options().small_request_bytes);
  }
  /// The merges the hit path deferred, done before the pool is observed: statistics and snapshots
  /// show the cache as it is, not as it waits to be (logically const: no block changes hands).
  void coalesce_deferred() const noexcept {
    auto& self = const_cast<caching_pool&>(*this);
    self.space_.coalesce_all(self.cache_.slots());
  }
  /// What `hand_out` needs, made before the block leaves its index: then it cannot fail.
  MGM_HOT_INLINE void prepare() {
    space_.map.reserve_one();
    space_.arena.reserve(1);  // for a split: a compare, cheaper than deciding the split twice
  }
  void prepare_or_put_back(detail::block* b) {
    try {
      prepare();
    } catch (...) {
      space_.insert_free(b);
      throw;
    }
  }

  void* hand_out(detail::block* b, detail::stream_slot& slot, std::size_t size, std::size_t bytes) noexcept {
    b->state = detail::block_state::allocated;  // before the rest is inserted: it must not merge back
    std::size_t idle_split = 0;  // an idle segment split: its rest is inactive now
    if (splits(b, size)) {
      if (b->whole_segment()) idle_split = b->size - size;
      detail::block* r = space_.split_off(b, size);
      r->owner = &slot;
      r->free_epoch = b->owner == &slot ? b->free_epoch : slot.free_epoch;
      space_.insert_free(r);
    }
    b->owner = &slot;
    b->sized.slack = b->size - bytes;
    b->u.used.tag = tag_scope::current();
    space_.map.insert(b);
    if constexpr (Statistics) {
      pool_statistics& st = space_.stats;
      st.allocated_bytes.add(static_cast<std::int64_t>(b->size));
      st.requested_bytes.add(static_cast<std::int64_t>(bytes));
      st.allocations.add(1);  // cache_hits is derived from it in statistics()
      // active == allocated + pending: its peak needs tracking only while blocks are pending.
      if (space_.pending != 0) [[unlikely]] {
        const auto active = st.allocated_bytes.current + static_cast<std::int64_t>(space_.pending);
        if (active > st.active_bytes.peak) st.active_bytes.peak = active;
      }
      if (idle_split != 0) space_.inactive_split_rose(idle_split, static_cast<std::size_t>(st.allocated_bytes.current));
    }
    detail::nvtx::register_region(reinterpret_cast<void*>(b->addr), bytes);
    return reinterpret_cast<void*>(b->addr);
  }

  using plain_type = detail::segment_source<Upstream, Statistics>;
  Upstream upstream_;
  stream_ops_type ops_;
  device_id device_;
  oom_handler handler_;
  std::size_t round_mask_{255};
  std::size_t huge_bytes_{pool_options::unlimited};  // requests from here grow the huge range (expandable segments only)
  std::uint32_t huge_allocs_{0};     // blocks of a huge range handed out so far (modulo 2^32)
  std::uint32_t huge_freed_at_{0};   // huge_allocs_ when a block of a huge range was last freed
  std::size_t trim_at_{pool_options::unlimited};  // release threshold + margin
  std::size_t margin_{0};
  std::size_t freed_above_{0};  // bytes freed above trim_at_ since granules were last unmapped
  bool pressed_{false};         // a growth was refused since the pool was last empty: a miss looks at the other pool's cache first
  pool_limits limits_;          // under mutex_

  mutable detail::pool_mutex mutex_;
  space_type space_;
  detail::stream_cache<stream_ops_type> cache_;
  detail::pending_frees<stream_ops_type, Statistics> pending_;
  detail::capture_pools captures_;
  plain_type plain_;
  detail::expandable_source<Upstream, Statistics> expand_;
  detail::block* quarantine_{nullptr};  // frees in a capture that could get no pool (through u.waiting.next)
  mgm::pool_registration registration_;  // last member: leaves before the rest is destroyed
};

}  // namespace mgm
