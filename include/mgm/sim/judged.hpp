/// @file
/// @brief `sim::judged<A>`: an allocator on the simulated machine whose every hand-out is judged.
#pragma once

#include <mgm/allocator_ref.hpp>
#include <mgm/concepts.hpp>
#include <mgm/properties.hpp>
#include <mgm/sim/machine.hpp>
#include <mgm/sim/oracle.hpp>
#include <mgm/stream.hpp>

#include <cstddef>
#include <memory>
#include <optional>

namespace mgm::sim {

/// @brief Wraps any allocator on the simulator (a `caching_pool`, CUB's target, the adaptors,
/// `placed_allocator`) and reports each allocate, deallocate and `record_stream` to the machine's
/// `oracle`, which checks that no range is handed to a new user while an earlier one may still
/// touch it (see `oracle`). The machine sees sub-allocations and cache hits no other way.
/// @code
///   mgm::caching_pool pool{machine.allocator(mgm::device_id{0})};
///   mgm::sim::judged judged_pool{machine, pool};
///   void* p = judged_pool.allocate_async(1 << 20, 256, stream);   // judged
///   REQUIRE(machine.hazards().empty());
/// @endcode
/// Holds the allocator by reference, as `allocator_ref` does; both must outlive it. It satisfies
/// the allocator concepts `A` satisfies (not `vmm_allocator`: memory mapped past it would not be
/// judged). `a->member()` reaches the wrapped allocator's other members.
/// @tparam A an `mgm::allocator`, or an allocator that places by reader (`allocate(reader, bytes)`,
///   `deallocate(p, bytes)`, `rebalance()`: `placed_allocator`).
/// @throws what `A` throws; `stream_hazard` from `allocate`, `allocate_async` and `record_stream`
/// when the machine enforces (the block is first given back to `A`, unjudged); never from
/// `rebalance` (the buffers have moved: a hazard is only listed).
/// **Thread safety:** that of `A`. **Device affinity:** that of `A`.
template <class A>
class judged : public mgm::detail::ref_platform<A> {
 public:
  judged(machine& m, A& a) noexcept : oracle_{m.oracle()}, a_{std::addressof(a)} {}

  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = cuda_allocation_alignment)
    requires allocator<A>
  {
    void* p = a_->allocate(bytes, alignment);
    if (p != nullptr && oracle_.enabled()) {
      try {
        // Device memory: in the legacy default stream's order, as RMM's synchronous allocate (the
        // host reaches device memory only through that stream); host memory: to the host at once.
        const std::optional<device_id> d = device();
        oracle_.handed_out(p, bytes, d ? std::optional<stream_ref>{stream_ref{}} : std::nullopt, d);
      } catch (...) {
        a_->deallocate(p, bytes, alignment);
        throw;
      }
    }
    return p;
  }
  void deallocate(void* p, std::size_t bytes, std::size_t alignment = cuda_allocation_alignment) noexcept
    requires allocator<A>
  {
    if (p != nullptr && oracle_.enabled()) oracle_.freed(p, std::nullopt, device());
    a_->deallocate(p, bytes, alignment);
  }

  /// @brief `A::allocate(reader, bytes)` (placement by reader), judged as a host allocation.
  [[nodiscard]] void* allocate(device_id reader, std::size_t bytes)
    requires requires(A& a) { { a.allocate(reader, bytes) } -> std::same_as<void*>; }
  {
    void* p = a_->allocate(reader, bytes);
    if (p != nullptr && oracle_.enabled()) {
      try {
        oracle_.handed_out(p, bytes, std::nullopt, std::nullopt);
      } catch (...) {
        a_->deallocate(p, bytes);
        throw;
      }
    }
    return p;
  }
  /// @brief `A::deallocate(p, bytes)` of an allocator that places by reader.
  void deallocate(void* p, std::size_t bytes) noexcept
    requires(!allocator<A> && requires(A& a) { a.deallocate(p, bytes); })
  {
    if (p != nullptr && oracle_.enabled()) oracle_.freed(p, std::nullopt, std::nullopt);
    a_->deallocate(p, bytes);
  }
  /// @brief `A::rebalance()`: each moved buffer is reported as a new host allocation and a free
  /// of the old one (the move copies on the host).
  auto rebalance()
    requires requires(A& a) { a.rebalance(); }
  {
    auto moved = a_->rebalance();
    if (oracle_.enabled()) {
      for (const auto& m : moved) {
        oracle_.freed(m.from_ptr, std::nullopt, std::nullopt);
        try {  // the buffers have moved already: a hazard is listed, and the moves are returned
          oracle_.handed_out(m.to_ptr, m.bytes, std::nullopt, std::nullopt);
        } catch (const stream_hazard&) {
        }
      }
    }
    return moved;
  }
  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref s)
    requires stream_allocator<A>
  {
    void* p = a_->allocate_async(bytes, alignment, s);
    if (p != nullptr && oracle_.enabled()) {
      try {
        oracle_.handed_out(p, bytes, s, device());
      } catch (...) {
        a_->deallocate_async(p, bytes, alignment, s);
        throw;
      }
    }
    return p;
  }
  void deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref s) noexcept
    requires stream_allocator<A>
  {
    if (p != nullptr && oracle_.enabled()) oracle_.freed(p, s, device());
    a_->deallocate_async(p, bytes, alignment, s);
  }
  /// @brief `A::record_stream`, reported.
  void record_stream(void* p, stream_ref s)
    requires requires(A& a) { a.record_stream(p, s); }
  {
    a_->record_stream(p, s);
    if (oracle_.enabled()) oracle_.used_on(p, s);
  }
  [[nodiscard]] auto stream_ops() const
    requires platform_allocator<A>
  {
    return a_->stream_ops();
  }

  [[nodiscard]] A& get() const noexcept { return *a_; }
  A* operator->() const noexcept { return a_; }

  friend bool operator==(const judged& x, const judged& y) noexcept { return x.a_ == y.a_; }
  template <class P>
    requires has_property<A, P>
  friend auto get_property(const judged& j, P tag) noexcept {
    return get_property(*j.a_, tag);
  }

 private:
  [[nodiscard]] std::optional<device_id> device() const noexcept {
    if constexpr (has_property_with_value<A, device_affinity>) {
      const device_id d = get_property(*a_, device_affinity{});
      if (d.is_host()) return std::nullopt;  // host memory: the machine finds no device for it
      return d;
    } else {
      return std::nullopt;
    }
  }

  oracle oracle_;
  A* a_;
};

}  // namespace mgm::sim
