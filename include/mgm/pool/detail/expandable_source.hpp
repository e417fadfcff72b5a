/// @file
/// @brief The caching pool's expandable segments: one reserved range per stream and size class,
/// mapped in chunks as blocks need them and unmapped again, chunk by chunk, when idle.
///
/// ## Chunks and the mapping policy
/// A growth is one `set_access` and, per physical chunk, one `create` and one `map`: one chunk for
/// what the request needs (whole granules) up to 1/512 of the device (1/16 of the segment's mapped
/// bytes when more, while eight times those bytes stay available: `mapping_policy::largest_chunk`),
/// or `pool_options::map_chunk_bytes` when that option is smaller (unlimited by default); the
/// growth's last chunk takes the tail, up to twice that less a granule, where a chunk of its own
/// for the tail cost one more create (`scripts/bench`, 6 iterations, typical model: creates
/// ResNet-32 64 -> 48, GPT-2 124M 103 -> 98, GPT 1.3B 246 -> 222, 2.7B 248 -> 221; modelled driver
/// seconds 0.0671 -> 0.0647, 0.0800 -> 0.0793, 0.2701 -> 0.2666, 0.4395 -> 0.4356; reserved / live
/// as before, fits at most 1.0097 on the traces above 1 GiB live). At the typical prices of research/driver-costs.md §3
/// each growth costs about 171 us of fixed charges (create 143, set_access 27, map 1.5) on top of
/// what its bytes cost, so the number of growths is what the policy minimises:
/// - **Map ahead.** A growth maps beyond the request while the segment's free mapped bytes stay
///   at most 1/`map_ahead_share` of its mapped bytes afterwards. The memory mapped ahead serves the
///   next requests (the forward pass of a training step allocates layer after layer); whatever is
///   left of it when the pool peaks is at most that share, which keeps reserved / live within
///   about 3 % of what exact mapping gives. Measured with `scripts/bench` (6 iterations, typical
///   model, chunks of at most 1/512 of an 80 GiB device): ResNet-50 w0 from 0.0343 to 0.0219
///   modelled driver seconds (119 to 37 creates), ResNet-32 from 0.1082 to 0.0716, GPT 2.7B (on
///   141 GiB) from 0.78 to 0.45; reserved / live rose by at most 3 points (BERT-base 1.013 to 1.033).
/// - **Near full** (less than 1/`near_full_share` of the device would stay available, free on the
///   device and within the pool's `pool_limits`), a growth maps in single granules what it needs
///   and a small pad (`mapping_policy::padded`: at most 1/64 of what would stay available and
///   1/32 of the growth): a pool under a capacity limit must be able to give memory back in small
///   pieces, and never maps ahead much of what another range or stream will need; the pad takes
///   what a later pass lacks. The figures are `mapping_policy`'s.
/// - **Out of memory.** A growth that the device's free memory cannot hold is not begun (it used
///   to create and map chunks until the driver refused one, then undo them): the out-of-memory
///   pipeline gives idle memory back and retries. Measured with `scripts/bench` (6 iterations at
///   1.05 x peak live, typical model): GPT-2 124M from 7,428 late driver calls and 1.05 modelled
///   driver seconds to 2,062 and 0.60; every other trace and every `--fit` as before. Moving idle
///   chunks of free blocks into a growth instead (unmapped there, mapped here) was measured and
///   left out: no fewer late calls (2,062; 1,938 when a moved chunk may pass the lack), and worse
///   fits (GPT-2 1.0097 to 1.0111, the generated ResNet-50 1.0084 to 1.0122), since a pool that
///   moves memory gives back less at its limit.
/// - **The huge range.** Requests of `pool_options::huge_request_bytes` (512 MiB) and more grow a
///   range of their own, which maps nothing ahead (the next huge request is as large), and take
///   an end of a free block chosen by `pool_slow_paths::take_huge`: away from a live predecessor
///   of their size, else beside the younger neighbour. Other requests take its blocks only under
///   pressure (`pool_slow_paths::from_other_pool`). A language model keeps each step's logits until
///   the next step's exist (`logits, loss = model(...)`): at GPT-2's peak the previous step's
///   785 MiB of bf16 logits were just freed where none of the loss's 1.57 GiB fp32 blocks fit, so
///   one range held 8 logit sizes for 7 live (1.084 x peak live) and, at 1.05 x, gave memory back
///   and mapped it again every step. In the huge range the logits alternate between its ends and
///   the loss's blocks fill the middle: 7 sizes. Measured with `scripts/bench` (6 iterations,
///   typical model): reserved / live GPT-2 124M 1.084 -> 1.040, GPT 1.3B 1.032 -> 1.018, 2.7B
///   1.032 -> 1.023, U-Net 1.033 -> 1.030, every other trace as before; late driver calls at
///   1.05 x peak live, GPT-2 2,030 -> 0; `mgm replay --fit` GPT-2 1.0097 -> 1.0074, U-Net 1.0057
///   -> 1.0127 (at its limit an idle 84 MiB block of the large range lay in a chunk that a live
///   block shared, which no release can unmap; chunks that stay smaller near a limit brought it
///   to 1.0033: `mapping_policy::largest_chunk`), the others within 1.01.
///   Measured and left out: a huge request taking the large range's block when it fits better
///   than the huge range's (GPT-2 1.136, since the next step's logits landed in the large range);
///   a huge range that maps ahead as the large one does (GPT-2 1.057); a threshold of 256 or
///   384 MiB (a simulation of the ranges: GPT 1.3B's 392 MiB activations kept apart, 1.016 ->
///   1.041); placement by the neighbour's size alone (the loss's blocks beside an earlier sibling
///   of theirs pushed the next logits into a growth: 8 sizes again from the third step).
/// CUDA cannot unmap part of a mapping, so a chunk is also the unit of unmapping: an idle block
/// gives back the chunks it covers whole.
///
/// ## Invariants
/// - a range's blocks tile it; a block is mapped (`handles[g] != 0` for each of its granules) or
///   unmapped (in its owner's unmapped index, no memory behind it), never partly; granules at or
///   past `handles.size()` are unmapped (the table grows with the growths, zeros included: an
///   80 GiB device's range would be 360 KiB of zeros written at once)
/// - a chunk is a maximal run of granules with the same handle (handles are never reused while
///   mapped); it is mapped, accessed, unmapped and released as a whole
/// - `reserved` counts mapped granules only
/// - every mapped granule is readable by every device in `peers()` (the device first)
/// - mapping and unmapping happen without the pool's lock; the blocks concerned are *busy*
///   meanwhile (state pending, in no index) and nobody else touches them
#pragma once

