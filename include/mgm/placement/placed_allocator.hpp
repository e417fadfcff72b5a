/// @file
/// @brief `placed_allocator`: a caching pool per GPU, spilling to NVLink peers before host memory.
#pragma once

#include <mgm/concepts.hpp>
#include <mgm/device.hpp>
#include <mgm/error.hpp>
#include <mgm/placement/peer_access.hpp>
#include <mgm/placement/placement_policy.hpp>
#include <mgm/pool/caching_pool.hpp>
#include <mgm/pool/multi_device_pool.hpp>
#include <mgm/topology/topology.hpp>

#include <concepts>
#include <cstddef>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <ranges>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace mgm {

/// @brief One buffer that could not live on its reader.
struct spill_record {
  std::size_t bytes{0};
  device_id reader{0};
  memory_location to;
  std::string path;     ///< nvidia-smi's label from the reader, or "host"
  bool staged{false};   ///< the reader has no direct access: copies are staged
};

/// @brief A buffer moved by `rebalance()`: its old and new address.
struct moved_buffer {
  void* from_ptr{nullptr};
  void* to_ptr{nullptr};
  std::size_t bytes{0};
  memory_location from;
  device_id to{0};
};

struct placement_statistics {
  std::size_t allocations{0};
  std::size_t local{0};          ///< placed on their reader
  std::size_t spills{0};         ///< placed elsewhere
  std::size_t spilled_bytes{0};  ///< live now, elsewhere than their reader
  std::size_t to_peers{0};
  std::size_t to_host{0};
  std::size_t staged{0};
  std::size_t migrations{0};     ///< buffers moved by `migrate()`
};

/// @brief Allocates memory for a reader GPU: on the reader when its pool has room above the
/// device's reserve, else along `rank_placements` (NVLink peers, fast PCIe peers, pinned host
/// memory near the reader, remote host memory), enabling peer access as needed through
/// `peer_access` and granting it on the owner pool's expandable granules. Every spill is
/// recorded; a free goes back to the owner's pool; `rebalance()` pulls spilled buffers home when
/// their reader has room again (they move: it returns the new addresses).
/// @tparam Upstream the GPUs' upstream (a `platform_allocator`; a `cuda_async_allocator`'s memory
///   pool is given access too, through `cudaMemPoolSetAccess`); @tparam HostUpstream the host
///   tier's (`pinned_host_allocator`, `sim::pinned_host_allocator`), a caching pool per NUMA node
///   (`make_host` receives the node; CUDA's pinned allocations are not bound to one).
/// @tparam PeerOps the peer seam of the platform.
/// **Thread safety:** safe. **Device affinity:** explicit in every call.
template <platform_allocator Upstream, platform_allocator HostUpstream, peer_ops PeerOps>
class placed_allocator {
 public:
  using device_pools = multi_device_pool<Upstream, true>;
  using host_pool = caching_pool<HostUpstream, true>;
  using copy_function = std::function<void(void* dst, const void* src, std::size_t bytes)>;

  /// @param reserve_bytes per GPU, kept free by placement (empty: none).
  /// @param copy replaces the platform's copy for `rebalance()` and `migrate()` (empty: the peer
  ///   seam's, `cudaMemcpyPeerAsync` on CUDA and `memcpy` on the simulator; nothing to set).
  placed_allocator(const topology& links, std::function<Upstream(device_id)> make_device,
                   std::function<HostUpstream(std::optional<int>)> make_host, PeerOps peers,
                   std::vector<std::size_t> reserve_bytes = {}, placement_options options = {},
                   pool_options pools = pool_options{}, copy_function copy = {})
      : links_{links},
        pools_{static_cast<int>(links.gpu_count()), std::move(make_device), pools},
        make_host_{std::move(make_host)},
        peers_{std::move(peers), links},
        reserve_{std::move(reserve_bytes)},
        options_{options},
        pool_options_{std::move(pools)},
        copy_{std::move(copy)} {
    MGM_EXPECTS(reserve_.empty() || reserve_.size() == links.gpu_count(), "placed_allocator: one reserve per GPU");
  }

