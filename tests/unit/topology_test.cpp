#include <mgm/error.hpp>
#include <mgm/topology/topology.hpp>

#include <catch2/catch.hpp>

using mgm::device_id;

TEST_CASE("nvidia-smi labels map to NCCL path types", "[topology]") {
  using mgm::gpu_path;
  using mgm::path_type;
  REQUIRE(gpu_path::from_label("X").type == path_type::loc);
  REQUIRE(gpu_path::from_label("NV12").type == path_type::nvl);
  REQUIRE(gpu_path::from_label("NV12").nvlinks == 12);
  REQUIRE(gpu_path::from_label("NV12").label() == "NV12");
  REQUIRE(gpu_path::from_label("NODE").type == path_type::phb);  // NCCL folds NODE into PHB
  REQUIRE(gpu_path::from_label("NODE").label() == "NODE");       // but the smi label is kept
  REQUIRE(gpu_path::from_label("SOC").label() == "SYS");         // the legacy name
  REQUIRE(gpu_path::from_label("PXB").nccl_name() == "PXB");
  REQUIRE(gpu_path::from_label("SYS").nccl_name() == "SYS");
  for (const char* bad : {"", "NV", "NV0", "NVx", "PCI", "nv1", "NV12345"}) {
    INFO(bad);
    REQUIRE_THROWS_AS(gpu_path::from_label(bad), mgm::logic_error);
  }
  // NCCL's order: a smaller type is a better path.
  REQUIRE(path_type::nvl < path_type::pix);
  REQUIRE(path_type::phb < path_type::sys);
}

TEST_CASE("a topology is symmetric and validated", "[topology]") {
  mgm::topology t{std::vector<mgm::gpu_info>(3)};
  REQUIRE(t.path(device_id{1}, device_id{1}).label() == "X");
  REQUIRE(t.path(device_id{0}, device_id{2}).label() == "SYS");
  t.set_path(device_id{0}, device_id{2}, mgm::gpu_path::from_label("NV4"));
  REQUIRE(t.path(device_id{2}, device_id{0}).nvlinks == 4);
  REQUIRE_THROWS_AS(t.set_path(device_id{1}, device_id{1}, mgm::gpu_path{}), mgm::logic_error);
  REQUIRE_THROWS_AS(t.path(device_id{0}, device_id{3}), mgm::logic_error);

  REQUIRE_THROWS_WITH(t.set_paths_from_labels({{"X", "NV1", "SYS"}, {"NV2", "X", "SYS"}, {"SYS", "SYS", "X"}}),
                      Catch::Contains("differs"));
  REQUIRE_THROWS_WITH(t.set_paths_from_labels({{"X", "NV1", "SYS"}, {"NV1", "X", "BAD"}, {"SYS", "SYS", "X"}}),
                      Catch::Contains("row 1, column 2"));
  REQUIRE_THROWS_AS(t.set_paths_from_labels({{"X", "NV1"}, {"NV1", "X"}}), mgm::logic_error);
  // A rejected matrix changes nothing.
  REQUIRE(t.path(device_id{0}, device_id{2}).nvlinks == 4);
  t.set_paths_from_labels({{"X", "PIX", "NODE"}, {"PIX", "X", "PXB"}, {"NODE", "PXB", "X"}});
  REQUIRE(t.path(device_id{2}, device_id{1}).label() == "PXB");
}
