// The pool's cache-hit path in isolation, for instruction counts under callgrind:
//   mgm_hit_path stats|nostats PAIRS
// runs PAIRS alloc + free pairs of 4 KiB on a warm pool. Two runs with different PAIRS, divided
// by their difference, give instructions per pair without the setup (scripts/measure-hit-path).
#include <mgm/pool/caching_pool.hpp>
#include <mgm/sim/machine.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {
template <bool Statistics>
int run(long pairs) {
  mgm::sim::machine m{mgm::sim::parse_device_list("1GiB")};
  mgm::caching_pool<mgm::sim::device_allocator, Statistics> pool{m.allocator(mgm::device_id{0}), mgm::pool_options{}};
  pool.deallocate(pool.allocate(4096), 4096);
  for (long i = 0; i < pairs; ++i) {
    void* p = pool.allocate(4096);
    asm volatile("" : : "r"(p) : "memory");
    pool.deallocate(p, 4096);
  }
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[1], "stats") != 0 && std::strcmp(argv[1], "nostats") != 0)) {
    std::fprintf(stderr, "usage: mgm_hit_path stats|nostats PAIRS\n");
    return 1;
  }
  const long pairs = std::strtol(argv[2], nullptr, 10);
  return std::strcmp(argv[1], "stats") == 0 ? run<true>(pairs) : run<false>(pairs);
}
