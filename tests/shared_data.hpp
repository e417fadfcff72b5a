// The real files of ../shared/data for tests labelled realdata: CTest passes the folder in
// MGM_SHARED_DATA, and a test whose files are absent skips (CTest's SKIP_REGULAR_EXPRESSION
// matches the MGM_SKIP line), so a plain clone still passes.
#pragma once

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace mgm_test {

/// @brief `$MGM_SHARED_DATA/sub`, or an empty path after printing `MGM_SKIP` when it is absent:
/// `const auto dir = shared_data("topologies"); if (dir.empty()) return;`
inline std::filesystem::path shared_data(const std::string& sub) {
  const char* env = std::getenv("MGM_SHARED_DATA");
  const auto path = env != nullptr ? std::filesystem::path{env} / sub : std::filesystem::path{};
  if (path.empty() || !std::filesystem::exists(path)) {
    WARN("MGM_SKIP: ../shared/data/" + sub + " is absent");
    return {};
  }
  return path;
}

/// @brief The bytes of the file at `p` (empty when it cannot be read).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in{p, std::ios::binary};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace mgm_test