#include <mgm/concepts.hpp>
#include <mgm/detail/checks.hpp>
#include <mgm/error.hpp>
#include <mgm/log.hpp>
#include <mgm/pool/detail/block_space.hpp>
#include <mgm/pool/detail/mapping_policy.hpp>
#include <mgm/pool/detail/nvtx.hpp>
#include <mgm/pool/detail/pool_mutex.hpp>
#include <mgm/pool/detail/stream_cache.hpp>

#include <algorithm>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>  // std::unique_lock
#include <string>
#include <vector>

namespace mgm::detail {

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

template <class Upstream, bool Statistics>
class expandable_source {
 public:
  using vmm_type = typename vmm_of<Upstream>::type;
  using handle = typename vmm_type::physical_handle;

  struct segment {
    std::uintptr_t base{0};
    std::size_t bytes{0};
    stream_slot* owner{nullptr};
    bool small{false};
    bool huge{false};  // a huge range (`pool_options::huge_request_bytes`)
    block* head{nullptr};
    std::vector<handle> handles;  // per granule, up to the end of the highest growth tried (0: unmapped)
    std::size_t mapped{0};  // bytes of its granules that are mapped
  };

  /// Expandable segments are used when the options ask, the upstream has virtual memory and the
  /// device supports it with a granule that is a power of two and a multiple of the rounding.
  expandable_source(Upstream& upstream, device_id device, const pool_options& options)
      : device_{device}, vmm_{make_vmm(upstream)} {
    peers_.push_back(device);
    if constexpr (vmm_allocator<Upstream>) {
      if (options.expandable_segments && vmm_.supported(device)) {
        granule_ = vmm_.granularity(device);
        on_ = granule_ != 0 && (granule_ & (granule_ - 1)) == 0 && granule_ % options.round_bytes == 0;
        if (on_) chunk_ = std::max(granule_, options.map_chunk_bytes / granule_ * granule_);
        if constexpr (shareable_vmm_ops<vmm_type>) shareable_ = on_ && vmm_.sharing() == vmm_sharing::shareable;
      }
    }
  }

