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
/// Bandwidths are per direction, in GB/s, each with its provenance: *nominal* values follow
/// NCCL's constants (src/graph/topo.h, ../shared/research/topology.md §1.2): per NVLink one table,
/// `nvlink_generations()`, by generation (NVLink 1 P100 18, 2 V100 20, 3 A100 20, 3 on GA102's
/// x4 bridge 12, 4 H100/H200 20.6, 5 B200 40.1); PCIe width x speed / 80 (12 / 24 / 48 GB/s
/// for Gen3 / 4 / 5 x16); across sockets the CPU's interconnect (Intel 6 / 10 / 22 / 40 by
/// generation, AMD 16, POWER9 32, ARM 6); a path is as fast as its slowest part.
/// The generation of an NVLink comes from the GPUs' compute capability. Where it is unknown (a
/// `topo -m` file names no GPU model), the pair's figure is a lower bound: the slowest generation
/// that can bond that many links, and `nvlink_generation_of` says so (nullptr).
/// Sources: `parse_smi_topology` (the text of `nvidia-smi topo -m`), the simulator's presets.
#pragma once

#include <mgm/device.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>
#include <utility>

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
  std::optional<int> numa_node;          ///< the host NUMA node nearest the GPU; unknown when absent
  bool pcie_p2p{true};                   ///< the board allows PCIe peer access (GeForce 40 does not)
  std::string cpu_affinity;              ///< as nvidia-smi prints it: "0-51,104-155"; "" when unknown
  std::string numa_affinity;             ///< "0", "0,5-11", "" when unknown
  std::optional<int> gpu_numa_id;        ///< the GPU's own memory as a NUMA node (Grace Hopper)
  double pcie_gbps{0.0};                 ///< its PCIe link per direction; 0: by compute capability
  std::optional<int> pci_depth;          ///< PCIe bridges between the CPU and the GPU, when known
};

/// @brief A network card, kept apart from the GPUs: its name, its path to each GPU and to each NIC.
struct nic_info {
  std::string name;                      ///< "NIC0" or "mlx5_0"
  std::string device;                    ///< "mlx5_0" (from nvidia-smi's NIC legend) when known
  std::vector<gpu_path> to_gpu;          ///< per GPU ordinal
  std::vector<gpu_path> to_nic{};        ///< per NIC index ("X" at its own); empty when not known
};

/// @brief Where a bandwidth figure comes from.
enum class link_provenance : std::uint8_t { nominal, detected, measured, overridden };

/// @brief A per-direction bandwidth and its provenance.
struct link_bandwidth {
  double gbps{0.0};
  link_provenance provenance{link_provenance::nominal};
  friend bool operator==(const link_bandwidth&, const link_bandwidth&) = default;
};

/// @brief How a provenance is printed: "nominal", "detected", "measured", "overridden".
[[nodiscard]] std::string_view provenance_name(link_provenance p) noexcept;

/// @brief One NVLink generation (one row of the table all sources take: presets, files, discovery).
struct nvlink_generation {
  int number{0};               ///< 1 ... 5
  std::string_view name;       ///< "NVLink 4"; GA102's narrower links: "NVLink 3 (GA102, x4 links)"
  std::string_view gpus;       ///< "H100, H200"
  int min_cc{0};               ///< the compute capabilities (major * 10 + minor) that have it
  int max_cc{0};
  int max_links_per_gpu{0};    ///< the most NVLinks one GPU of that generation has
  double gbps_per_link{0.0};   ///< NCCL's effective figure per link, per direction, GB/s
};

