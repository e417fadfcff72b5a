// The second process of the publisher test: pools on a simulated 2-GPU machine, published with
// MGM_PUBLISH=1 (set by the test) into MGM_PUBLISH_DIR. Prints "ready <pid>", then waits for a
// line on stdin ("exit": leave normally, removing the file) or until it is killed. With
// MGM_TEST_HOLD_LOCK=PATH it also holds a write lock on PATH, as a publisher of another pid
// namespace holds its own (the test lays out such a publisher's files).
#include <mgm/pool/caching_pool.hpp>
#include <mgm/sim/machine.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

int main() {
  auto machine = mgm::sim::machine::from_string("2x4GiB");
  mgm::caching_pool<mgm::sim::device_allocator> pool0{machine.allocator(mgm::device_id{0})};
  mgm::caching_pool<mgm::sim::device_allocator> pool1{machine.allocator(mgm::device_id{1})};
  void* a = pool0.allocate(100 << 20);
  void* b = pool1.allocate(300 << 20);
  if (const char* path = std::getenv("MGM_TEST_HOLD_LOCK")) {
    const int fd = ::open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    struct flock l {};
    l.l_type = F_WRLCK;
    l.l_whence = SEEK_SET;
    if (fd < 0 || ::fcntl(fd, F_SETLK, &l) != 0) return 3;
  }
  usleep(250'000);  // at least one period of the publisher, so the file shows the allocations
  std::cout << "ready " << getpid() << std::endl;
  std::string line;
  std::getline(std::cin, line);
  pool0.deallocate(a, 100 << 20);
  pool1.deallocate(b, 300 << 20);
  return 0;
}