  /// @brief Memory for `reader`, placed as described above.
  /// @throws mgm::out_of_memory when no location can hold it.
  [[nodiscard]] void* allocate(device_id reader, std::size_t bytes) {
    if (bytes == 0) return nullptr;
    const std::lock_guard lock{mutex_};
    ++stats_.allocations;
    for (const auto& c : rank_placements(links_, request(reader, bytes), options_)) {
      void* p = try_place(c, reader, bytes);
      if (p != nullptr) return p;
    }
    throw out_of_memory{"placed_allocator: no GPU or host memory could hold " + mgm::detail::describe_bytes(bytes) +
                            " for GPU" + std::to_string(reader.value()),
                        bytes};
  }

  void deallocate(void* p, std::size_t bytes) noexcept {
    if (p == nullptr) return;
    const std::lock_guard lock{mutex_};
    const auto it = live_.find(p);
    if (it == live_.end()) {
      report_refused_deallocation("placed_allocator: deallocate of a pointer it did not place; nothing was changed");
      return;
    }
    release(it->second, p, bytes);
    live_.erase(it);
  }

  /// @brief Where `p` lives, if this allocator placed it.
  [[nodiscard]] std::optional<memory_location> location_of(const void* p) const {
    const std::lock_guard lock{mutex_};
    const auto it = live_.find(const_cast<void*>(p));
    if (it == live_.end()) return std::nullopt;
    return it->second.where;
  }

  /// @brief Moves spilled buffers whose reader has room again (above its reserve) back to it, as
  /// `migrate` moves one; returns what moved. The copies run on `stream` and are done when it
  /// returns (the allocator's lock is held meanwhile: other allocations wait for them).
  std::vector<moved_buffer> rebalance(stream_ref stream = {}) {
    const std::lock_guard lock{mutex_};
    std::vector<moved_buffer> moved;
    std::vector<void*> candidates;
    for (const auto& [p, e] : live_) {
      if (e.where.is_host() || e.where.device != e.reader) candidates.push_back(p);
    }
    for (void* p : candidates) {
      const placed e = live_.at(p);
      const auto h = headroom(e.reader);
      if (!h || *h < e.bytes) continue;
      void* fresh = move_to(p, e.reader, stream);
      if (fresh != nullptr) moved.push_back({p, fresh, e.bytes, e.where, e.reader});
    }
    return moved;
  }

  /// @brief Moves the buffer `p` to GPU `to`, which reads it from now on (a rebalancer's move):
  /// memory on `to` above its reserve, the platform's copy on `stream`, the old memory freed.
  /// Returns the new address (`p` itself when it is on `to` already). Peer access from `to` to the
  /// buffer's GPU is enabled first where the pair allows it; the allocator's lock is held during
  /// the copy.
  /// @throws mgm::out_of_memory when `to` has no room above its reserve; mgm::logic_error for a
  /// pointer this allocator did not place. Either way nothing changed.
  [[nodiscard]] void* migrate(void* p, device_id to, stream_ref stream = {}) {
    const std::lock_guard lock{mutex_};
    const auto it = live_.find(p);
    MGM_EXPECTS(it != live_.end(), "placed_allocator::migrate: a pointer it did not place");
    MGM_EXPECTS(!to.is_host() && to.index() < links_.gpu_count(), "placed_allocator::migrate: no GPU " + std::to_string(to.value()));
    const placed e = it->second;
    if (!e.where.is_host() && e.where.device == to) {
      it->second.reader = to;
      return p;
    }
    void* fresh = move_to(p, to, stream);
    if (fresh == nullptr) throw_no_room("placed_allocator::migrate", to, e.bytes);
    ++stats_.migrations;
    return fresh;
  }

