// Live topology discovery and calibration on the GPUs of this machine (label gpu).
#include <mgm/device.hpp>
#include <mgm/topology/discovery.hpp>

#include <catch2/catch.hpp>

#include <cstdio>

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
