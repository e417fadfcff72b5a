/// @file
/// @brief `unique_fd`: a POSIX file descriptor with one owner.
#pragma once

#include <utility>

namespace mgm {

/// @brief A POSIX file descriptor, closed when its owner goes. Move-only.
class unique_fd {
 public:
  unique_fd() noexcept = default;
  explicit unique_fd(int fd) noexcept : fd_{fd} {}
  unique_fd(unique_fd&& o) noexcept : fd_{std::exchange(o.fd_, -1)} {}
  unique_fd& operator=(unique_fd&& o) noexcept {
    if (this != &o) reset(std::exchange(o.fd_, -1));
    return *this;
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() { reset(); }

  [[nodiscard]] int get() const noexcept { return fd_; }
  [[nodiscard]] explicit operator bool() const noexcept { return fd_ >= 0; }
  int release() noexcept { return std::exchange(fd_, -1); }
  /// @brief Closes the descriptor held (if any) and holds `fd`.
  void reset(int fd = -1) noexcept;

 private:
  int fd_{-1};
};

}  // namespace mgm
