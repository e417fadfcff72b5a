/// @file
/// @brief `caching_pool::forget_stream`: a stream's cache retired before the stream is destroyed.
///
/// What the stream cached joins the default stream's cache once an event recorded on it now has
/// completed; blocks pending on other streams that it freed wait for such an event too; nothing
/// is recorded on the stream afterwards (events already recorded on it name no stream). Where
/// that cannot be kept (a block `record_stream`ed on it, a free still waiting for its events, a
/// private pool's cache of it) the host waits for the stream instead.
#pragma once

#include <mgm/pool/detail/pool_inspect.hpp>

#include <vector>

namespace mgm::detail {

template <class Pool>
void pool_inspect::forget_stream(Pool& p, stream_ref stream) {
  using entry = typename decltype(p.pending_)::entry;
  const cudaStream_t handle = stream.get();
  auto& slots = p.cache_.slots();
  auto& events = p.cache_.events();
  stream_slot* gone = slots.find(handle);
  stream_slot* home = gone != nullptr ? &slots.slot_for(nullptr) : nullptr;  // first: it may add a slot
  // Everything that can fail first, with the pool unchanged.
  std::vector<block*> cached;
  std::size_t pending_of_gone = 0;
  bool must_wait = p.pending_.used_on(handle);
  p.captures_.for_each([&](const private_pool& pp) { must_wait = must_wait || pp.slots.find(handle) != nullptr; });
  if (gone != nullptr) {
    for (tlsf_index* index : {&gone->small, &gone->large, &gone->huge}) index->for_each([&](block* b) { cached.push_back(b); });
    for (const auto& e : p.pending_.entries()) pending_of_gone += e.b->owner == gone ? 1 : 0;
    for (block* b = p.pending_.stuck(); b != nullptr; b = b->u.waiting.next) must_wait = must_wait || b->owner == gone;
  }
  for (block* b = p.pending_.orphans(); b != nullptr; b = b->u.waiting.next) {
    must_wait = must_wait || b->u.waiting.freed_on == handle;  // its free was in this stream's order
  }
  std::vector<int> made;
  std::vector<entry> staged;
  try {
    const std::size_t count = cached.size() + pending_of_gone + (must_wait ? 1 : 0);
    made.reserve(count);
    staged.reserve(cached.size());
    p.pending_.entries().reserve(p.pending_.entries().size() + cached.size());
    if (gone != nullptr) p.cache_.retired_reserve();
    for (auto& e : p.pending_.entries()) {
      if (gone != nullptr && e.b->owner == gone) e.events.reserve(e.events.size() + 1);
    }
    for (block* b : cached) staged.push_back(entry{b, std::vector<std::pair<int, cudaStream_t>>(1)});
    for (std::size_t i = 0; i < count; ++i) {
      made.push_back(events.acquire(p.ops_, p.device_));
      p.ops_.record(events[made.back()], stream);
    }
    if (must_wait) p.ops_.synchronize(events[made.back()]);
  } catch (...) {
    for (const int e : made) events.release(e);
    throw;
  }
  // Nothing below allocates or fails.
  p.pending_.forget_stream(handle);
  if (must_wait) {
    events.release(made.back());
    made.pop_back();
    p.pending_.drop_uses_on(handle);
    p.pending_.orphans_forget(handle);
  }
  if (gone == nullptr) return;
  std::size_t next = 0;
  for (auto& e : p.pending_.entries()) {  // blocks waiting on other streams: after this stream's work too
    if (e.b->owner != gone) continue;
    e.events.emplace_back(made[next++], nullptr);
    e.b->owner = home;
  }
  for (auto& e : staged) {
    block* b = e.b;
    p.space_.take_free(b);
    b->owner = home;
    make_pending(p, b);
    e.events[0] = {made[next++], nullptr};
    p.pending_.adopt(std::move(e));
  }
  // The host waited for the stream where it had to: those blocks only change owner.
  const auto rehome = [&](block* list) {
    for (block* b = list; b != nullptr; b = b->u.waiting.next) {
      if (b->owner == gone) b->owner = home;
    }
  };
  rehome(p.pending_.stuck());
  rehome(p.pending_.orphans());
  rehome(p.quarantine_);
  p.captures_.for_each([&](const private_pool& pp) { rehome(pp.held); });
  p.expand_.rehome(p.space_, gone, home);
  std::size_t refs = 0;  // allocated blocks still name the slot: it lives until they are freed
  for_each_head(p, [&](const block* head) {
    for (const block* b = head; b != nullptr; b = b->next) refs += b->owner == gone ? 1 : 0;
  });
  p.cache_.retire(gone, refs);
}

}  // namespace mgm::detail
