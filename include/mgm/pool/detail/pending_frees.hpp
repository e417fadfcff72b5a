/// @file
/// @brief The caching pool's pending frees: blocks freed while other streams may still use them
/// (`record_stream`), waiting for events before they rejoin a cache.
///
/// ## Invariants
/// - a pending block is in exactly one place: an entry (with one recorded event per other stream
///   that used it), the stuck list (its events could not be made yet: they are tried again, and
///   an event recorded later covers more work, never less), or a private pool's held list
/// - `space.pending` is the sum of the sizes of all pending blocks
/// - entries keep the order of their frees, so on each stream their events complete in order:
///   processing stops at a stream's first incomplete event (as PyTorch's caching allocator does)
/// - an event recorded on a forgotten stream names no stream (nullptr): it is never asked about
///   that stream's capture again
#pragma once

#include <mgm/pool/detail/block_space.hpp>
#include <mgm/pool/detail/stream_cache.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mgm::detail {

template <class Ops, bool Statistics>
class pending_frees {
 public:
  struct entry {
    block* b;
    std::vector<std::pair<int, cudaStream_t>> events;  // event index, the stream it was recorded on
  };

  /// `b` (allocated) is also used on `s`. @throws std::bad_alloc, with nothing changed.
  void add_use(block* b, cudaStream_t s) {
    const auto [it, inserted] = uses_.try_emplace(b);
    try {
      if (std::find(it->second.begin(), it->second.end(), s) == it->second.end()) it->second.push_back(s);
    } catch (...) {
      if (inserted) uses_.erase(it);
      throw;
    }
    b->extra_streams = 1;
  }
  [[nodiscard]] bool used_on(cudaStream_t s) const noexcept {
    return std::any_of(uses_.begin(), uses_.end(), [&](const auto& u) {
      return std::find(u.second.begin(), u.second.end(), s) != u.second.end();
    });
  }
  void drop_uses_on(cudaStream_t s) noexcept {
    for (auto& [b, users] : uses_) std::erase(users, s);
  }

  /// `b`, used on other streams too, is freed into `slot`: an event on each such stream, and the
  /// block waits for them. Never fails: without memory for them, it waits in the stuck list.
  void free_used(block* b, stream_slot& slot, block_space<Statistics>& space, event_pool<Ops>& events, Ops& ops,
                 device_id d) noexcept {
    b->owner = &slot;
    b->state = block_state::pending;
    b->u.waiting = {nullptr, nullptr};
    space.pending += b->size;
    ++waiting_;
    if (!try_enter(b, events, ops, d)) push_stuck(b);
  }

