/// @file
/// @brief The caching pool's private pools for CUDA graph captures.
///
/// ## Invariants
/// - a private pool's blocks come from its own plain segments and are owned by its own slots
///   (`stream_slot::capture_pool` is its id); they serve only captures bound to it
/// - a block of the shared cache freed during a capture is *held* by the capture's pool (pending,
///   in `held`) until the pool is released: the graph's replays still use it
/// - `uses` counts the captures bound to the pool (an automatic pool: 1) minus its releases; at 0
///   its idle segments go back to the upstream, the others as their last block is freed, and the
///   pool is gone once it has no segment left
/// - a capture is bound to at most one pool; bindings go with their pool's release
#pragma once

#include <mgm/pool/capture_pool_id.hpp>
#include <mgm/pool/detail/stream_cache.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace mgm::detail {

struct private_pool {
  explicit private_pool(std::uint64_t pool_id) : id{pool_id}, slots{pool_id} {}
  std::uint64_t id;
  slot_set slots;
  long uses{0};
  std::vector<block*> segments;  // its segment heads
  block* held{nullptr};          // shared blocks freed during its captures, through u.waiting.next

  [[nodiscard]] bool released() const noexcept { return uses <= 0; }
  void hold(block* b) noexcept {
    b->u.waiting.next = held;
    held = b;
  }
};

class capture_pools {
 public:
  [[nodiscard]] private_pool* find(std::uint64_t id) const noexcept {
    for (const auto& p : pools_) {
      if (p->id == id) return p.get();
    }
    return nullptr;
  }
  [[nodiscard]] std::uint64_t pool_of_capture(std::uint64_t capture) const noexcept {
    for (const auto& [c, p] : bindings_) {
      if (c == capture) return p;
    }
    return 0;
  }

  /// The pool of the capture `capture`: the one it was bound to, or a new automatic one.
  /// @throws std::bad_alloc, with nothing changed.
  private_pool& for_capture(std::uint64_t capture) {
    if (const std::uint64_t id = pool_of_capture(capture); id != 0) return *find(id);
    return bind(capture, capture_pool_id::make().value);
  }

  /// Binds `capture` to pool `id` (made if new) and counts one more use of it.
  /// @throws mgm::logic_error when the capture is bound already; std::bad_alloc, with nothing changed.
  private_pool& bind(std::uint64_t capture, std::uint64_t id) {
    MGM_EXPECTS(pool_of_capture(capture) == 0, "begin_capture_pool: this capture already allocates from a pool");
    bindings_.reserve(bindings_.size() + 1);
    private_pool* p = find(id);
    if (p == nullptr) {
      pools_.reserve(pools_.size() + 1);
      pools_.push_back(std::make_unique<private_pool>(id));
      p = pools_.back().get();
    }
    bindings_.emplace_back(capture, id);
    ++p->uses;
    return *p;
  }

  /// One use fewer; its bindings go when it is released.
  void unuse(private_pool& p) noexcept {
    --p.uses;
    if (p.released()) std::erase_if(bindings_, [&](const auto& b) { return b.second == p.id; });
  }

  /// Removes a released pool that has no segment left.
  void erase_if_empty(private_pool* p) noexcept {
    if (!p->released() || !p->segments.empty() || p->held != nullptr) return;
    std::erase_if(pools_, [&](const auto& q) { return q.get() == p; });
  }

  template <class Fn>
  void for_each(Fn&& fn) const {
    for (const auto& p : pools_) fn(*p);
  }
  template <class Fn>
  void for_each(Fn&& fn) {
    for (auto& p : pools_) fn(*p);
  }
  [[nodiscard]] bool empty() const noexcept { return pools_.empty(); }

 private:
  std::vector<std::unique_ptr<private_pool>> pools_;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> bindings_;  // capture id -> pool id
};

}  // namespace mgm::detail
