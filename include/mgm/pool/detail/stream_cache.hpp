/// @file
/// @brief The caching pool's stream caches: per-stream slots, their free epochs and events, and
/// the cross-stream steal.
///
/// ## Invariants
/// - A block freed into slot S at epoch `e` (`block::free_epoch`) may be reused on S at once; on
///   another stream only after an event recorded on S at an epoch `E >= e` (`event_covers`), waited
///   for on the device or found complete. Epochs count in 64 bits: they never wrap.
/// - `event_complete` is true only for the event recorded at `event_epoch`.
/// - A slot of the shared cache is found by its stream handle; a forgotten stream's slot is
///   *retired*: its handle becomes `retired_stream()`, no stream's, and it keeps only the blocks
///   still allocated from it (their frees go to the freeing stream's slot).
/// - Every event index is either held (by a slot or a pending free) or in the free list, whose
///   capacity covers them all: giving an event back never allocates.
#pragma once

#include <mgm/device.hpp>
#include <mgm/pool/detail/tlsf_index.hpp>
#include <mgm/stream.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

namespace mgm::detail {

/// The free blocks one stream may reuse at once, with the event that lets other streams take them.
struct stream_slot {
  /// Small blocks freed on the hit path whose merge with their free neighbours is deferred, at
  /// most this many: the next request of the same size finds the block whole, with no split and
  /// no merge (a 4 KiB alloc + free no longer re-splits the 2 MiB block its free merged back).
  /// The list is coalesced when it is full, before a small request leaves the hit path, and
  /// before memory is given back.
  static constexpr std::uint32_t deferred_capacity = 64;

  cudaStream_t stream{nullptr};
  tlsf_index small;
  tlsf_index large;
  tlsf_index huge;  ///< blocks of its huge range (`pool_options::huge_request_bytes`)
  tlsf_index unmapped_small;  ///< free ranges of its expandable segments with no memory behind them
  tlsf_index unmapped_large;
  tlsf_index unmapped_huge;
  std::uint64_t free_epoch{0};   ///< frees into this slot so far
  std::uint64_t event_epoch{0};  ///< `free_epoch` when `event` was last recorded
  int event{-1};                 ///< index into the event pool, -1: none yet
  bool event_recorded{false};
  bool event_complete{false};
  std::uint64_t capture_pool{0};  ///< 0: the shared cache; else the private pool it belongs to
  std::size_t retired_refs{0};    ///< retired: the allocated blocks that still name it
  std::uint32_t deferred_count{0};
  /// Blocks freed unmerged since the last coalescing (an entry whose block lost its mark since,
  /// taken or merged into a neighbour, is skipped).
  std::array<block*, deferred_capacity> deferred{};

  tlsf_index& index(bool is_small) noexcept { return is_small ? small : large; }
  tlsf_index& unmapped_index(bool is_small) noexcept { return is_small ? unmapped_small : unmapped_large; }
  /// The index a free block of this slot belongs in (its unmapped one: `unmapped_of`).
  MGM_HOT_INLINE tlsf_index& index_of(const block& b) noexcept { return b.small != 0 ? small : b.huge() ? huge : large; }
  tlsf_index& unmapped_of(const block& b) noexcept { return b.small != 0 ? unmapped_small : b.huge() ? unmapped_huge : unmapped_large; }
  /// The epoch of a free now.
  std::uint64_t next_epoch() noexcept { return ++free_epoch; }
  [[nodiscard]] std::size_t free_bytes() const noexcept { return small.bytes() + large.bytes() + huge.bytes(); }
};

/// The slot's recorded event covers a block it freed at `block_epoch`.
[[nodiscard]] inline bool event_covers(const stream_slot& slot, std::uint64_t block_epoch) noexcept {
  return slot.event_recorded && slot.event_epoch >= block_epoch;
}

/// The handle of a retired slot: never a stream's (CUDA's and the simulator's handles are aligned
/// pointers or tagged values; this one is odd and has no tag).
inline cudaStream_t retired_stream() noexcept { return reinterpret_cast<cudaStream_t>(~std::uintptr_t{0}); }

/// Slots by stream handle; the last one found is remembered (the hit path's one compare).
class slot_set {
 public:
  explicit slot_set(std::uint64_t capture_pool = 0) noexcept : capture_pool_{capture_pool} {}

