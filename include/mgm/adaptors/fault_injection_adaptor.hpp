/// @file
/// @brief `fault_injection_adaptor`: makes chosen allocations fail, reproducibly.
#pragma once

#include <mgm/adaptors/detail/adaptor_base.hpp>
#include <mgm/bytes.hpp>
#include <mgm/error.hpp>

#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>

namespace mgm {

/// @brief Which allocations to fail. All counts start at the adaptor's first allocation (1-based).
struct fault_injection_plan {
  std::uint64_t fail_every_nth{0};      ///< 0: off; n: allocations n, 2n, 3n, ... fail
  std::uint64_t fail_from{0};           ///< 0: off; n: allocation n and every later one fail
  std::uint64_t fail_nth{0};            ///< 0: off; n: allocation n fails (only it)
  double probability{0.0};              ///< each allocation fails with this probability...
  std::uint64_t seed{1};                ///< ...drawn from splitmix64 seeded here
  std::size_t fail_above_bytes{std::numeric_limits<std::size_t>::max()};  ///< larger requests fail
};

/// @brief Fails the allocations a `fault_injection_plan` names with `mgm::out_of_memory`, before
/// the upstream is called; the same plan over the same calls fails the same ones. Works over any
/// allocator (the simulator has its own per-device faults too). Copies share the plan's state.
/// @tparam Upstream an `mgm::allocator`. **Thread safety:** safe. **Device affinity:** the upstream's.
template <allocator Upstream>
class fault_injection_adaptor : public detail::adaptor_base<fault_injection_adaptor<Upstream>, Upstream> {
  using base = detail::adaptor_base<fault_injection_adaptor<Upstream>, Upstream>;
  friend base;

 public:
  fault_injection_adaptor(Upstream upstream, fault_injection_plan plan)
      : base{std::move(upstream)}, state_{std::make_shared<state>(plan)} {}

  [[nodiscard]] std::uint64_t injected() const {
    const std::lock_guard lock{state_->mutex};
    return state_->injected;
  }
  [[nodiscard]] std::uint64_t allocations_seen() const {
    const std::lock_guard lock{state_->mutex};
    return state_->calls;
  }

  friend bool operator==(const fault_injection_adaptor& a, const fault_injection_adaptor& b) noexcept {
    return a.state_ == b.state_ && a.upstream_ == b.upstream_;
  }

 private:
  struct state {
    explicit state(fault_injection_plan p) : plan{p}, rng{p.seed} {}
    std::mutex mutex;
    fault_injection_plan plan;
    std::uint64_t rng;
    std::uint64_t calls{0};
    std::uint64_t injected{0};
  };

  template <class Call>
  void* on_allocate(std::size_t bytes, std::size_t, stream_ref, Call&& call) {
    std::uint64_t n = 0;
    bool fail = false;
    {
      const std::lock_guard lock{state_->mutex};
      n = ++state_->calls;
      const auto& plan = state_->plan;
      fail = (plan.fail_every_nth != 0 && n % plan.fail_every_nth == 0) || (plan.fail_from != 0 && n >= plan.fail_from) ||
             n == plan.fail_nth ||
             bytes > plan.fail_above_bytes;
      if (plan.probability > 0.0) {
        std::uint64_t z = (state_->rng += 0x9E3779B97F4A7C15ULL);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        z ^= z >> 31;
        fail = fail || static_cast<double>(z >> 11) * 0x1.0p-53 < plan.probability;
      }
      if (fail) ++state_->injected;
    }
    if (fail) {
      throw out_of_memory{"fault_injection_adaptor: injected failure of allocation #" + std::to_string(n) + " (" +
                              detail::describe_bytes(bytes) + ")",
                          bytes};
    }
    return call();
  }
  template <class Call>
  void on_deallocate(void*, std::size_t, std::size_t, stream_ref, Call&& call) noexcept {
    call();
  }

  std::shared_ptr<state> state_;
};

}  // namespace mgm
