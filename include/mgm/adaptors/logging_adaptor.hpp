/// @file
/// @brief `logging_adaptor`: every call as a line of RMM's CSV log.
#pragma once

#include <mgm/adaptors/detail/adaptor_base.hpp>
#include <mgm/error.hpp>

#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>

namespace mgm {

namespace detail {
/// One row of RMM's logging_resource_adaptor CSV: `Thread,Time,Action,Pointer,Size,Stream` with
/// the OS thread id, local time `HH:MM:SS.ffffff`, `0x`-prefixed hex pointer and stream.
[[nodiscard]] std::string rmm_log_row(const char* action, const void* p, std::size_t bytes, std::uintptr_t stream);
inline constexpr const char* rmm_log_header = "Thread,Time,Action,Pointer,Size,Stream";
}  // namespace detail

/// @brief Writes every allocation and free (and failed allocation) as one line of RMM's CSV log,
/// `Thread,Time,Action,Pointer,Size,Stream`, so RMM's replay tools and `mgm replay` read it.
/// Actions: `allocate`, `free`, `allocate failure`. Copies share the sink.
/// @tparam Upstream an `mgm::allocator`.
/// **Thread safety:** safe (lines never interleave). **Device affinity:** the upstream's.
template <allocator Upstream>
class logging_adaptor : public detail::adaptor_base<logging_adaptor<Upstream>, Upstream> {
  using base = detail::adaptor_base<logging_adaptor<Upstream>, Upstream>;
  friend base;

 public:
  /// @brief Logs to `out`, which must outlive the adaptor and its copies.
  logging_adaptor(Upstream upstream, std::ostream& out) : base{std::move(upstream)}, state_{std::make_shared<state>()} {
    state_->out = &out;
    write_header();
  }
  /// @brief Logs to a new file at `path`. @throws mgm::logic_error when it cannot be opened.
  logging_adaptor(Upstream upstream, const std::string& path) : base{std::move(upstream)}, state_{std::make_shared<state>()} {
    state_->file = std::make_unique<std::ofstream>(path);
    MGM_EXPECTS(state_->file->good(), "logging_adaptor: cannot open '" + path + "' for writing");
    state_->out = state_->file.get();
    write_header();
  }

  void flush() {
    const std::lock_guard lock{state_->mutex};
    state_->out->flush();
  }

  friend bool operator==(const logging_adaptor& a, const logging_adaptor& b) noexcept {
    return a.state_ == b.state_ && a.upstream_ == b.upstream_;
  }

 private:
  struct state {
    std::mutex mutex;
    std::unique_ptr<std::ofstream> file;
    std::ostream* out{nullptr};
  };

  void write_header() {
    const std::lock_guard lock{state_->mutex};
    *state_->out << detail::rmm_log_header << '\n';
  }
  void write(const std::string& row) noexcept {
    try {
      const std::lock_guard lock{state_->mutex};
      *state_->out << row << '\n';
    } catch (...) {  // a log that cannot be written must not break the allocation
    }
  }

  template <class Call>
  void* on_allocate(std::size_t bytes, std::size_t, stream_ref s, Call&& call) {
    void* p = nullptr;
    try {
      p = call();
    } catch (...) {
      write(detail::rmm_log_row("allocate failure", nullptr, bytes, s.id()));
      throw;
    }
    write(detail::rmm_log_row("allocate", p, bytes, s.id()));
    return p;
  }
  template <class Call>
  void on_deallocate(void* p, std::size_t bytes, std::size_t, stream_ref s, Call&& call) noexcept {
    call();
    try {
      write(detail::rmm_log_row("free", p, bytes, s.id()));
    } catch (...) {
    }
  }

  std::shared_ptr<state> state_;
};

}  // namespace mgm
