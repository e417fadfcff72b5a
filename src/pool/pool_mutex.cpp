#include <mgm/pool/detail/pool_mutex.hpp>

#include <thread>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace mgm::detail {
namespace {

constexpr int spins = 100;  // a hit holds the lock for well under a microsecond

void relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));

#if defined(__linux__)
std::uint32_t* futex_word(std::atomic<std::uint32_t>& a) noexcept { return reinterpret_cast<std::uint32_t*>(&a); }
#endif

}  // namespace

void pool_mutex::lock_contended() noexcept {
  for (int i = 0; i < spins; ++i) {
    relax();
    if (word_.load(std::memory_order_relaxed) == 0 && word_.exchange(1, std::memory_order_acquire) == 0) return;
  }
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  while (word_.exchange(1, std::memory_order_acquire) != 0) {
#if defined(__linux__)
    constexpr auto slice_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(sleep_slice).count();
    const timespec slice{0, static_cast<long>(slice_ns)};
    // Sleeps only while the word still reads 1 (held); returns at a wake-up, a signal or the slice's end.
    (void)syscall(SYS_futex, futex_word(word_), FUTEX_WAIT_PRIVATE, 1U, &slice, nullptr, 0);
#else
    std::this_thread::yield();
#endif
  }
  sleepers_.fetch_sub(1, std::memory_order_relaxed);
}

void pool_mutex::wake_one() noexcept {
#if defined(__linux__)
  (void)syscall(SYS_futex, futex_word(word_), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
#endif
}

}  // namespace mgm::detail