  [[nodiscard]] bool on() const noexcept { return on_; }
  /// Whether a request of `size` bytes grows a range (else a plain segment serves it). Small
  /// requests keep plain small segments unless the memory is shareable (see `shareable`).
  [[nodiscard]] bool grows(std::size_t size, const pool_options& o) const noexcept {
    return on_ && (size >= o.large_direct_bytes || shareable_);
  }
  /// Whether what it maps is shareable memory: then every request grows here (a plain segment
  /// could be neither exported nor registered with NCCL).
  [[nodiscard]] bool shareable() const noexcept { return shareable_; }
  [[nodiscard]] const std::vector<std::unique_ptr<segment>>& segments() const noexcept { return segments_; }
  [[nodiscard]] std::size_t granule() const noexcept { return granule_; }
  [[nodiscard]] const std::vector<device_id>& peers() const noexcept { return peers_; }
  /// Whether the last new range was refused for want of address space (not of device memory).
  [[nodiscard]] bool address_space_refused() const noexcept { return address_space_refused_; }
  [[nodiscard]] vmm_type& vmm() noexcept { return vmm_; }

  /// The physical chunks behind mapped block `b` of an expandable segment, in address order, each
  /// with its bytes, and the address the first begins at. Empty when `b` is in none of them.
  std::pair<std::uintptr_t, std::vector<std::pair<handle, std::size_t>>> chunks_behind(const block& b) const {
    std::pair<std::uintptr_t, std::vector<std::pair<handle, std::size_t>>> out{0, {}};
    for (const auto& seg : segments_) {
      if (b.addr < seg->base || b.addr + b.size > seg->base + seg->bytes) continue;
      std::size_t g = (b.addr - seg->base) / granule_;
      while (g > 0 && seg->handles[g - 1] == seg->handles[g]) --g;  // back to its chunk's start
      out.first = seg->base + g * granule_;
      const std::size_t last = (b.addr + b.size - 1 - seg->base) / granule_;
      while (g <= last) {
        MGM_EXPECTS(seg->handles[g] != 0, "caching_pool: a block with an unmapped granule");
        const std::size_t end = run_end(*seg, g);
        out.second.emplace_back(seg->handles[g], (end - g) * granule_);
        g = end;
      }
      break;
    }
    return out;
  }

