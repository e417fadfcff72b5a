/// @file
/// @brief Argument checks shared by the leaf allocators.
#pragma once

#include <mgm/concepts.hpp>
#include <mgm/error.hpp>

#include <cstddef>

namespace mgm::detail {

[[noreturn]] void throw_bad_alignment(std::size_t alignment, std::size_t max_alignment, const char* who);

/// @brief Throws `mgm::logic_error` unless `alignment` is a power of two no larger than
/// `max_alignment`. One compare on the good path.
inline void check_alignment(std::size_t alignment, std::size_t max_alignment, const char* who) {
  if (!is_power_of_two(alignment) || alignment > max_alignment) [[unlikely]] {
    throw_bad_alignment(alignment, max_alignment, who);
  }
}

/// @brief `bytes` rounded up to a multiple of `alignment` (a power of two); false on overflow.
[[nodiscard]] constexpr bool round_up(std::size_t bytes, std::size_t alignment, std::size_t& out) noexcept {
  const std::size_t mask = alignment - 1;
  if (bytes > static_cast<std::size_t>(-1) - mask) return false;
  out = (bytes + mask) & ~mask;
  return true;
}

}  // namespace mgm::detail
