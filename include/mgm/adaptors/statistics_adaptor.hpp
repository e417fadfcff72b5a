/// @file
/// @brief `statistics_adaptor`: counts what passes through to its upstream.
#pragma once

#include <mgm/adaptors/detail/adaptor_base.hpp>
#include <mgm/pool/pool_statistics.hpp>

#include <memory>
#include <mutex>

namespace mgm {

/// @brief Bytes and allocations outstanding through an allocator: current, peak, total.
struct adaptor_statistics {
  stat bytes;
  stat allocations;
  friend bool operator==(const adaptor_statistics&, const adaptor_statistics&) = default;
};

/// @brief Counts the bytes and allocations that pass through to `Upstream`.
/// Copies share the counts (and compare equal). Failed allocations are not counted.
/// @tparam Upstream an `mgm::allocator`. **Thread safety:** safe. **Device affinity:** the upstream's.
template <allocator Upstream>
class statistics_adaptor : public detail::adaptor_base<statistics_adaptor<Upstream>, Upstream> {
  using base = detail::adaptor_base<statistics_adaptor<Upstream>, Upstream>;
  friend base;

 public:
  explicit statistics_adaptor(Upstream upstream) : base{std::move(upstream)} {}

  [[nodiscard]] adaptor_statistics statistics() const {
    const std::lock_guard lock{state_->mutex};
    return state_->stats;
  }

  friend bool operator==(const statistics_adaptor& a, const statistics_adaptor& b) noexcept {
    return a.state_ == b.state_ && a.upstream_ == b.upstream_;
  }

 private:
  struct state {
    std::mutex mutex;
    adaptor_statistics stats;
  };

  template <class Call>
  void* on_allocate(std::size_t bytes, std::size_t, stream_ref, Call&& call) {
    void* p = call();
    if (p != nullptr) {
      const std::lock_guard lock{state_->mutex};
      state_->stats.bytes.add(static_cast<std::int64_t>(bytes));
      state_->stats.allocations.add(1);
    }
    return p;
  }
  template <class Call>
  void on_deallocate(void* p, std::size_t bytes, std::size_t, stream_ref, Call&& call) noexcept {
    call();
    if (p != nullptr) {
      const std::lock_guard lock{state_->mutex};
      state_->stats.bytes.sub(static_cast<std::int64_t>(bytes));
      state_->stats.allocations.sub(1);
    }
  }

  std::shared_ptr<state> state_ = std::make_shared<state>();
};

}  // namespace mgm
