#include <mgm/unique_fd.hpp>

#include <unistd.h>

namespace mgm {

void unique_fd::reset(int fd) noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

}  // namespace mgm
