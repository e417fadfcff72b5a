// fmt for the library's own formatting, compiled once (src/fmt.cpp) instead of in every file that
// formats (FMT_HEADER_ONLY compiles fmt's implementation into each: about 1.5 s a file), and kept
// in an inline namespace of its own, fmt::v9_mgm, so that a program that links its own fmt, of
// any version, never meets a second definition of a symbol of it. Include this, not <fmt/...>.
#pragma once

#define FMT_BEGIN_NAMESPACE \
  namespace fmt {           \
  inline namespace v9_mgm {
#define FMT_END_NAMESPACE \
  }                       \
  }
#include <fmt/format.h>
