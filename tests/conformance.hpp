// One conformance suite, written once and instantiated for every allocator (host, sim, and the
// CUDA ones in the GPU executable), as RMM's mr_ref tests are. A fixture supplies:
//   using allocator_type;            allocator_type make();
//   void touch(void* p, size_t n);   writes a pattern over [p, p+n) and reads it back (REQUIREs)
//   static constexpr bool exact_oom; SIZE_MAX must give mgm::out_of_memory (not just bad_alloc)
//   static constexpr bool stream_ordered; whether the allocator must model mgm::stream_allocator
//   mgm::stream_ref stream();        for stream allocators
#pragma once

#include <mgm/concepts.hpp>
#include <mgm/error.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace mgm::test {

inline bool aligned(const void* p, std::size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

template <class F>
void conformance_sizes() {
  F f;
  auto a = f.make();
  const std::vector<std::size_t> sizes{1, 255, 256, 257, 4096, 65'537, std::size_t{1} << 20, (std::size_t{3} << 20) + 7};
  std::vector<std::pair<std::uintptr_t, std::size_t>> live;
  for (const auto bytes : sizes) {
    void* p = a.allocate(bytes, 256);
    REQUIRE(p != nullptr);
    REQUIRE(aligned(p, 256));
    f.touch(p, bytes);
    live.emplace_back(reinterpret_cast<std::uintptr_t>(p), bytes);
  }
  std::sort(live.begin(), live.end());
  for (std::size_t i = 1; i < live.size(); ++i) {
    INFO("block " << i - 1 << " overlaps block " << i);
    REQUIRE(live[i - 1].first + live[i - 1].second <= live[i].first);
  }
  for (const auto& [p, bytes] : live) a.deallocate(reinterpret_cast<void*>(p), bytes, 256);
}

template <class F>
void conformance_alignments() {
  F f;
  auto a = f.make();
  for (std::size_t alignment = 1; alignment <= 256; alignment *= 2) {
    void* p = a.allocate(100, alignment);
    REQUIRE(p != nullptr);
    REQUIRE(aligned(p, alignment));
    a.deallocate(p, 100, alignment);
  }
}

template <class F>
void conformance_bad_input() {
  F f;
  auto a = f.make();
  REQUIRE_THROWS_AS(a.allocate(64, 3), mgm::logic_error);
  REQUIRE_THROWS_AS(a.allocate(64, 0), mgm::logic_error);
  REQUIRE_THROWS_AS(a.allocate(64, 48), mgm::logic_error);
  if constexpr (F::exact_oom) {
    REQUIRE_THROWS_AS(a.allocate(std::numeric_limits<std::size_t>::max(), 256), mgm::out_of_memory);
  } else {
    REQUIRE_THROWS(a.allocate(std::numeric_limits<std::size_t>::max(), 256));
  }
  a.deallocate(nullptr, 64, 256);  // a no-op
  // Still usable after every rejection.
  void* p = a.allocate(64, 256);
  REQUIRE(p != nullptr);
  f.touch(p, 64);
  a.deallocate(p, 64, 256);
}

template <class F>
void conformance_equality_and_zero() {
  F f;
  auto a = f.make();
  auto copy = a;
  REQUIRE(a == copy);
  REQUIRE_FALSE(a != copy);
  // allocate(0) may give nullptr; anything else is a pointer of its own, aligned, that goes back.
  void* p = a.allocate(0, 256);
  void* other = a.allocate(256, 256);
  REQUIRE(other != nullptr);
  if (p != nullptr) {
    REQUIRE(aligned(p, 256));
    REQUIRE(p != other);
  }
  a.deallocate(other, 256, 256);
  a.deallocate(p, 0, 256);
  // Memory from one copy is returned through the other.
  void* q = a.allocate(512, 256);
  copy.deallocate(q, 512, 256);
}

template <class F>
void conformance_stream() {
  // The fixture says whether its allocator is stream-ordered; the concept must agree, so that an
  // allocator that loses its stream calls (or a fixture that forgets them) fails here.
  STATIC_REQUIRE(mgm::stream_allocator<typename F::allocator_type> == F::stream_ordered);
  if constexpr (F::stream_ordered) {
    F f;
    auto a = f.make();
    const mgm::stream_ref s = f.stream();
    std::vector<std::pair<std::uintptr_t, std::size_t>> live;
    for (std::size_t bytes : {std::size_t{256}, std::size_t{10'000}, std::size_t{1} << 21}) {
      void* p = a.allocate_async(bytes, 256, s);
      REQUIRE(p != nullptr);
      REQUIRE(aligned(p, 256));
      f.touch(p, bytes);
      live.emplace_back(reinterpret_cast<std::uintptr_t>(p), bytes);
    }
    std::sort(live.begin(), live.end());
    for (std::size_t i = 1; i < live.size(); ++i) {
      INFO("stream-ordered block " << i - 1 << " overlaps block " << i);
      REQUIRE(live[i - 1].first + live[i - 1].second <= live[i].first);
    }
    for (const auto& [p, bytes] : live) a.deallocate_async(reinterpret_cast<void*>(p), bytes, 256, s);
    REQUIRE_THROWS_AS(a.allocate_async(64, 5, s), mgm::logic_error);
    a.deallocate_async(nullptr, 64, 256, s);  // a no-op
  }
}

}  // namespace mgm::test

// Instantiates the suite for a std::tuple of fixtures.
#define MGM_CONFORMANCE_SUITE(prefix, fixtures)                                                                        \
  TEMPLATE_LIST_TEST_CASE(prefix " conformance: sizes, alignment, no overlap", "[conformance]", fixtures) {            \
    mgm::test::conformance_sizes<TestType>();                                                                          \
  }                                                                                                                    \
  TEMPLATE_LIST_TEST_CASE(prefix " conformance: every power-of-two alignment", "[conformance]", fixtures) {            \
    mgm::test::conformance_alignments<TestType>();                                                                     \
  }                                                                                                                    \
  TEMPLATE_LIST_TEST_CASE(prefix " conformance: bad input leaves it usable", "[conformance]", fixtures) {              \
    mgm::test::conformance_bad_input<TestType>();                                                                      \
  }                                                                                                                    \
  TEMPLATE_LIST_TEST_CASE(prefix " conformance: equality, zero bytes", "[conformance]", fixtures) {                    \
    mgm::test::conformance_equality_and_zero<TestType>();                                                              \
  }                                                                                                                    \
  TEMPLATE_LIST_TEST_CASE(prefix " conformance: stream-ordered calls", "[conformance]", fixtures) {                    \
    mgm::test::conformance_stream<TestType>();                                                                         \
  }