  /// Blocks whose events have all completed rejoin their owner's cache. Never fails.
  /// `slot_of(b, s)` gives an orphan its freeing stream's slot (nullptr: not yet).
  template <class SlotOf>
  void process(block_space<Statistics>& space, event_pool<Ops>& events, Ops& ops, device_id d, SlotOf&& slot_of) noexcept {
    if (orphans_ != nullptr) retry_orphans(space, events, ops, d, slot_of);
    if (stuck_ != nullptr) retry_stuck(events, ops, d);
    std::array<cudaStream_t, 8> incomplete{};  // streams with an incomplete event in this pass
    std::size_t n_incomplete = 0;
    std::size_t kept = 0;
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      entry& e = entries_[i];
      bool done = true;
      for (const auto& [ev, s] : e.events) {
        if (s != nullptr && std::find(incomplete.begin(), incomplete.begin() + n_incomplete, s) !=
                                incomplete.begin() + n_incomplete) {
          done = false;
          break;
        }
        try {
          done = !(s != nullptr && ops.is_capturing(stream_ref{s})) && ops.query(events[ev]);
        } catch (...) {
          done = false;
        }
        if (!done) {
          if (s != nullptr && n_incomplete < incomplete.size()) incomplete[n_incomplete++] = s;
          break;
        }
      }
      if (!done) {
        if (kept != i) entries_[kept] = std::move(e);
        ++kept;
        continue;
      }
      for (const auto& ev : e.events) events.release(ev.first);
      block* b = e.b;
      --waiting_;
      space.pending -= b->size;
      b->free_epoch = b->owner->next_epoch();
      space.insert_free(b);
    }
    entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(kept), entries_.end());
  }

  [[nodiscard]] bool empty() const noexcept { return waiting_ == 0; }
  [[nodiscard]] block* orphans() const noexcept { return orphans_; }

  /// A block whose free could get no slot for the freeing stream `s` (the host is out of
  /// memory): pending, with its stream, until one can be made; never reused early.
  void add_orphan(block* b, cudaStream_t s, block_space<Statistics>& space) noexcept {
    b->state = block_state::pending;
    b->u.waiting = {orphans_, s};
    orphans_ = b;
    space.pending += b->size;
    ++waiting_;
  }
  /// Orphans freed on `s` are in the default stream's order from now on (the host waited for `s`).
  void orphans_forget(cudaStream_t s) noexcept {
    for (block* b = orphans_; b != nullptr; b = b->u.waiting.next) {
      if (b->u.waiting.freed_on == s) b->u.waiting.freed_on = nullptr;
    }
  }
  std::vector<entry>& entries() noexcept { return entries_; }
  /// An entry made elsewhere (a forgotten stream's cache), its block already counted pending.
  void adopt(entry&& e) noexcept {  // after entries().reserve()
    entries_.push_back(std::move(e));
    ++waiting_;
  }
  const std::vector<entry>& entries() const noexcept { return entries_; }
  [[nodiscard]] block* stuck() const noexcept { return stuck_; }
  [[nodiscard]] bool uses_of(const block* b) const noexcept { return uses_.count(const_cast<block*>(b)) != 0; }

  /// Events recorded on `s` are never asked about it again (it is forgotten).
  void forget_stream(cudaStream_t s) noexcept {
    for (auto& e : entries_) {
      for (auto& ev : e.events) {
        if (ev.second == s) ev.second = nullptr;
      }
    }
  }

  /// The end: the host waits for every pending event.
  void drain(event_pool<Ops>& events, Ops& ops) noexcept {
    for (const auto& e : entries_) {
      for (const auto& ev : e.events) {
        try {
          ops.synchronize(events[ev.first]);
        } catch (...) {
        }
      }
    }
  }

 private:
  bool try_enter(block* b, event_pool<Ops>& events, Ops& ops, device_id d) noexcept {
    entry e{b, {}};
    try {
      entries_.reserve(entries_.size() + 1);
      const auto it = uses_.find(b);
      if (it != uses_.end()) {
        e.events.reserve(it->second.size());
        for (cudaStream_t s : it->second) {
          const int ev = events.acquire(ops, d);
          e.events.emplace_back(ev, s);
          ops.record(events[ev], stream_ref{s});
        }
        uses_.erase(it);
      }
    } catch (...) {
      for (const auto& ev : e.events) events.release(ev.first);
      return false;
    }
    b->extra_streams = 0;
    entries_.push_back(std::move(e));  // reserved above
    return true;
  }

  template <class SlotOf>
  void retry_orphans(block_space<Statistics>& space, event_pool<Ops>& events, Ops& ops, device_id d, SlotOf& slot_of) noexcept {
    block* list = std::exchange(orphans_, nullptr);
    while (list != nullptr) {
      block* b = list;
      list = b->u.waiting.next;
      stream_slot* slot = slot_of(b, reinterpret_cast<cudaStream_t>(b->u.waiting.freed_on));
      if (slot == nullptr) {
        b->u.waiting.next = orphans_;
        orphans_ = b;
        continue;
      }
      space.pending -= b->size;
      --waiting_;
      if (b->extra_streams != 0) {
        free_used(b, *slot, space, events, ops, d);
      } else {
        b->owner = slot;
        b->free_epoch = slot->next_epoch();
        space.insert_free(b);
      }
    }
  }

  void push_stuck(block* b) noexcept {
    b->u.waiting.next = stuck_;
    stuck_ = b;
  }

  void retry_stuck(event_pool<Ops>& events, Ops& ops, device_id d) noexcept {
    block* list = std::exchange(stuck_, nullptr);
    while (list != nullptr) {
      block* b = list;
      list = b->u.waiting.next;
      if (!try_enter(b, events, ops, d)) push_stuck(b);
    }
  }

  std::vector<entry> entries_;
  block* stuck_{nullptr};    // through u.waiting.next
  block* orphans_{nullptr};  // frees that could get no slot yet, through u.waiting.next
  std::size_t waiting_{0};   // blocks in entries_, stuck_ and orphans_
  std::unordered_map<block*, std::vector<cudaStream_t>> uses_;
};

}  // namespace mgm::detail
