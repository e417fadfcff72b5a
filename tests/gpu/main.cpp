// The GPU tests' runner. Without a device it exits 77 (CTest's SKIP_RETURN_CODE) - but only when
// it is about to run tests: while CTest lists them it must list them, or they would vanish.
#define CATCH_CONFIG_RUNNER
#include <mgm/device.hpp>

#include <catch2/catch.hpp>

#include <cstdio>
#include <string_view>

int main(int argc, char* argv[]) {
  bool listing = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg{argv[i]};
    listing = listing || arg.starts_with("--list") || arg == "-l" || arg == "-h" || arg == "--help" || arg == "-?";
  }
  if (!listing) {
    int devices = 0;
    try {
      devices = mgm::device_count();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mgm_gpu_tests: cannot count devices: %s\n", e.what());
      return 1;
    }
    if (devices == 0) {
      std::fprintf(stderr, "mgm_gpu_tests: no CUDA device or driver here; skipping\n");
      return 77;
    }
  }
  const int failed = Catch::Session().run(argc, argv);
  return failed == 0 ? 0 : 1;
}
