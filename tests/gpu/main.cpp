// The GPU tests skip without a device: exit 77 (CTest's SKIP_RETURN_CODE). The check runs when
// Catch starts a test run, not when CTest lists the tests (a listing that exited would make them
// vanish), so Catch's own main (Catch2WithMain, compiled once by Debian) serves as the runner.
// Catch declares its listener interface only on request.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <mgm/device.hpp>

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>

namespace {

struct skip_without_a_device : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;

  void testRunStarting(const Catch::TestRunInfo& info) override {
    TestEventListenerBase::testRunStarting(info);
    int devices = 0;
    try {
      devices = mgm::device_count();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mgm_gpu_tests: cannot count devices: %s\n", e.what());
      std::exit(1);
    }
    if (devices == 0) {
      std::fprintf(stderr, "mgm_gpu_tests: no CUDA device or driver here; skipping\n");
      std::exit(77);
    }
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(skip_without_a_device)
