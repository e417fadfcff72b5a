/// @file
/// @brief `tracking_adaptor`: every live allocation with its size, stream and tag; reports by tag;
/// checkpoints and their differences.
#pragma once

#include <mgm/adaptors/detail/adaptor_base.hpp>
#include <mgm/log.hpp>
#include <mgm/tag.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace mgm {

/// @brief One live allocation as a `tracking_adaptor` saw it.
struct allocation_record {
  std::uintptr_t address{0};
  std::size_t bytes{0};
  std::uintptr_t stream{0};
  std::string tag;             ///< `tag_scope` at allocation; empty when none
  std::uint64_t sequence{0};   ///< the adaptor's count of allocations when this one was made (1-based)
};

/// @brief Live memory of one tag.
struct tag_usage {
  std::string tag;
  std::size_t allocations{0};
  std::size_t bytes{0};
};

/// @brief What was live at one moment.
struct tracking_checkpoint {
  std::uint64_t sequence{0};               ///< allocations made before it
  std::vector<allocation_record> live;     ///< by sequence
};

/// @brief What changed between two checkpoints, grouped by tag.
struct tracking_diff {
  struct tag_change {
    std::string tag;
    std::int64_t allocations{0};
    std::int64_t bytes{0};
  };
  std::vector<tag_change> by_tag;                ///< tags whose live memory changed, largest growth first
  std::vector<allocation_record> appeared;       ///< live at the later one, made after the earlier one
  std::vector<allocation_record> disappeared;    ///< live at the earlier one, freed by the later one
  std::int64_t bytes{0};                         ///< total growth
  /// @brief "+12.00 MiB in 3 allocations: layer3.fc +8.00 MiB (2), ..." for people.
  [[nodiscard]] std::string to_string() const;
};

namespace detail {
[[nodiscard]] std::vector<tag_usage> usage_by_tag(const std::vector<allocation_record>& live);
[[nodiscard]] tracking_diff diff_checkpoints(const tracking_checkpoint& before, const tracking_checkpoint& after);
[[nodiscard]] std::string usage_report(const std::vector<tag_usage>& usage);
}  // namespace detail

/// @brief Records every live allocation that passes through to `Upstream`: size, stream and the
/// allocating thread's `tag_scope`. `report()` groups live memory by tag; `checkpoint()` and
/// `diff()` answer "what grew between the baseline and now" in one call. A free of a pointer it
/// did not see is passed on and reported through `mgm::log`. Copies share the records.
/// @tparam Upstream an `mgm::allocator`.
/// **Thread safety:** safe (one mutex). **Device affinity:** the upstream's.
template <allocator Upstream>
class tracking_adaptor : public detail::adaptor_base<tracking_adaptor<Upstream>, Upstream> {
  using base = detail::adaptor_base<tracking_adaptor<Upstream>, Upstream>;
  friend base;

 public:
  explicit tracking_adaptor(Upstream upstream) : base{std::move(upstream)} {}

  /// @brief Every live allocation, oldest first.
  [[nodiscard]] std::vector<allocation_record> live() const {
    const std::lock_guard lock{state_->mutex};
    std::vector<allocation_record> out;
    out.reserve(state_->live.size());
    for (const auto& [seq, rec] : state_->by_sequence) out.push_back(rec);
    return out;
  }
  /// @brief Live memory by tag, most bytes first.
  [[nodiscard]] std::vector<tag_usage> report() const { return detail::usage_by_tag(live()); }
  [[nodiscard]] std::string report_text() const { return detail::usage_report(report()); }
  [[nodiscard]] std::size_t live_bytes() const {
    const std::lock_guard lock{state_->mutex};
    return state_->live_bytes;
  }
  [[nodiscard]] tracking_checkpoint checkpoint() const {
    tracking_checkpoint c;
    const std::lock_guard lock{state_->mutex};
    c.sequence = state_->sequence;
    for (const auto& [seq, rec] : state_->by_sequence) c.live.push_back(rec);
    return c;
  }
  [[nodiscard]] static tracking_diff diff(const tracking_checkpoint& before, const tracking_checkpoint& after) {
    return detail::diff_checkpoints(before, after);
  }
  /// @brief `diff(baseline, checkpoint())`.
  [[nodiscard]] tracking_diff growth_since(const tracking_checkpoint& baseline) const { return diff(baseline, checkpoint()); }

  friend bool operator==(const tracking_adaptor& a, const tracking_adaptor& b) noexcept {
    return a.state_ == b.state_ && a.upstream_ == b.upstream_;
  }

 private:
  struct state {
    std::mutex mutex;
    std::unordered_map<std::uintptr_t, std::uint64_t> live;  // address -> sequence
    std::map<std::uint64_t, allocation_record> by_sequence;
    std::uint64_t sequence{0};
    std::size_t live_bytes{0};
  };

  template <class Call>
  void* on_allocate(std::size_t bytes, std::size_t, stream_ref s, Call&& call) {
    void* p = call();
    if (p == nullptr) return p;
    const char* tag = tag_scope::current();
    try {
      const std::lock_guard lock{state_->mutex};
      const std::uint64_t seq = ++state_->sequence;
      const auto addr = reinterpret_cast<std::uintptr_t>(p);
      state_->by_sequence.emplace(seq, allocation_record{addr, bytes, s.id(), tag != nullptr ? tag : "", seq});
      state_->live[addr] = seq;
      state_->live_bytes += bytes;
    } catch (...) {
      this->upstream_.deallocate(p, bytes, cuda_allocation_alignment);  // no record, no memory
      throw;
    }
    return p;
  }
  template <class Call>
  void on_deallocate(void* p, std::size_t bytes, std::size_t, stream_ref, Call&& call) noexcept {
    if (p != nullptr) {
      bool known = true;
      {
        const std::lock_guard lock{state_->mutex};
        const auto it = state_->live.find(reinterpret_cast<std::uintptr_t>(p));
        if (it == state_->live.end()) {
          known = false;
        } else {
          const auto rec = state_->by_sequence.find(it->second);
          state_->live_bytes -= rec->second.bytes;
          state_->by_sequence.erase(rec);
          state_->live.erase(it);
        }
      }
      if (!known) {
        log(log_level::warning, "tracking_adaptor: deallocate of " + std::to_string(bytes) +
                                    " bytes at a pointer it never tracked; passed on to the upstream");
      }
    }
    call();
  }

  std::shared_ptr<state> state_ = std::make_shared<state>();
};

}  // namespace mgm
