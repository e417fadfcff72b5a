// Numbers as the tool prints them.
#pragma once

#include <cstdio>
#include <string>

namespace mgm_tool {

/// @brief `v` with `digits` decimals, as printf's `%.*f` writes it.
inline std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace mgm_tool