  /// @throws std::bad_alloc, with nothing changed.
  MGM_HOT_INLINE stream_slot& slot_for(cudaStream_t s) {
    if (last_ != nullptr && last_->stream == s) [[likely]] return *last_;
    if (stream_slot* slot = find(s)) return *(last_ = slot);
    prepare();
    return *add(s);
  }
  /// The same for a free, which cannot fail: a new stream gets the spare slot made earlier;
  /// nullptr when there is none (the host ran out of memory twice).
  stream_slot* slot_for_free(cudaStream_t s) noexcept {
    if (last_ != nullptr && last_->stream == s) [[likely]] return last_;
    if (stream_slot* slot = find(s)) return last_ = slot;
    if (spare_ == nullptr || slots_.size() == slots_.capacity()) return nullptr;
    return add(s);
  }
  [[nodiscard]] stream_slot* find(cudaStream_t s) const noexcept {
    for (const auto& slot : slots_) {
      if (slot->stream == s) return slot.get();
    }
    return nullptr;
  }
  template <class Fn>
  void for_each(Fn&& fn) const {
    for (const auto& slot : slots_) fn(*slot);
  }
  /// Takes `slot` out (a forgotten stream's): the caller keeps it alive.
  std::unique_ptr<stream_slot> extract(stream_slot* slot) noexcept {
    const auto it = std::find_if(slots_.begin(), slots_.end(), [&](const auto& s) { return s.get() == slot; });
    std::unique_ptr<stream_slot> out = std::move(*it);
    slots_.erase(it);
    last_ = nullptr;
    return out;
  }

  /// A spare slot and room for it, so that a free can add a slot without allocating.
  void prepare() {
    if (spare_ == nullptr) spare_ = std::make_unique<stream_slot>();
    slots_.reserve(slots_.size() + 1);
  }
 private:
  stream_slot* add(cudaStream_t s) noexcept {  // after prepare()
    spare_->stream = s;
    spare_->capture_pool = capture_pool_;
    slots_.push_back(std::move(spare_));  // room reserved: does not allocate
    last_ = slots_.back().get();
    try {
      prepare();  // for the next new stream; a free finds none if this fails
    } catch (...) {
    }
    return last_;
  }

  std::vector<std::unique_ptr<stream_slot>> slots_;
  std::unique_ptr<stream_slot> spare_;
  stream_slot* last_{nullptr};
  std::uint64_t capture_pool_;
};

/// Events made once and recycled; an index names one.
template <class Ops>
class event_pool {
 public:
  using event_type = typename Ops::event;

  /// @throws what the platform throws when an event must be made, or std::bad_alloc.
  int acquire(Ops& ops, device_id d) {
    if (!free_.empty()) {
      const int e = free_.back();
      free_.pop_back();
      return e;
    }
    free_.reserve(events_.size() + 1);  // so that release() never allocates
    events_.reserve(events_.size() + 1);
    // A host pool's events live on device 0 (CUDA records them on whichever device's stream).
    events_.push_back(ops.create_event(d.is_host() ? device_id{0} : d));
    return static_cast<int>(events_.size() - 1);
  }
  void release(int e) noexcept { free_.push_back(e); }
  event_type& operator[](int e) noexcept { return events_[static_cast<std::size_t>(e)]; }
  [[nodiscard]] std::size_t size() const noexcept { return events_.size(); }
  [[nodiscard]] std::size_t idle() const noexcept { return free_.size(); }
  void destroy_all(Ops& ops) noexcept {
    for (auto& e : events_) ops.destroy_event(e);
    events_.clear();
    free_.clear();
  }

 private:
  std::vector<event_type> events_;
  std::vector<int> free_;
};

/// The shared cache's slots and the events that order them.
template <class Ops>
class stream_cache {
 public:
  using event_type = typename Ops::event;

  stream_cache(Ops ops, device_id device) noexcept : ops_{ops}, device_{device} {}

  slot_set& slots() noexcept { return slots_; }
  const slot_set& slots() const noexcept { return slots_; }
  event_pool<Ops>& events() noexcept { return events_; }
  [[nodiscard]] const std::vector<std::unique_ptr<stream_slot>>& retired() const noexcept { return retired_; }

  /// `owner`'s event, recorded anew unless it already covers a free at `epoch` (one event per
  /// batch of frees: every free before the recording is covered).
  event_type& covering_event(stream_slot& owner, std::uint64_t epoch) {
    if (owner.event < 0) owner.event = events_.acquire(ops_, device_);
    event_type& e = events_[owner.event];
    if (!event_covers(owner, epoch)) {
      ops_.record(e, stream_ref{owner.stream});
      owner.event_epoch = owner.free_epoch;
      owner.event_recorded = true;
      owner.event_complete = false;
    }
    return e;
  }

