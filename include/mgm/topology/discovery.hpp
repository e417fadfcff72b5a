/// @file
/// @brief The topology of the GPUs this process sees, discovered live, and measured.
#pragma once

#include <mgm/topology/topology.hpp>

#include <cstddef>

namespace mgm {

/// @brief GPUs from the CUDA runtime (name, memory, compute capability, PCI bus id, UUID), NUMA
/// node and CPU affinity from sysfs, and for each pair: NVLinks and the PCIe common ancestor from
/// NVML (loaded at run time from `MGM_NVML_LIBRARY` or `libnvidia-ml.so.1`, when present), else
/// `PHB` where CUDA allows peer access and `SYS` where it does not. Bandwidths are the nominal
/// figures of the detected paths, marked *detected*.
/// @throws mgm::cuda_error (`cudaErrorNoDevice`) without a GPU or driver.
[[nodiscard]] topology discover_topology();

/// @brief Measures the copy bandwidth of every peer-capable ordered pair (`bytes` copied `repeats`
/// times with `cudaMemcpyPeerAsync`, timed by events) and records it as *measured*. Enables peer
/// access for the pairs it measures. Returns the number of pairs measured.
/// @throws mgm::cuda_error; mgm::logic_error when `t` has more GPUs than this machine.
std::size_t calibrate(topology& t, std::size_t bytes = std::size_t{256} << 20, int repeats = 5);

}  // namespace mgm
