// The replaced global operator new of the pool's failure tests (see counting_new.hpp).
#include "counting_new.hpp"

#include <cstdlib>
#include <new>

namespace mgm_test {
std::atomic<bool> armed{false};
std::atomic<std::uint64_t> armed_allocations{0};
std::atomic<std::uint64_t> fail_allocation{0};
}  // namespace mgm_test

namespace {
void* counted_new(std::size_t n) {
  if (mgm_test::armed.load(std::memory_order_relaxed)) {
    const std::uint64_t k = mgm_test::armed_allocations.fetch_add(1, std::memory_order_relaxed) + 1;
    if (k == mgm_test::fail_allocation.load(std::memory_order_relaxed)) throw std::bad_alloc{};
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc{};
}
}  // namespace

void* operator new(std::size_t n) { return counted_new(n); }
void* operator new[](std::size_t n) { return counted_new(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_new(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_new(n);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
