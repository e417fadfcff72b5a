/// @file
/// @brief `limiting_adaptor`: a byte cap on what one device's upstream may hand out.
#pragma once

#include <mgm/adaptors/detail/adaptor_base.hpp>
#include <mgm/bytes.hpp>
#include <mgm/detail/checks.hpp>
#include <mgm/error.hpp>

#include <atomic>
#include <memory>
#include <string>

namespace mgm {

/// @brief Fails allocations that would take more than `limit_bytes` through it (sizes rounded up
/// to 256 bytes, as CUDA allocates), with `mgm::out_of_memory`. The count is taken before the
/// upstream call and rolled back if the upstream throws, so a failure never leaks budget.
/// `free_bytes()` is the budget left (capped by the upstream's own, where it has one): a pool over
/// this adaptor sees the cap as the device's size.
/// Copies share the budget. @tparam Upstream an `mgm::allocator`.
/// **Thread safety:** safe (one atomic). **Device affinity:** the upstream's.
template <allocator Upstream>
class limiting_adaptor : public detail::adaptor_base<limiting_adaptor<Upstream>, Upstream> {
  using base = detail::adaptor_base<limiting_adaptor<Upstream>, Upstream>;
  friend base;

 public:
  limiting_adaptor(Upstream upstream, std::size_t limit_bytes)
      : base{std::move(upstream)}, state_{std::make_shared<state>(limit_bytes)} {}

  [[nodiscard]] std::size_t limit_bytes() const noexcept { return state_->limit; }
  [[nodiscard]] std::size_t allocated_bytes() const noexcept { return state_->allocated.load(std::memory_order_relaxed); }
  [[nodiscard]] std::size_t free_bytes() const {
    const std::size_t used = allocated_bytes();
    std::size_t left = used >= state_->limit ? 0 : state_->limit - used;
    if constexpr (requires(const Upstream& u) { u.free_bytes(); }) left = std::min(left, this->upstream_.free_bytes());
    return left;
  }

  friend bool operator==(const limiting_adaptor& a, const limiting_adaptor& b) noexcept {
    return a.state_ == b.state_ && a.upstream_ == b.upstream_;
  }

 private:
  struct state {
    explicit state(std::size_t l) : limit{l} {}
    std::size_t limit;
    std::atomic<std::size_t> allocated{0};
  };

  template <class Call>
  void* on_allocate(std::size_t bytes, std::size_t, stream_ref, Call&& call) {
    if (bytes == 0) return call();
    std::size_t charged = 0;
    if (!detail::round_up(bytes, cuda_allocation_alignment, charged) || charged > state_->limit) {
      throw_over(bytes, allocated_bytes());
    }
    const std::size_t before = state_->allocated.fetch_add(charged, std::memory_order_relaxed);
    if (before + charged > state_->limit) {
      state_->allocated.fetch_sub(charged, std::memory_order_relaxed);
      throw_over(bytes, before);
    }
    try {
      return call();
    } catch (...) {
      state_->allocated.fetch_sub(charged, std::memory_order_relaxed);  // the upstream failed: give it back
      throw;
    }
  }
  template <class Call>
  void on_deallocate(void* p, std::size_t bytes, std::size_t, stream_ref, Call&& call) noexcept {
    call();
    std::size_t charged = 0;
    if (p != nullptr && bytes != 0 && detail::round_up(bytes, cuda_allocation_alignment, charged)) {
      state_->allocated.fetch_sub(charged, std::memory_order_relaxed);
    }
  }
  [[noreturn]] void throw_over(std::size_t bytes, std::size_t allocated) const {
    throw out_of_memory{"limiting_adaptor: allocating " + detail::describe_bytes(bytes) + " would exceed the limit of " +
                            format_bytes(state_->limit) + " (" + format_bytes(allocated) + " already allocated)",
                        bytes};
  }

  std::shared_ptr<state> state_;
};

}  // namespace mgm