  /// The host waits until `owner`'s work up to a free at `epoch` has finished (release paths).
  void wait_idle(stream_slot& owner, std::uint64_t epoch) {
    event_type& e = covering_event(owner, epoch);
    if (!owner.event_complete) {
      ops_.synchronize(e);
      owner.event_complete = true;
    }
  }

  /// A block of another stream's cache that `accept`s, made safe for `stream` by an event (waited
  /// for on the device, never the host); out of its index, owned by `slot`. Nothing changes
  /// when it throws.
  template <class Space, class Accept>
  block* steal(Space& space, stream_slot& slot, std::size_t size, bool small, stream_ref stream, Accept&& accept,
              bool huge = false) {
    block* found = nullptr;
    stream_slot* from = nullptr;
    slots_.for_each([&](stream_slot& other) {
      if (found != nullptr || &other == &slot) return;
      tlsf_index& index = huge ? other.huge : other.index(small);
      if (index.empty()) return;
      block* b = index.find(size);
      if (b == nullptr || !accept(b)) b = index.scan(size);
      if (b == nullptr || !accept(b) || ops_.is_capturing(stream_ref{other.stream})) return;
      found = b;
      from = &other;
    });
    if (found == nullptr) return nullptr;
    event_type& e = covering_event(*from, found->free_epoch);
    if (!from->event_complete) from->event_complete = ops_.query(e);
    if (!from->event_complete) ops_.wait(stream, e);
    space.take_free(found);
    found->owner = &slot;
    found->free_epoch = slot.next_epoch();  // events recorded on `stream` before the wait do not cover it
    return found;
  }

  /// A segment whose blocks are all free but cached by different streams cannot merge (each
  /// stream may reuse only its own blocks at once). For release, give every block to the head's
  /// stream: that stream waits, on the device, for an event on each other stream; then the
  /// segment is one idle block again. Streams capturing a graph are left alone.
  template <class Space>
  void unify(Space& space, const std::vector<block*>& heads) {
    for (block* head : heads) {
      if (head->whole_segment() || head->state != block_state::free) continue;
      bool all_free = true;
      bool capturing = false;
      for (const block* b = head; b != nullptr && all_free; b = b->next) all_free = b->state == block_state::free;
      if (!all_free) continue;
      for (const block* b = head; b != nullptr && !capturing; b = b->next) {
        capturing = ops_.is_capturing(stream_ref{b->owner->stream});
      }
      if (capturing) continue;
      stream_slot* target = head->owner;
      for (block* b = head->next; b != nullptr; b = b->next) {
        stream_slot* other = b->owner;
        if (other == target || (event_covers(*other, b->free_epoch) && other->event_complete)) continue;
        ops_.wait(stream_ref{target->stream}, covering_event(*other, b->free_epoch));
      }
      std::size_t total = 0;  // merge the whole chain into the head, now owned by the target stream
      for (block* b = head; b != nullptr;) {
        block* next = b->next;
        space.take_free(b);
        total += b->size;
        if (b != head) space.arena.recycle(b);
        b = next;
      }
      head->size = total;
      head->next = nullptr;
      head->owner = target;
      head->free_epoch = target->next_epoch();
      space.insert_free(head);
    }
  }

  /// Moves a forgotten stream's slot out of the shared cache; it lives while `refs` allocated
  /// blocks still name it (their frees give it up: `release_retired`).
  void retire(stream_slot* slot, std::size_t refs) noexcept {  // after retired_reserve()
    if (slot->event >= 0) events_.release(slot->event);
    slot->event = -1;
    slot->event_recorded = false;
    slot->stream = retired_stream();
    slot->retired_refs = refs;
    retired_.push_back(slots_.extract(slot));
    if (refs == 0) retired_.pop_back();
  }
  /// A block that named the retired `slot` has another owner now.
  void release_retired(stream_slot* slot) noexcept {
    if (--slot->retired_refs != 0) return;
    std::erase_if(retired_, [&](const auto& s) { return s.get() == slot; });
  }
  void retired_reserve() { retired_.reserve(retired_.size() + 1); }

 private:
  Ops ops_;
  device_id device_;
  slot_set slots_;
  event_pool<Ops> events_;
  std::vector<std::unique_ptr<stream_slot>> retired_;
};

}  // namespace mgm::detail