  /// Serves a miss from `slot`'s ranges: maps the granules the request needs (after a free
  /// neighbour below, if any) without the lock, reserving a new range when none has room, and
  /// maps ahead (near full: pads) unless `minimal`. `budget()` gives the pool's limits (`growth_budget`), asked
  /// under the lock: the growth maps at most its room. Returns the block out of every index, or
  /// nullptr when the device is out of memory, when the request needs more than the room, or
  /// (unless `minimal`) more than the device's free memory less the growths under way: nothing
  /// changed then but perhaps a new reserved range. When it throws, the same.
  template <class Budget>
  block* try_grow(std::unique_lock<pool_mutex>& lock, Upstream& upstream, block_space<Statistics>& space,
                  stream_slot& slot, std::size_t size, bool small, Budget&& budget, bool minimal = false,
                  bool huge = false) {
    if constexpr (!vmm_allocator<Upstream>) {
      (void)lock, (void)upstream, (void)space, (void)slot, (void)size, (void)small, (void)budget, (void)minimal, (void)huge;
      return nullptr;
    } else {
      tlsf_index& free_ranges = unmapped_ranges(slot, small, huge);
      block* u = unmapped_fit(free_ranges, size);
      if (u == nullptr) {
        std::size_t whole = size;
        (void)round_up(whole, granule_, whole);
        // No new range only to refuse: beyond the room, or beyond what the pool may ever hold
        // (nor should a terabyte of address space be reserved to find out).
        const growth_budget limits = budget();
        if (whole > limits.room || whole > capacity(upstream, limits)) return nullptr;
        if (!reserve(lock, upstream, space, slot, size, small, huge)) return nullptr;
        return try_grow(lock, upstream, space, slot, size, small, budget, minimal, huge);
      }
      // Start from a free mapped neighbour below, so that growth extends it.
      block* below = u->prev;
      if (below != nullptr &&
          !(below->state == block_state::free && !below->unmapped() && below->owner == &slot && below->size < size)) {
        below = nullptr;  // (a free block below as large as the request was passed over on purpose)
      }
      const std::uintptr_t start = below != nullptr ? below->addr : u->addr;
      std::size_t map_bytes = start + size - u->addr;
      (void)round_up(map_bytes, granule_, map_bytes);
      const growth_budget limits = budget();
      const std::size_t avail = available(upstream, space, limits.room);
      // Beyond the room, or (unless minimal) beyond what the device has free, a growth is not begun:
      // it would make and map chunks until the driver refused one, then undo them all. The
      // out-of-memory pipeline gives idle memory back first; its minimal retry asks the driver
      // whatever the free figure says.
      if (std::min(map_bytes, u->size) > (minimal ? limits.room : avail)) return nullptr;
      segment& seg = segment_of(u);
      const std::size_t cap = capacity(upstream, limits);
      const mapping_policy policy{granule_};
      const bool full = policy.near_full(cap, avail, map_bytes);
      if (!minimal) {
        map_bytes = full ? policy.padded(avail, map_bytes)
                 : seg.huge ? map_bytes  // the next huge request is as large: what is mapped ahead serves none
                            : std::max(map_bytes, policy.ahead_bytes(cap, avail, seg.mapped, free_mapped(seg), size));
      }
      map_bytes = std::min(map_bytes, u->size);
      const std::size_t first = (u->addr - seg.base) / granule_;
      if (seg.handles.size() < first + map_bytes / granule_) seg.handles.resize(first + map_bytes / granule_, handle{});
      const std::size_t chunk = full ? granule_ : std::min({chunk_, map_bytes, policy.largest_chunk(cap, avail, seg.mapped)});
      const std::vector<device_id> readers = peers_;  // read under the lock
      std::vector<handle> made;  // one per chunk
      made.reserve(map_bytes / chunk + 1);
      // The record of the split below, taken last before the unlock: nothing may fail after
      // mapping, and a record only reserved in the arena could be used by another thread while
      // the lock is released.
      block* const rest = map_bytes < u->size ? space.arena.make() : nullptr;
      free_ranges.remove(u);
      block_space<Statistics>::mark_busy(u);  // no one else touches it while unlocked
      if (below != nullptr) {
        space.take_free(below);
        block_space<Statistics>::mark_busy(below);
      }
      const std::uintptr_t va = u->addr;
      space.growing += map_bytes;  // counted by the limits of growths that start meanwhile
      lock.unlock();
      bool ok = true;
      std::exception_ptr failure;  // what failed, unless the device was out of memory
      std::size_t mapped = 0;      // chunks mapped so far
      try {  // per chunk one physical allocation and one mapping; one access call for them all
        for (std::size_t i = 0, n = chunks_in(map_bytes, chunk); i < n; ++i) {
          const std::size_t off = i * chunk;
          const std::size_t bytes = chunk_bytes(map_bytes, chunk, i);
          made.push_back(vmm_.create(device_, bytes));
          vmm_.map(reinterpret_cast<void*>(va + off), bytes, made.back());
          ++mapped;
        }
        vmm_.set_access(reinterpret_cast<void*>(va), map_bytes, readers);
      } catch (const out_of_memory&) {
        ok = false;
      } catch (...) {
        ok = false;
        failure = std::current_exception();
      }
      if (!ok) undo_map(va, map_bytes, chunk, made, mapped);
      lock.lock();
      space.growing -= map_bytes;
      // A peer granted access while the lock was released (`grant_access` skipped these busy
      // granules): it gets them too, or the growth is undone. Handing them out would let the
      // peer fault on memory that `peers()` says it may read.
      if (ok && peers_ != readers) {
        try {
          vmm_.set_access(reinterpret_cast<void*>(va), map_bytes, peers_);
        } catch (const out_of_memory&) {
          ok = false;
        } catch (...) {
          ok = false;
          failure = std::current_exception();
        }
        if (!ok) {
          lock.unlock();
          undo_map(va, map_bytes, chunk, made, mapped);
          lock.lock();
        }
      }
      if (!ok) {
        restore(space, u, below, rest);
        if (failure) std::rethrow_exception(failure);
        return nullptr;
      }
      for (std::size_t i = 0; i < map_bytes / granule_; ++i) seg.handles[first + i] = made[std::min(i * granule_ / chunk, made.size() - 1)];
      space.reserved += map_bytes;
      seg.mapped += map_bytes;
      if constexpr (Statistics) {
        space.stats.reserved_bytes.add(static_cast<std::int64_t>(map_bytes));
        space.stats.upstream_allocations += made.size();
      }
      if (rest != nullptr) space.insert_unmapped(space.split_off(u, map_bytes, rest));
      u->set_unmapped(false);
      u->owner = &slot;
      u->free_epoch = slot.next_epoch();  // new memory: no earlier event covers it
      if (below != nullptr) space.insert_free(below);
      block* b = space.insert_free(u);
      space.take_free(b);
      return b;
    }
  }

