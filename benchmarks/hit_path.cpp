// The pool's cache-hit path in isolation, for instruction counts under callgrind:
//   mgm_hit_path stats|nostats PAIRS
// and the 2^31-free run of the epoch finding (issue 14, finding 1), for scripts/bench:
//   mgm_hit_path epoch-wrap
// runs PAIRS alloc + free pairs of 4 KiB on a warm pool. Two runs with different PAIRS, divided
// by their difference, give instructions per pair without the setup (scripts/measure-hit-path).
#include <mgm/pool/caching_pool.hpp>
#include <mgm/sim/judged.hpp>
#include <mgm/sim/machine.hpp>

#include <chrono>
#include <cstdint>

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
// After 2^31 + 2 frees on stream S since T last took one of S's blocks, S frees a block with its
// work pending and T takes it: T must be made to wait (an event 2^31 frees old is not trusted).
int epoch_wrap() {
  using namespace std::chrono_literals;
  mgm::sim::machine m{mgm::sim::parse_device_list("1GiB"), {mgm::sim::oracle_mode::record}};
  mgm::pool_options o;
  o.expandable_segments = false;
  mgm::caching_pool<mgm::sim::device_allocator, false> raw{m.allocator(mgm::device_id{0}), o};
  mgm::sim::judged pool{m, raw};
  const auto s = m.create_stream(mgm::device_id{0});
  const auto t = m.create_stream(mgm::device_id{0});
  pool.deallocate_async(pool.allocate_async(1024, 256, s), 1024, 256, s);
  void* keep = pool.allocate_async(1024, 256, t);  // taken from S: an event recorded and complete
  const auto start = std::chrono::steady_clock::now();
  const std::uint64_t frees = (std::uint64_t{1} << 31) + 2;
  for (std::uint64_t i = 0; i < frees; ++i) {  // unjudged: the judge would only slow them
    raw.deallocate_async(raw.allocate_async(4096, 256, s), 4096, 256, s);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  void* x = pool.allocate_async(1024, 256, s);
  m.enqueue(s, 1ms);
  pool.deallocate_async(x, 1024, 256, s);
  void* y = pool.allocate_async(1024, 256, t);
  pool.deallocate_async(y, 1024, 256, t);
  pool.deallocate_async(keep, 1024, 256, t);
  m.synchronize(mgm::device_id{0});
  const bool waited = y == x && m.now(mgm::device_id{0}) == 1ms;
  const bool clean = m.hazards().empty();
  std::printf("epoch-wrap: %llu frees on one stream in %.1f s; then another stream took its block %s; judge: %s\n",
              static_cast<unsigned long long>(frees), seconds, waited ? "and was made to wait" : "WITHOUT WAITING",
              clean ? "no hazard" : "HAZARD");
  return waited && clean ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "epoch-wrap") == 0) return epoch_wrap();
  if (argc != 3 || (std::strcmp(argv[1], "stats") != 0 && std::strcmp(argv[1], "nostats") != 0)) {
    std::fprintf(stderr, "usage: mgm_hit_path stats|nostats PAIRS | mgm_hit_path epoch-wrap\n");
    return 1;
  }
  const long pairs = std::strtol(argv[2], nullptr, 10);
  return std::strcmp(argv[1], "stats") == 0 ? run<true>(pairs) : run<false>(pairs);
}
