// Live topology discovery and calibration on the GPUs of this machine (label gpu).
#include <mgm/device.hpp>
#include <mgm/allocators/cuda_allocator.hpp>
#include <mgm/allocators/pinned_host_allocator.hpp>
#include <mgm/placement/placed_allocator.hpp>
#include <mgm/platform/cuda_peer_ops.hpp>
#include <mgm/topology/discovery.hpp>

#include <catch2/catch.hpp>

#include "gpu/skip.hpp"

#include <cstdio>
#include <optional>
#include <vector>

TEST_CASE("discovery finds every GPU with its bus id, UUID and memory", "[gpu][topology]") {
  const auto t = mgm::discover_topology();
  REQUIRE(t.gpu_count() == static_cast<std::size_t>(mgm::device_count()));
  for (const auto& g : t.gpus()) {
    REQUIRE_FALSE(g.name.empty());
    REQUIRE(g.pci_bus_id.size() == 16);  // 00000000:07:00.0
    REQUIRE(g.uuid.rfind("GPU-", 0) == 0);
    REQUIRE(g.memory_bytes > 0);
    REQUIRE(g.compute_capability >= 75);
  }
  for (std::size_t a = 0; a < t.gpu_count(); ++a) {
    for (std::size_t b = 0; b < t.gpu_count(); ++b) {
      if (a == b) continue;
      REQUIRE(t.bandwidth(mgm::device_id{static_cast<int>(a)}, mgm::device_id{static_cast<int>(b)}).provenance ==
              mgm::link_provenance::detected);
    }
  }
  // Printed for gpu-check's report.
  std::printf("%s", t.to_smi_matrix(true).c_str());
}

TEST_CASE("calibration measures every peer-capable pair", "[gpu][topology]") {
  auto t = mgm::discover_topology();
  const std::size_t measured = mgm::calibrate(t, std::size_t{64} << 20, 3);
  std::size_t peer_pairs = 0;
  for (std::size_t a = 0; a < t.gpu_count(); ++a) {
    for (std::size_t b = 0; b < t.gpu_count(); ++b) {
      if (a == b) continue;
      const auto bw = t.bandwidth(mgm::device_id{static_cast<int>(a)}, mgm::device_id{static_cast<int>(b)});
      if (bw.provenance == mgm::link_provenance::measured) {
        ++peer_pairs;
        REQUIRE(bw.gbps > 1.0);
      }
    }
  }
  REQUIRE(peer_pairs == measured);
  std::printf("calibrated %zu pairs\n%s", measured, t.to_smi_matrix(true).c_str());
}

TEST_CASE("placed_allocator on the real GPUs: local first, host when the reader is full", "[gpu][placement]") {
  const auto links = mgm::discover_topology();
  std::vector<std::size_t> reserve(links.gpu_count(), 0);
  reserve[0] = links.gpu(mgm::device_id{0}).memory_bytes;  // nothing may go to GPU0 beyond its reserve
  mgm::placed_allocator placed{links, [](mgm::device_id d) { return mgm::cuda_allocator{d}; },
                               [](std::optional<int>) { return mgm::pinned_host_allocator{mgm::device_id{0}}; },
                               mgm::cuda_peer_ops{}, reserve};
  void* p = placed.allocate(mgm::device_id{0}, std::size_t{64} << 20);
  const auto at = placed.location_of(p);
  REQUIRE(at.has_value());
  REQUIRE(at->device != mgm::device_id{0});  // a peer over NVLink, or pinned host memory
  REQUIRE(placed.statistics().spills == 1);
  placed.deallocate(p, std::size_t{64} << 20);
  placed.release_all();
}

TEST_CASE("placed_allocator::migrate on the real GPUs: the bytes arrive, the old memory is freed", "[gpu][placement]") {
  if (mgm::device_count() < 2) {
    mgm_gpu_test::skip("one GPU: nothing to migrate to");
    return;
  }
  const auto links = mgm::discover_topology();
  mgm::placed_allocator placed{links, [](mgm::device_id d) { return mgm::cuda_allocator{d}; },
                               [](std::optional<int>) { return mgm::pinned_host_allocator{mgm::device_id{0}}; },
                               mgm::cuda_peer_ops{}, std::vector<std::size_t>(links.gpu_count(), 0)};
  const std::size_t n = std::size_t{16} << 20;
  std::vector<unsigned char> pattern(n), back(n, 0);
  for (std::size_t i = 0; i < n; ++i) pattern[i] = static_cast<unsigned char>(i * 131 + 7);
  void* p = placed.allocate(mgm::device_id{0}, n);
  REQUIRE(placed.location_of(p)->device == mgm::device_id{0});
  REQUIRE(cudaMemcpy(p, pattern.data(), n, cudaMemcpyHostToDevice) == cudaSuccess);
  void* moved = placed.migrate(p, mgm::device_id{1});
  REQUIRE(moved != p);
  REQUIRE(placed.location_of(moved)->device == mgm::device_id{1});
  REQUIRE_FALSE(placed.location_of(p).has_value());  // the old memory went back
  REQUIRE(placed.statistics().migrations == 1);
  REQUIRE(cudaMemcpy(back.data(), moved, n, cudaMemcpyDeviceToHost) == cudaSuccess);
  REQUIRE(back == pattern);
  placed.deallocate(moved, n);
  placed.release_all();
}
