/// @file
/// @brief The caching pool's lock: one atomic exchange to take it, a plain store to give it back.
///
/// Measured on this project's replays (`perf record` of `mgm replay` of ResNet-50, 2,000
/// iterations), `std::mutex` took 44 % of the pool's host time: its lock and its unlock are each
/// an atomic read-modify-write, the costliest instructions of a cache hit. This lock keeps the
/// first and replaces the second by a release store, so a hit pays one atomic per call.
///
/// ## Contract
/// - Mutual exclusion: `lock()` is an acquire exchange of the lock word from 0 to 1; `unlock()`
///   a release store of 0. What one holder wrote, the next holder sees.
/// - Progress: a waiter spins briefly, then sleeps on the lock word (Linux futex) and is woken by
///   the unlock that sees it registered. An unlock's store and its look at the sleeper count may
///   pass each other (x86 lets a load overtake an earlier store; a fence would cost the atomic it
///   saves), so a sleeper can miss its wake-up: it sleeps at most `sleep_slice` and then tries
///   again. No waiter waits forever; under contention one may wait a slice longer than needed.
/// - Not recursive, not fair (as `std::mutex` in practice). Satisfies *Lockable*.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace mgm::detail {

class pool_mutex {
 public:
  /// The longest a waiter sleeps before it looks at the lock word again (see "Progress").
  static constexpr std::chrono::microseconds sleep_slice{200};

  pool_mutex() = default;
  pool_mutex(const pool_mutex&) = delete;
  pool_mutex& operator=(const pool_mutex&) = delete;

  void lock() noexcept {
    if (word_.exchange(1, std::memory_order_acquire) == 0) [[likely]] return;
    lock_contended();
  }
  [[nodiscard]] bool try_lock() noexcept {
    return word_.load(std::memory_order_relaxed) == 0 && word_.exchange(1, std::memory_order_acquire) == 0;
  }
  void unlock() noexcept {
    word_.store(0, std::memory_order_release);
    if (sleepers_.load(std::memory_order_relaxed) != 0) [[unlikely]] wake_one();
  }

 private:
  void lock_contended() noexcept;  // src/pool/pool_mutex.cpp
  void wake_one() noexcept;

  std::atomic<std::uint32_t> word_{0};      ///< 0: free; 1: held
  std::atomic<std::uint32_t> sleepers_{0};  ///< waiters asleep on `word_`, or about to be
};
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

}  // namespace mgm::detail
