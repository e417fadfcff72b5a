/// @file
/// @brief `topology`: the plain value that says how a machine's GPUs are connected.
///
/// Glossary:
/// - *path type*: NCCL's classification of the route between two devices, ordered best to worst
///   as NCCL's `topo.h` orders them: `LOC NVL NVB C2C PIX PXB P2C PXN PHB SYS NET DIS`.
/// - *smi label*: what `nvidia-smi topo -m` prints for the pair: `X NV# PIX PXB NODE PHB SYS`.
///   `NODE` has no NCCL type of its own (NCCL folds it into `PHB`); both are kept.
///
/// Invariants: `path(a, a).type == LOC`; `path(a, b) == path(b, a)`; `nvlinks > 0` exactly when
/// `smi == NV`.
///
/// This is the foundation's version: GPUs and the pairwise path matrix, enough for the simulated
/// presets and peer-access decisions. Sources (nvidia-smi text, NCCL XML, live discovery) and
/// per-link bandwidths build on it.
#pragma once

#include <mgm/device.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mgm {

/// @brief NCCL's path types, in NCCL's order (a smaller value is a better path).
enum class path_type : std::uint8_t { loc, nvl, nvb, c2c, pix, pxb, p2c, pxn, phb, sys, net, dis };

/// @brief The label `nvidia-smi topo -m` prints for a pair of devices.
enum class smi_label : std::uint8_t { x, nv, pix, pxb, node, phb, sys };

/// @brief The route between two GPUs.
struct gpu_path {
  path_type type{path_type::dis};
  smi_label smi{smi_label::sys};
  int nvlinks{0};  ///< bonded NVLinks when `smi == nv`

  [[nodiscard]] bool is_nvlink() const noexcept { return type == path_type::nvl || type == path_type::nvb; }
  /// @brief The label as nvidia-smi prints it ("X", "NV12", "PHB", ...).
  [[nodiscard]] std::string label() const;
  /// @brief NCCL's name of the type ("LOC", "NVL", ...).
  [[nodiscard]] std::string_view nccl_name() const noexcept;
  /// @brief Parses one label of `nvidia-smi topo -m` ("NV2", "NODE", the legacy "SOC" as SYS).
  /// @throws mgm::logic_error for anything else.
  [[nodiscard]] static gpu_path from_label(std::string_view label);

  friend bool operator==(const gpu_path&, const gpu_path&) = default;
};

/// @brief One GPU as the topology sees it.
struct gpu_info {
  int ordinal{0};
  std::string name;
  std::string pci_bus_id;                ///< "00000000:07:00.0" when known
  std::string uuid;                      ///< "GPU-..." when known
  int compute_capability{0};             ///< major * 10 + minor, 0 when unknown
  std::size_t memory_bytes{0};
  std::optional<int> numa_node;          ///< unknown when absent
  bool pcie_p2p{true};                   ///< the board allows PCIe peer access (GeForce 40 does not)
};

/// @brief GPUs and the path between every pair.
class topology {
 public:
  topology() = default;
  /// @brief `gpus.size()` GPUs; every distinct pair starts as `SYS` until set.
  explicit topology(std::vector<gpu_info> gpus);

  [[nodiscard]] std::size_t gpu_count() const noexcept { return gpus_.size(); }
  [[nodiscard]] const std::vector<gpu_info>& gpus() const noexcept { return gpus_; }
  [[nodiscard]] const gpu_info& gpu(device_id d) const;
  /// @throws mgm::logic_error when either device is out of range.
  [[nodiscard]] const gpu_path& path(device_id a, device_id b) const;
  /// @brief Sets the path of the pair, both directions. @throws mgm::logic_error on `a == b`.
  void set_path(device_id a, device_id b, gpu_path p);
  /// @brief Fills every pair from a square matrix of nvidia-smi labels (row = GPU, "X" on the
  /// diagonal). @throws mgm::logic_error naming the row and column of a bad cell.
  void set_paths_from_labels(const std::vector<std::vector<std::string_view>>& labels);

 private:
  [[nodiscard]] std::size_t index(device_id a, device_id b) const;
  std::vector<gpu_info> gpus_;
  std::vector<gpu_path> paths_;  // row-major gpu_count × gpu_count
};

}  // namespace mgm
