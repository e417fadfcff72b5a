// A counting global operator new for the pool's failure tests (counting_new.cpp replaces it):
// allocations made while `armed` are counted, and the one numbered `fail_allocation` throws
// std::bad_alloc. Armed only around the pool's calls, so that Catch and the test are never hit.
#pragma once

#include <atomic>
#include <cstdint>

namespace mgm_test {

extern std::atomic<bool> armed;
extern std::atomic<std::uint64_t> armed_allocations;
extern std::atomic<std::uint64_t> fail_allocation;  // 0: none

struct arm_guard {
  arm_guard() { armed.store(true, std::memory_order_relaxed); }
  ~arm_guard() { armed.store(false, std::memory_order_relaxed); }
  arm_guard(const arm_guard&) = delete;
  arm_guard& operator=(const arm_guard&) = delete;
};

}  // namespace mgm_test