  /// Gives `peer` access to every mapped granule, now and later.
  void grant_access(device_id peer) {
    if (std::find(peers_.begin(), peers_.end(), peer) != peers_.end()) return;
    std::vector<device_id> next = peers_;
    next.push_back(peer);
    if constexpr (vmm_allocator<Upstream>) {
      for (const auto& seg : segments_) {
        for_each_mapped_run(*seg, [&](std::uintptr_t va, std::size_t bytes) {
          vmm_.set_access(reinterpret_cast<void*>(va), bytes, next);
        });
      }
    }
    peers_ = std::move(next);
  }

  /// Unmaps every whole granule of every free mapped block, until `reserved <= keep`. A block's
  /// stream may still use it: its event is waited for first (the release path may block the
  /// host). Unmapping happens without the lock. Streams that capture are left alone.
  template <class Ops>
  std::size_t unmap_idle(std::unique_lock<pool_mutex>& lock, block_space<Statistics>& space, stream_cache<Ops>& cache,
                         Ops& ops, std::size_t keep) noexcept {
    if constexpr (!vmm_allocator<Upstream>) {
      (void)lock, (void)space, (void)cache, (void)ops, (void)keep;
      return 0;
    } else {
      struct work {
        block* b;
        std::vector<std::pair<handle, std::size_t>> chunks;  // in address order, with their bytes
      };
      std::vector<work> todo;
      std::size_t released = 0;
      try {
        for (auto& seg : segments_) {
          merge_idle_runs(space, cache, ops, *seg);
          for (block* b = seg->head; b != nullptr && space.reserved > keep; b = b->next) {
            if (b->state != block_state::free || b->unmapped()) continue;
            // The first run of chunks that the block covers whole, as far as needed for `keep`.
            const auto [ga, gb] = whole_chunks(*seg, b->addr, b->addr + b->size, space.reserved - keep);
            if (gb <= ga) continue;
            if (ops.is_capturing(stream_ref{b->owner->stream})) continue;
            cache.wait_idle(*b->owner, b->free_epoch);  // the stream may still read this memory
            space.arena.reserve(2);  // the records first: nothing may fail once b has left its index
            work w{nullptr, {}};
            w.chunks.reserve((gb - ga) / granule_);
            todo.reserve(todo.size() + 1);
            space.take_free(b);
            const std::uintptr_t end = b->addr + b->size;
            block* low = nullptr;
            block* mid = b;
            block* tail = nullptr;
            if (ga > b->addr) {
              low = b;
              mid = space.split_off(b, ga - b->addr);  // b keeps [addr, ga)
            }
            if (gb < end) tail = space.split_off(mid, gb - mid->addr);  // mid keeps [ga, gb)
            block_space<Statistics>::mark_busy(mid);  // busy before the neighbours go back
            mid->set_unmapped(true);
            if (low != nullptr) space.insert_free(low);
            if (tail != nullptr) space.insert_free(tail);
            w.b = mid;
            const std::size_t first = (mid->addr - seg->base) / granule_;
            for (std::size_t g = 0; g < mid->size / granule_; ++g) {
              const handle h = seg->handles[first + g];
              if (w.chunks.empty() || w.chunks.back().first != h) w.chunks.emplace_back(h, 0);
              w.chunks.back().second += granule_;
              seg->handles[first + g] = 0;
            }
            space.reserved -= mid->size;
            seg->mapped -= mid->size;
            if constexpr (Statistics) {
              space.stats.reserved_bytes.sub(static_cast<std::int64_t>(mid->size));
              space.stats.upstream_frees += w.chunks.size();
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
        std::uintptr_t va = w.b->addr;
        for (const auto& [h, bytes] : w.chunks) {
          vmm_.unmap(reinterpret_cast<void*>(va), bytes);
          vmm_.release(h);
          va += bytes;
        }
      }
      lock.lock();
      for (const auto& w : todo) {
        w.b->owner = segment_of(w.b).owner;
        space.insert_unmapped(w.b);
      }
      return released;
    }
  }

  /// A forgotten stream's ranges and unmapped blocks go to `home`; ranges busy in another call
  /// (the lock released) only change owner: that call puts them back in their owner's index.
  void rehome(block_space<Statistics>& space, stream_slot* gone, stream_slot* home) noexcept {
    for (auto& seg : segments_) {
      if (seg->owner == gone) seg->owner = home;
      for (block* b = seg->head; b != nullptr;) {
        block* next = b->next;
        if (b->owner == gone && b->state == block_state::free && b->unmapped()) {
          gone->unmapped_of(*b).remove(b);
          b->owner = home;
          space.insert_unmapped(b);
        } else if (b->owner == gone && b->state == block_state::pending) {
          b->owner = home;
        }
        b = next;
      }
    }
  }

  /// Whether any granule is mapped.
  [[nodiscard]] bool holds_mapped() const noexcept {
    return std::any_of(segments_.begin(), segments_.end(), [](const auto& seg) { return seg->mapped != 0; });
  }

  /// Unmaps and unreserves everything (the pool's end; the caller waited for the device first).
  void destroy() noexcept {
    if constexpr (vmm_allocator<Upstream>) {
      for (const auto& seg : segments_) {
        for (std::size_t g = 0; g < seg->handles.size();) {
          const handle h = seg->handles[g];
          const std::size_t end = run_end(*seg, g);
          if (h != 0) {
            vmm_.unmap(reinterpret_cast<void*>(seg->base + g * granule_), (end - g) * granule_);
            vmm_.release(h);
          }
          g = end;
        }
        nvtx::unregister_heap(reinterpret_cast<void*>(seg->base));
        vmm_.unreserve(reinterpret_cast<void*>(seg->base), seg->bytes);
      }
    }
    segments_.clear();
  }

  /// What the pool may hold: the device's memory, or less under its limits. (An upstream that
  /// cannot say its size has none but the limits'.)
  static std::size_t capacity(const Upstream& upstream, const growth_budget& limits) {
    if constexpr (requires(const Upstream& up) { up.total_bytes(); }) {
      return std::min(limits.capacity, upstream.total_bytes());
    } else {
      (void)upstream;
      return limits.capacity == pool_options::unlimited ? 0 : limits.capacity;
    }
  }

  /// What a growth may take: `room` (the pool's limits), and no more than the device has free,
  /// less what other growths are taking meanwhile.
  static std::size_t available(const Upstream& upstream, const block_space<Statistics>& space, std::size_t room) {
    if constexpr (requires(const Upstream& up) { up.free_bytes(); }) {
      return std::min(room, space.unclaimed(upstream.free_bytes()));
    } else {
      (void)upstream, (void)space;
      return room;
    }
  }

 private:
  static vmm_type make_vmm(const Upstream& u) {
    if constexpr (vmm_allocator<Upstream>) {
      return u.vmm_ops();
    } else {
      (void)u;
      return {};
    }
  }

  segment& segment_of(const block* b) {
    for (auto& seg : segments_) {
      if (b->addr >= seg->base && b->addr < seg->base + seg->bytes) return *seg;
    }
    MGM_FAIL("caching_pool: a block outside its expandable segments");
  }

  template <class Fn>
  void for_each_mapped_run(const segment& seg, Fn&& fn) {
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

  // Undoes a growth that failed part-way: the first `mapped` chunks of `made` are mapped.
  void undo_map(std::uintptr_t va, std::size_t bytes, std::size_t chunk, const std::vector<handle>& made,
                std::size_t mapped) noexcept {
    if constexpr (vmm_allocator<Upstream>) {
      for (std::size_t i = 0; i < made.size(); ++i) {
        const std::size_t off = i * chunk;
        if (i < mapped) vmm_.unmap(reinterpret_cast<void*>(va + off), chunk_bytes(bytes, chunk, i));
        vmm_.release(made[i]);
      }
    } else {
      (void)va, (void)bytes, (void)chunk, (void)made, (void)mapped;
    }
  }

  // A growth of `bytes` in chunks of `chunk`: whole chunks, the last of them taking the tail
  // (a chunk of its own would cost one more create).
  static std::size_t chunks_in(std::size_t bytes, std::size_t chunk) noexcept { return std::max<std::size_t>(1, bytes / chunk); }
  static std::size_t chunk_bytes(std::size_t bytes, std::size_t chunk, std::size_t i) noexcept {
    return i + 1 == chunks_in(bytes, chunk) ? bytes - i * chunk : chunk;
  }

  // The free mapped bytes of `seg`: a walk of its blocks (a growth costs driver calls of at
  // least 150 us).
  static std::size_t free_mapped(const segment& seg) noexcept {
    std::size_t free = 0;
    for (const block* b = seg.head; b != nullptr; b = b->next) {
      if (b->state == block_state::free && !b->unmapped()) free += b->size;
    }
    return free;
  }

  // The end of the run of granules that share granule g's handle: of its chunk when mapped.
  static std::size_t run_end(const segment& seg, std::size_t g) noexcept {
    const handle h = seg.handles[g];
    while (g < seg.handles.size() && seg.handles[g] == h) ++g;
    return g;
  }

  // [first, last) of the whole chunks inside [lo, hi), starting at the first chunk that begins at
  // or after `lo` and ends by `hi`, extended over the chunks that follow it while they end by `hi`,
  // and stopped once `want` bytes are covered. Empty (first == last) when no chunk lies inside.
  std::pair<std::uintptr_t, std::uintptr_t> whole_chunks(const segment& seg, std::uintptr_t lo, std::uintptr_t hi,
                                                         std::size_t want) const noexcept {
    std::size_t g = (lo - seg.base + granule_ - 1) / granule_;
    const std::size_t end = (hi - seg.base) / granule_;  // granules wholly below hi
    // Skip the rest of a chunk that began below lo.
    if (g > 0 && g < seg.handles.size() && seg.handles[g] == seg.handles[g - 1]) g = std::min(end, run_end(seg, g));
    const std::size_t first = g;
    std::size_t covered = 0;
    while (g < end && covered < want) {
      const std::size_t c = run_end(seg, g);
      if (c > end) break;  // the chunk reaches past hi: still partly in use
      covered += (c - g) * granule_;
      g = c;
    }
    return {seg.base + first * granule_, seg.base + g * granule_};
  }

  /// The slot's unmapped ranges of a size class.
  static tlsf_index& unmapped_ranges(stream_slot& slot, bool small, bool huge) noexcept {
    return huge ? slot.unmapped_huge : slot.unmapped_index(small);
  }
  /// An unmapped range of `ranges` with room for `size` bytes, or nullptr.
  static block* unmapped_fit(tlsf_index& ranges, std::size_t size) noexcept {
    block* u = ranges.find(size);
    return u != nullptr ? u : ranges.scan(size);
  }

  /// A failed growth gives its range back: to the slot that owns the segment now (a forgotten
  /// stream's segments move while the lock is released), merged with any neighbour that another
  /// thread unmapped meanwhile (left apart, two halves would never serve a request that needs both).
  /// The record a split would have used (`rest`, if any) goes back to the arena.
  void restore(block_space<Statistics>& space, block* u, block* below, block* rest) noexcept {
    u->owner = segment_of(u).owner;
    space.insert_unmapped(u);
    if (below != nullptr) space.insert_free(below);
    if (rest != nullptr) space.arena.recycle(rest);
  }

  /// A new reserved range for the stream and size class (the device's memory and an eighth, as
  /// PyTorch reserves, or the request if larger), unless another thread reserved one that serves
  /// `size` while the lock was released. False when the address space is exhausted.
  bool reserve(std::unique_lock<pool_mutex>& lock, Upstream& upstream, block_space<Statistics>& space,
               stream_slot& slot, std::size_t size, bool small, bool huge) {
    if constexpr (vmm_allocator<Upstream>) {
      std::size_t bytes = upstream.total_bytes() / 8 * 9;
      bytes = std::max(bytes, size);
      (void)round_up(bytes, granule_, bytes);
      // The records first, taken (not only reserved: another thread may use what is reserved
      // while the lock is released); the list's room is made again after the lock is back.
      auto seg = std::make_unique<segment>();
      block* const head = space.arena.make();
      lock.unlock();
      void* va = nullptr;
      try {
        va = vmm_.reserve(device_, bytes);
      } catch (const out_of_memory&) {
        lock.lock();
        space.arena.recycle(head);
        address_space_refused_ = true;
        return false;
      } catch (...) {
        lock.lock();
        space.arena.recycle(head);
        throw;
      }
      lock.lock();
      const auto give_back = [&]() noexcept {
        lock.unlock();
        vmm_.unreserve(va, bytes);
        lock.lock();
        space.arena.recycle(head);
      };
      // Another thread's miss on this stream and class may have reserved a range meanwhile that
      // serves this request too: one is enough (each is the device's memory and an eighth).
      if (unmapped_fit(unmapped_ranges(slot, small, huge), size) != nullptr) {
        give_back();
        return true;
      }
      try {
        segments_.reserve(segments_.size() + 1);
      } catch (...) {  // a host out of memory: the range goes back, nothing else changed
        give_back();
        throw;
      }
      address_space_refused_ = false;
      seg->base = reinterpret_cast<std::uintptr_t>(va);
      seg->bytes = bytes;
      seg->owner = &slot;
      seg->small = small;
      seg->huge = huge;
      head->addr = seg->base;
      head->size = bytes;
      head->small = small ? 1 : 0;
      head->vm = huge ? 9 : 1;
      head->owner = &slot;
      seg->head = head;
      segments_.push_back(std::move(seg));
      nvtx::register_heap(va, bytes);
      if constexpr (Statistics) space.stats.segments.add(1);
      space.insert_unmapped(head);
    }
    return true;
  }

  /// Free mapped neighbours cached by different streams cannot merge while in use; on release the
  /// host waits for their streams, then merges them, so that the granules they share can go too.
  template <class Ops>
  void merge_idle_runs(block_space<Statistics>& space, stream_cache<Ops>& cache, Ops& ops, segment& seg) {
    for (block* b = seg.head; b != nullptr; b = b->next) {
      if (b->state != block_state::free || b->unmapped()) continue;
      // Wait for every stream of the run first: nothing leaves its index before all waits succeed.
      block* end = b;
      while (block* n = end->next) {
        if (n->state != block_state::free || n->unmapped()) break;
        if (ops.is_capturing(stream_ref{end->owner->stream}) || ops.is_capturing(stream_ref{n->owner->stream})) break;
        cache.wait_idle(*end->owner, end->free_epoch);
        cache.wait_idle(*n->owner, n->free_epoch);
        end = n;
      }
      if (b == end) continue;
      space.take_free(b);
      while (b != end) {
        block* n = b->next;
        space.take_free(n);
        b->size += n->size;
        b->next = n->next;
        if (n->next != nullptr) n->next->prev = b;
        if (n == end) end = b;
        space.arena.recycle(n);
      }
      b->free_epoch = b->owner->next_epoch();
      b = space.insert_free(b);
    }
  }

  device_id device_;
  vmm_type vmm_;
  bool on_{false};
  bool shareable_{false};
  bool address_space_refused_{false};  // the last reserve() found no address space (under the pool's lock)
  std::size_t granule_{0};
  std::size_t chunk_{0};  // the largest chunk a growth maps at once: whole granules (map_chunk_bytes)
  std::vector<device_id> peers_;  // readers of every mapped granule: the device first
  std::vector<std::unique_ptr<segment>> segments_;
};

}  // namespace mgm::detail
