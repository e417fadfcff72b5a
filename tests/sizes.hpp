// Binary byte sizes for the tests, written once: `64 * MiB`.
#pragma once

#include <cstddef>

inline constexpr std::size_t KiB = std::size_t{1} << 10;
inline constexpr std::size_t MiB = std::size_t{1} << 20;
inline constexpr std::size_t GiB = std::size_t{1} << 30;
