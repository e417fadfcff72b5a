// `mgm topo --format slurm`: Slurm's gres.conf lines for the GPUs of a topology, with NVLink
// counts in `Links=` and, where the live machine's /sys can tell, the cores in `Cores=`.
#pragma once

#include <mgm/topology/topology.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace mgm_tool {

/// @brief What gres.conf needs of one GPU beyond the topology.
struct gres_gpu {
  std::optional<unsigned> minor;     ///< N of /dev/nvidiaN, from NVML
  std::optional<std::string> cores;  ///< Slurm's core indices, such as "0-15,32-47"
};

struct gres_input {
  std::string source;              ///< "this machine", "sim:dgx-h100", a file's name
  std::vector<gres_gpu> gpus;      ///< one per GPU of the topology (missing ones count as unknown)
  std::string minor_note;          ///< why N is the index, for the GPUs whose minor is unknown
  std::string cores_note;          ///< why Cores= is left out, for the GPUs whose cores are unknown
};

/// @brief The gres.conf text: comments saying where each figure comes from, then one
/// `Name=gpu File=/dev/nvidiaN [Cores=...] Links=...` line per GPU, in the topology's order.
[[nodiscard]] std::string gres_conf(const mgm::topology& t, const gres_input& in);

/// @brief Slurm's core indices of the CPUs local to the PCI device `pci_bus_id`, from sysfs under
/// `sys` (normally /sys): the device's `local_cpulist`, each CPU's (package, core) from
/// `devices/system/cpu/cpuN/topology`, and the cores numbered as Slurm numbers them, package by
/// package in core-id order. `nullopt`, with the reason in `why`, when sysfs cannot tell.
[[nodiscard]] std::optional<std::string> slurm_cores(const std::string& pci_bus_id, const std::filesystem::path& sys,
                                                     std::string* why = nullptr);

}  // namespace mgm_tool