/// @brief Every NVLink generation, oldest first (see the file comment for the sources).
[[nodiscard]] std::span<const nvlink_generation> nvlink_generations() noexcept;
/// @brief The NVLink generation of a compute capability; nullptr when unknown (0) or none has it.
[[nodiscard]] const nvlink_generation* find_nvlink_generation(int compute_capability) noexcept;
/// @brief The per-link figure of `find_nvlink_generation(compute_capability)`, GB/s; 0 when unknown.
[[nodiscard]] double nvlink_gbps_per_link(int compute_capability) noexcept;
/// @brief A lower bound per link when the generation is unknown: the slowest generation whose GPUs
/// can bond `links` NVLinks (the slowest of all when none can), GB/s.
[[nodiscard]] double nvlink_gbps_per_link_lower_bound(int links) noexcept;
/// @brief A GPU's PCIe link per direction, GB/s: its own figure, or NCCL's width x speed / 80 for
/// the generation its compute capability implies (x16: Volta Gen3 12, Ampere and Ada Gen4 24,
/// Hopper and later Gen5 48).
[[nodiscard]] double pcie_gbps(const gpu_info& g) noexcept;
/// @brief NCCL's inter-socket bandwidth for a CPU, GB/s: `vendor` "GenuineIntel", "AuthenticAMD",
/// "IBM" (POWER9) or "ARM"; Intel by model (Broadwell and older 6, Skylake 10, Sapphire Rapids 22,
/// Emerald Rapids 40). Unknown: 10 (Skylake-class).
[[nodiscard]] double inter_socket_gbps(std::string_view vendor, int model = 0) noexcept;

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

  [[nodiscard]] const std::vector<nic_info>& nics() const noexcept { return nics_; }
  /// @brief Adds a NIC. @throws mgm::logic_error unless `to_gpu` has one path per GPU, and
  /// `to_nic`, when given, has "X" at the NIC's own index.
  void add_nic(nic_info nic);
  /// @brief The path between NICs `a` and `b` (by index, either side's `to_nic`); nullopt when
  /// neither knows it. @throws mgm::logic_error when either is out of range.
  [[nodiscard]] std::optional<gpu_path> nic_path(std::size_t a, std::size_t b) const;

  /// @brief The NVLink generation of the pair's link; nullptr when the path is no NVLink or the
  /// generation is unknown (a GPU's compute capability is 0 or has none; different generations:
  /// the slower one).
  [[nodiscard]] const nvlink_generation* nvlink_generation_of(device_id a, device_id b) const;

  /// @brief The bandwidth from `a` to `b`: a figure set for the pair, or else the nominal one.
  [[nodiscard]] link_bandwidth bandwidth(device_id a, device_id b) const;
  /// @brief NCCL's nominal figure for the pair's path (see the file comment).
  [[nodiscard]] double nominal_gbps(device_id a, device_id b) const;
  /// @brief Sets the a -> b figure (detected, measured or overridden).
  void set_bandwidth(device_id a, device_id b, link_bandwidth bw);
  /// @brief The CPUs' interconnect, GB/s, for paths across sockets (default: `inter_socket_gbps("")`).
  void set_inter_socket_gbps(double gbps) noexcept { inter_socket_gbps_ = gbps; }
  [[nodiscard]] double inter_socket() const noexcept { return inter_socket_gbps_; }

  /// @brief The matrix as `nvidia-smi topo -m` prints it (GPUs, then NICs; CPU and NUMA affinity,
  /// GPU NUMA ID; the legend and the NIC legend), so nvidia-smi users read it at once. With
  /// `bandwidths`, a second matrix of GB/s and the NVLink generation ("unknown" where it is).
  [[nodiscard]] std::string to_smi_matrix(bool bandwidths = false) const;

  friend bool operator==(const topology& a, const topology& b) noexcept {
    return a.paths_ == b.paths_ && a.gpus_.size() == b.gpus_.size();
  }

 private:
  [[nodiscard]] std::size_t index(device_id a, device_id b) const;
  std::vector<gpu_info> gpus_;
  std::vector<gpu_path> paths_;  // row-major gpu_count × gpu_count
  std::vector<std::optional<link_bandwidth>> bandwidths_;  // row-major; empty: all nominal
  std::vector<nic_info> nics_;
  double inter_socket_gbps_{10.0};
};

/// @brief Reads the text of `nvidia-smi topo -m`: a leading prompt line, tabs and spaces however
/// aligned (tabs turned into runs of spaces too), NIC rows with their NIC-to-NIC cells and the NIC
/// legend (`NIC0: mlx5_0` names `device`), CPU / NUMA affinity and GPU NUMA ID columns where
/// present (a GPU's NUMA node is the first of its NUMA affinity; unknown where the column is absent
/// or `N/A`), the legacy `SOC` label as `SYS`, and the cells nvidia-smi runs together when it has
/// many NICs (`NIC7NIC8` in the header, `SYSSYS` in a row: split at each known label).
/// @throws mgm::parse_error naming the line and column: of the header when it is wrong (no GPU0
/// column, GPUs out of order), of the cell that is no label, off the diagonal `X`, or differs
/// from its mirror; of the row that is short or unknown.
[[nodiscard]] topology parse_smi_topology(std::string_view text);

/// @brief Reads NCCL's topology XML (`NCCL_TOPO_FILE`): GPUs are `pci` elements of class
/// 0x0302xx / 0x0300xx or with a `<gpu>`, NICs of class 0x0200xx / 0x0207xx or with a `<nic>`;
/// paths follow NCCL's rules (NVLink where a `<nvlink>` targets the other GPU; `SYS` across CPUs;
/// `PIX` under the same bridge, `PXB` under a common bridge, `PHB` through the CPU); ordinals are
/// NCCL's `dev` numbers, or PCI bus order. NCCL fills NVLinks in at run time, so files without
/// `<gpu>` elements have none.
/// @throws mgm::parse_error naming the line and column of malformed XML, or a file with no GPU.
[[nodiscard]] topology parse_nccl_topology_xml(std::string_view text);

/// @brief NCCL's topology XML for `t`: one `<cpu>` per NUMA node, bridges for the `PIX` / `PXB`
/// groups, `<nvlink>` elements for `NV#` pairs; `parse_nccl_topology_xml` reads it back to the
/// same GPU paths (`NODE` reads back as `PHB`, which NCCL does not tell apart).
[[nodiscard]] std::string to_nccl_xml(const topology& t);

}  // namespace mgm
