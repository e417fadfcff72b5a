// Helper programs and libraries the tests load or run (the fake NVML, the publisher's child):
// where the build put them, or, when MGM_TEST_BIN_DIR is set (scripts/gpu-check carries the test
// binaries to another machine), that folder.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace mgm_test {

inline std::string artifact(const char* built_path) {
  const char* dir = std::getenv("MGM_TEST_BIN_DIR");
  if (dir == nullptr || *dir == '\0') return built_path;
  return (std::filesystem::path{dir} / std::filesystem::path{built_path}.filename()).string();
}

}  // namespace mgm_test