  /// @brief Carries out a rebalancer's moves (`rebalance_plan::moves`, from `rebalancer::step` or
  /// a `rebalance_driver`'s callback) over the job's buffers. `items[g]` lists the buffers of the
  /// items on GPU g, `bytes_per_item` each, placed by this allocator. A move of k items takes the
  /// last k buffers of `items[from]` and appends their new addresses to `items[to]`: migrated as
  /// `migrate` moves one (peer to peer where the pair allows it, else staged through host memory;
  /// on CUDA `cudaMemcpyPeerAsync` on `stream`, on the simulator `memcpy`), or, for a move
  /// `from_lost`, allocated afresh on `to` with the old buffer forgotten (its data went with its
  /// GPU: the caller rebuilds it). A move from a GPU to itself, `from_lost` (a GPU that came back
  /// without its data, `rebalancer`'s "rebuilt"), allocates afresh the *first* k buffers of the
  /// list, in place, so that moves from that GPU after it take the others. Returns the buffers
  /// moved, in order.
  ///
  /// All or nothing for memory: every new buffer is allocated before anything is copied or freed
  /// (the receivers hold them beside the senders' copies, as the rebalancer counts them), so a
  /// receiver without room changes nothing: a `rebalance_driver` that keeps its previous plan then
  /// still matches the buffers. The lock is held throughout: other allocations wait for it.
  /// The buffers are the caller's: none of them may be freed or moved by another thread meanwhile.
  /// @throws mgm::logic_error, before anything moves, when `items` does not fit the moves (one list
  ///   per GPU, enough buffers on every sender, each a distinct live buffer it placed, of
  ///   `bytes_per_item`; a move to the same GPU only `from_lost`); mgm::out_of_memory when a
  ///   receiver has no room above its reserve: nothing changed. A copy that fails (a device
  ///   error) is rethrown with the moves before it done and the rest not begun; `items` still says
  ///   where every buffer is.
  template <class Moves>
    requires std::ranges::forward_range<const Moves> &&
             requires(std::ranges::range_reference_t<const Moves> m) {
               { m.from } -> std::convertible_to<std::size_t>;
               { m.to } -> std::convertible_to<std::size_t>;
               { m.items } -> std::convertible_to<std::size_t>;
               { m.from_lost } -> std::convertible_to<bool>;
             }
  std::vector<moved_buffer> apply_moves(const Moves& moves, std::vector<std::vector<void*>>& items, std::size_t bytes_per_item,
                                        stream_ref stream = {}) {
    const std::string who = "placed_allocator::apply_moves: ";
    const std::lock_guard lock{mutex_};
    MGM_EXPECTS(items.size() == links_.gpu_count(), who + "one list of item buffers per GPU (" +
                                                        std::to_string(links_.gpu_count()) + "), not " +
                                                        std::to_string(items.size()));
    // The moves played on the lists first (`arrives`: a buffer a move brings or makes), so that a
    // plan that does not fit the buffers changes nothing; each step names the buffer it takes.
    std::vector<std::vector<const void*>> after(items.size());
    {
      std::unordered_set<const void*> seen;
      for (std::size_t g = 0; g < items.size(); ++g) {
        for (void* p : items[g]) {
          MGM_EXPECTS(seen.insert(p).second, who + "a buffer listed twice");
          after[g].push_back(p);
        }
      }
    }
    const void* const arrives = &after;  // an address no buffer has
    struct step {
      std::size_t from, to, index;  // index into items[from] (in place), or the back when moving
      bool lost, in_place;
    };
    std::vector<step> steps;
    const auto check = [&](const void* p) {
      if (p == arrives) return;
      const auto it = live_.find(const_cast<void*>(p));
      MGM_EXPECTS(it != live_.end(), who + "a buffer it did not place (or no buffer: a null pointer)");
      MGM_EXPECTS(it->second.bytes == bytes_per_item, who + "a buffer of " + std::to_string(it->second.bytes) +
                                                           " bytes, not bytes_per_item (" + std::to_string(bytes_per_item) + ")");
    };
    for (const auto& m : moves) {
      const std::size_t from = m.from;
      const std::size_t to = m.to;
      const bool lost = m.from_lost;
      MGM_EXPECTS(from < after.size() && to < after.size() && (from != to || lost),
                  who + "a move from GPU" + std::to_string(from) + " to GPU" + std::to_string(to) +
                      (from == to ? " (only a GPU that lost its data rebuilds on itself)" : ""));
      MGM_EXPECTS(after[from].size() >= m.items, who + "GPU" + std::to_string(from) + " holds " +
                                                     std::to_string(after[from].size()) + " item buffers; a move takes " +
                                                     std::to_string(m.items));
      for (std::size_t k = 0; k < m.items; ++k) {
        if (from == to) {
          check(after[from][k]);
          after[from][k] = arrives;
          steps.push_back({from, to, k, true, true});
        } else {
          check(after[from].back());
          after[from].pop_back();
          after[to].push_back(arrives);
          steps.push_back({from, to, 0, lost, false});
        }
      }
    }
    // Every new buffer first (nothing copied or freed yet); a receiver without room undoes them.
    std::vector<void*> fresh(steps.size(), nullptr);
    // Gives back the new buffers of steps [begin, end) not yet in use (a buffer already on its
    // receiver is the live one itself).
    const auto give_back = [&](std::size_t begin, std::size_t end) noexcept {
      for (std::size_t j = begin; j < end; ++j) {
        if (fresh[j] != nullptr && live_.find(fresh[j]) == live_.end()) {
          pools_.pool(device_id{static_cast<int>(steps[j].to)}).deallocate(fresh[j], bytes_per_item);
        }
      }
    };
    {
      std::vector<std::vector<void*>> lists = items;  // where each step's buffer is, played forward
      for (std::size_t i = 0; i < steps.size(); ++i) {
        const step& st = steps[i];
        void* p = st.in_place ? lists[st.from][st.index] : lists[st.from].back();
        const device_id to{static_cast<int>(st.to)};
        const auto it = live_.find(p);
        const bool there = it != live_.end() && !it->second.where.is_host() && it->second.where.device == to && !st.lost;
        void* q = there ? p : allocate_within_reserve(to, bytes_per_item);
        if (q == nullptr) {
          give_back(0, i);
          throw_no_room("placed_allocator::apply_moves", to, bytes_per_item);
        }
        fresh[i] = q;
        if (st.in_place) {
          lists[st.from][st.index] = q;
        } else {
          lists[st.from].pop_back();
          lists[st.to].push_back(q);
        }
      }
    }
    live_.reserve(live_.size() + 1);  // re-keyed entries below allocate nothing
    for (auto& list : items) list.reserve(list.size() + steps.size());  // the pushes below cannot throw
    std::vector<moved_buffer> moved;
    moved.reserve(steps.size());
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const step& st = steps[i];
      const device_id to{static_cast<int>(st.to)};
      auto& from = items[st.from];
      void* p = st.in_place ? from[st.index] : from.back();
      const auto it = live_.find(p);
      const placed e = it->second;
      void* q = fresh[i];
      if (q == p) {
        it->second.reader = to;  // on `to` already: nothing to copy
      } else {
        if (!st.lost) {
          try {
            copy(q, to, p, e.where.device, bytes_per_item, stream);
          } catch (...) {
            give_back(i, steps.size());
            throw;
          }
          ++stats_.migrations;
        } else {
          ++stats_.allocations;
          ++stats_.local;
        }
        auto node = live_.extract(it);
        node.key() = q;
        node.mapped() = placed{{to, links_.gpu(to).numa_node}, to, bytes_per_item};
        live_.insert(std::move(node));
        release(e, p, bytes_per_item);
      }
      if (st.in_place) {
        from[st.index] = q;
      } else {
        from.pop_back();
        items[st.to].push_back(q);
      }
      moved.push_back({p, q, bytes_per_item, e.where, to});
    }
    return moved;
  }

  [[nodiscard]] std::vector<spill_record> spills() const {
    const std::lock_guard lock{mutex_};
    return spills_;
  }
  [[nodiscard]] placement_statistics statistics() const {
    const std::lock_guard lock{mutex_};
    placement_statistics s = stats_;
    s.spilled_bytes = 0;
    for (const auto& [p, e] : live_) {
      if (e.where.is_host() || e.where.device != e.reader) s.spilled_bytes += e.bytes;
    }
    return s;
  }
  [[nodiscard]] device_pools& pools() noexcept { return pools_; }
  [[nodiscard]] peer_access<PeerOps>& peers() noexcept { return peers_; }
  /// @brief Returns every idle segment of every pool (device and host) to its upstream.
  std::size_t release_all() {
    const std::lock_guard lock{mutex_};
    std::size_t n = pools_.release_all();
    for (auto& [numa, pool] : host_pools_) n += pool->release();
    return n;
  }

 private:
  struct placed {
    memory_location where;
    device_id reader;
    std::size_t bytes;
  };

  // Moves the live buffer `p` to GPU `to`, which reads it from then on: memory above `to`'s reserve,
  // the copy, the entry re-keyed, the old memory freed. nullptr (nothing changed) when `to` has no
  // room; a failing copy frees the new memory and rethrows. The lock is held.
  void* move_to(void* p, device_id to, stream_ref stream) {
    live_.reserve(live_.size() + 1);  // first (it may rehash): the re-keyed entry then needs no allocation
    const auto it = live_.find(p);
    const placed e = it->second;
    void* fresh = allocate_within_reserve(to, e.bytes);
    if (fresh == nullptr) return nullptr;
    try {
      copy(fresh, to, p, e.where.device, e.bytes, stream);
    } catch (...) {
      pools_.pool(to).deallocate(fresh, e.bytes);
      throw;
    }
    auto node = live_.extract(it);
    node.key() = fresh;
    node.mapped() = placed{{to, links_.gpu(to).numa_node}, to, e.bytes};
    live_.insert(std::move(node));
    release(e, p, e.bytes);
    return fresh;
  }

  [[noreturn]] static void throw_no_room(const char* who, device_id to, std::size_t bytes) {
    throw out_of_memory{std::string{who} + ": GPU" + std::to_string(to.value()) + " has no room for " +
                            mgm::detail::describe_bytes(bytes) + " above its reserve",
                        bytes};
  }

  // The platform's copy, peer to peer where the pair can be connected: CUDA copies between GPUs
  // directly only once peer access is enabled (else it stages through host memory).
  void copy(void* dst, device_id dst_device, const void* src, device_id src_device, std::size_t bytes, stream_ref stream) {
    if (copy_) {
      copy_(dst, src, bytes);
      return;
    }
    if (!dst_device.is_host() && !src_device.is_host() && dst_device != src_device) (void)peers_.ensure(dst_device, src_device);
    peers_.copy(dst, dst_device, src, src_device, bytes, stream);
  }

  // Free memory above the reserve, as the pool sees it: its upstream's free bytes plus what it
  // holds cached.
  std::optional<std::size_t> headroom(device_id d) {
    const std::size_t reserve = reserve_.empty() ? 0 : reserve_[d.index()];
    const std::size_t free = device_free(d);
    if (free < reserve) return std::size_t{0};
    return free - reserve;
  }
  std::size_t device_free(device_id d) {
    auto& pool = pools_.pool(d);
    std::size_t free = 0;
    if constexpr (requires(const Upstream& u) { u.free_bytes(); }) free = pool.upstream().free_bytes();
    const auto st = pool.statistics();
    return free + static_cast<std::size_t>(st.reserved_bytes.current - st.allocated_bytes.current);
  }
  placement_request request(device_id reader, std::size_t bytes) {
    placement_request r;
    r.reader = reader;
    r.bytes = bytes;
    for (std::size_t d = 0; d < links_.gpu_count(); ++d) r.free_bytes.push_back(device_free(device_id{static_cast<int>(d)}));
    r.reserve_bytes = reserve_;
    return r;
  }

  void* try_place(const placement_candidate& c, device_id reader, std::size_t bytes) {
    void* p = nullptr;
    bool staged = false;
    if (c.where.is_host()) {
      auto& pool = host_pool_for(c.where.numa_node);
      try {
        p = pool.allocate(bytes);
      } catch (const std::bad_alloc&) {
        return nullptr;
      }
    } else {
      const device_id owner = c.where.device;
      if (owner != reader) {
        staged = !peers_.ensure(reader, owner);
        if (!staged) {
          auto& pool = pools_.pool(owner);
          pool.grant_access(reader);  // expandable granules
          if constexpr (requires(Upstream& u) { u.grant_access(reader); }) pool.upstream().grant_access(reader);  // cudaMemPool_t
        }
      }
      p = allocate_within_reserve(owner, bytes);
      if (p == nullptr) return nullptr;
    }
    live_.emplace(p, placed{c.where, reader, bytes});
    if (!c.where.is_host() && c.where.device == reader) {
      ++stats_.local;
    } else {
      ++stats_.spills;
      (c.where.is_host() ? stats_.to_host : stats_.to_peers) += 1;
      stats_.staged += staged ? 1 : 0;
      spills_.push_back({bytes, reader, c.where, c.path, staged});
    }
    return p;
  }

  // The pool's memory on `owner`, keeping the device's reserve free. The headroom that ranked the
  // candidate counts the pool's cached blocks, yet a request that no cached block fits grows the
  // pool, and cached memory that shares physical chunks with live blocks cannot be given back. The
  // pool keeps the reserve itself (`pool_limits::keep_free_bytes`): a growth that would reach into
  // it is refused (after the pool's out-of-memory pipeline gave back what it could, its
  // `oom_handler` included), and the next candidate is tried. Where the device's free memory
  // shrinks meanwhile (another process), an allocation that still reaches into the reserve is
  // undone: the pool gives its idle segments back and tries once more, then the device is refused.
  void* allocate_within_reserve(device_id owner, std::size_t bytes) {
    auto& pool = pools_.pool(owner);
    if (!reserve_.empty()) {  // the pool keeps the reserve itself (the rest of its limits stays)
      pool_limits l = pool.limits();
      if (l.keep_free_bytes != reserve_[owner.index()]) {
        l.keep_free_bytes = reserve_[owner.index()];
        pool.set_limits(l);
      }
    }
    const auto into_reserve = [&] {
      if constexpr (requires(const Upstream& u) { u.free_bytes(); }) {
        const std::size_t reserve = reserve_.empty() ? 0 : reserve_[owner.index()];
        return pool.upstream().free_bytes() < reserve;
      } else {
        return false;  // an upstream that cannot say its free memory: the ranking's figures decide
      }
    };
    for (int attempt = 0; attempt < 2; ++attempt) {
      void* p = nullptr;
      try {
        p = pool.allocate(bytes);
      } catch (const std::bad_alloc&) {
        return nullptr;
      }
      if (!into_reserve()) return p;
      pool.deallocate(p, bytes);
      (void)pool.release();
    }
    return nullptr;
  }

  void release(const placed& e, void* p, std::size_t bytes) noexcept {
    if (e.where.is_host()) {
      host_pool_for_existing(e.where.numa_node).deallocate(p, bytes);
    } else {
      pools_.deallocate(e.where.device, p, bytes, cuda_allocation_alignment, stream_ref{});
    }
  }

  host_pool& host_pool_for(std::optional<int> numa) {
    const int key = numa.value_or(-1);
    auto it = host_pools_.find(key);
    if (it == host_pools_.end()) {
      pool_options o = pool_options_;
      o.expandable_segments = false;
      it = host_pools_.emplace(key, std::make_unique<host_pool>(make_host_(numa), o)).first;
    }
    return *it->second;
  }
  host_pool& host_pool_for_existing(std::optional<int> numa) noexcept { return *host_pools_.at(numa.value_or(-1)); }

  const topology& links_;
  device_pools pools_;
  std::function<HostUpstream(std::optional<int>)> make_host_;
  peer_access<PeerOps> peers_;
  std::vector<std::size_t> reserve_;
  placement_options options_;
  pool_options pool_options_;
  copy_function copy_;
  mutable std::mutex mutex_;
  std::map<int, std::unique_ptr<host_pool>> host_pools_;  // by NUMA node (-1: unknown)
  std::unordered_map<void*, placed> live_;
  std::vector<spill_record> spills_;
  placement_statistics stats_;
};

/// Deduces the upstream types from the factories: `placed_allocator p{links, make_gpu, make_host, peers}`.
template <class MakeDevice, class MakeHost, class PeerOps, class... Rest>
placed_allocator(const topology&, MakeDevice, MakeHost, PeerOps, Rest...)
    -> placed_allocator<std::invoke_result_t<MakeDevice, device_id>, std::invoke_result_t<MakeHost, std::optional<int>>, PeerOps>;

}  // namespace mgm
