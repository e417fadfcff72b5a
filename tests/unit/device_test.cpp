#include <mgm/device.hpp>
#include <mgm/error.hpp>

#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <unordered_set>

TEST_CASE("device_count never throws for a missing driver and leaves no CUDA error behind", "[device]") {
  const int n = mgm::device_count();
  // The runtime's own count, or 0 where it fails (no driver, no device).
  int runtime = 0;
  if (cudaGetDeviceCount(&runtime) != cudaSuccess) runtime = 0;
  REQUIRE(n == runtime);
  // Without a driver the runtime's failed initialisation is permanent (every cudaGetLastError
  // returns 35): there is nothing to clear then. With a GPU, no error is left behind.
  if (n > 0) REQUIRE(cudaGetLastError() == cudaSuccess);
  REQUIRE(mgm::device_count() == n);  // stable
}

TEST_CASE("device_id is a strong value type", "[device]") {
  STATIC_REQUIRE(!std::is_convertible_v<int, mgm::device_id>);
  STATIC_REQUIRE(!std::is_default_constructible_v<mgm::device_id>);
  const mgm::device_id a{2};
  REQUIRE(a.value() == 2);
  REQUIRE(a.index() == 2);
  REQUIRE(a < mgm::device_id{3});
  REQUIRE(mgm::device_id::host().is_host());
  REQUIRE_FALSE(a.is_host());
  std::unordered_set<mgm::device_id> set{a, mgm::device_id{2}, mgm::device_id{0}};
  REQUIRE(set.size() == 2);
}

TEST_CASE("scoped_device rejects the host", "[device]") {
  REQUIRE_THROWS_AS(mgm::scoped_device{mgm::device_id::host()}, mgm::logic_error);
}

TEST_CASE("MGM_CUDA_TRY maps CUDA errors and clears the sticky state", "[error]") {
  try {
    MGM_CUDA_TRY(cudaErrorInvalidValue);
    FAIL("no exception");
  } catch (const mgm::cuda_error& e) {
    REQUIRE(e.code() == cudaErrorInvalidValue);
    REQUIRE(std::string{e.what()}.find("cudaErrorInvalidValue") != std::string::npos);
    REQUIRE(std::string{e.what()}.find("device_test.cpp") != std::string::npos);
  }
  if (mgm::device_count() > 0) REQUIRE(cudaGetLastError() == cudaSuccess);
  REQUIRE_THROWS_AS([] { MGM_CUDA_TRY_ALLOC(cudaErrorMemoryAllocation, 1234); }(), mgm::out_of_memory);
  REQUIRE_THROWS_AS([] { MGM_CUDA_TRY_ALLOC(cudaErrorInvalidValue, 1234); }(), mgm::cuda_error);
  try {
    MGM_CUDA_TRY_ALLOC(cudaErrorMemoryAllocation, 3u << 20);
    FAIL("no exception");
  } catch (const mgm::out_of_memory& e) {
    REQUIRE(e.requested_bytes() == (3u << 20));
    REQUIRE(std::string{e.what()}.find("3.00 MiB (3145728 bytes)") != std::string::npos);
  }
  REQUIRE_THROWS_AS([] { MGM_EXPECTS(1 + 1 == 3, "arithmetic"); }(), mgm::logic_error);
  // The hierarchy as STYLE.md fixes it.
  STATIC_REQUIRE(std::is_base_of_v<std::bad_alloc, mgm::out_of_memory>);
  STATIC_REQUIRE(std::is_base_of_v<mgm::bad_alloc, mgm::out_of_memory>);
  STATIC_REQUIRE(std::is_base_of_v<mgm::logic_error, mgm::parse_error>);
}
