/// @file
/// @brief What one look at one GPU yields, whatever the source (NVML, CUDA, the simulated
/// machine, a log written by nvidia-smi or GPU-Z), and a log as a list of such looks.
///
/// Every metric is optional: a source that cannot say (a missing NVML symbol, `[N/A]` in a log,
/// a column GPU-Z does not have) leaves it empty; it is never 0 by default. Memory is in bytes.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mgm::telemetry {

using clock = std::chrono::system_clock;

/// @brief One process on one GPU, as `nvidia-smi --query-compute-apps` shows it.
struct process_sample {
  std::uint32_t pid{0};
  std::string name;                          ///< empty when it cannot be resolved
  std::optional<std::uint64_t> used_bytes;   ///< empty where the driver cannot tell (WDDM)
};

/// @brief What makes a MIG instance one (NVML): its GPU instance, its compute instance, and the
/// profile its name ends with ("3g.40gb").
struct mig_identity {
  unsigned gpu_instance_id{0};
  unsigned compute_instance_id{0};
  std::string profile;
};

/// @brief One GPU, or one MIG instance of a GPU, at one time.
struct device_sample {
  clock::time_point time{};
  /// The source's index: NVML's index for NVML, the CUDA ordinal for CUDA and the simulator, the
  /// `index` column of a log (or the order a GPU first appears in it).
  int index{0};
  std::optional<int> cuda_ordinal;           ///< set when the sample was joined to a CUDA device
  std::string uuid;                          ///< `GPU-xxxxxxxx-...`, empty when unknown
  std::string pci_bus_id;                    ///< `00000000:17:00.0`, empty when unknown
  std::string name;
  std::optional<unsigned> minor_number;      ///< N of /dev/nvidiaN (NVML only)
  /// Set for a MIG instance; its `index`, `pci_bus_id` and `minor_number` are its GPU's, its
  /// `uuid` (`MIG-...`), name and memory its own.
  std::optional<mig_identity> mig;
  /// The GPU fell off the bus (NVML_ERROR_GPU_IS_LOST, the simulator's lost device): its metrics
  /// are empty and `missing` says so.
  bool lost{false};

  std::optional<std::uint64_t> memory_total;
  std::optional<std::uint64_t> memory_used;
  std::optional<std::uint64_t> memory_free;
  std::optional<std::uint64_t> memory_reserved;  ///< by the driver and firmware (NVML v2)

  std::optional<double> temperature_c;
  std::optional<double> power_draw_w;
  std::optional<double> power_limit_w;
  std::optional<unsigned> clock_sm_mhz;
  std::optional<unsigned> clock_mem_mhz;
  std::optional<unsigned> pcie_gen;
  std::optional<unsigned> pcie_width;
  std::optional<double> pcie_rx_mb_s;
  std::optional<double> pcie_tx_mb_s;
  std::optional<unsigned> nvlink_up;         ///< links in the active state
  std::optional<unsigned> utilization_gpu_pct;
  std::optional<unsigned> utilization_mem_pct;

  /// Bytes handed out and held by MultiGpuMem pools on this GPU (all publishing processes).
  std::optional<std::uint64_t> pool_allocated;
  std::optional<std::uint64_t> pool_reserved;

  std::vector<process_sample> processes;
  /// Why a metric is empty, one `metric: reason` each (`power.draw: NVML_ERROR_NOT_SUPPORTED`).
  std::vector<std::string> missing;
  /// The host the GPU is in, for a source over a cluster (Prometheus: the node's label); empty
  /// for this machine's sources.
  std::string node;

  /// @brief The identity used to join samples of the same GPU across time and sources: the UUID,
  /// else the PCI bus id, else `index` and `name`; all but the UUID after `node/` where the
  /// sample names its node.
  [[nodiscard]] std::string key() const {
    if (!uuid.empty()) return uuid;
    const std::string host = node.empty() ? std::string{} : node + "/";
    if (mig) {
      return host + (pci_bus_id.empty() ? std::to_string(index) : pci_bus_id) + "/" +
             std::to_string(mig->gpu_instance_id) + "/" + std::to_string(mig->compute_instance_id);
    }
    if (!pci_bus_id.empty()) return host + pci_bus_id;
    return host + std::to_string(index) + ':' + name;
  }
};

/// @brief One row of a `--query-compute-apps` log: a process on the GPU named by its UUID.
struct process_row {
  clock::time_point time{};
  std::string gpu_uuid;
  process_sample process;
};

/// @brief A line of a log that was not read, and why.
struct log_issue {
  std::size_t line{0};  ///< 1-based
  std::string message;
};

/// @brief A GPU log as read: the samples in file order (GPUs interleaved as in the file).
struct gpu_log {
  /// "nvidia-smi-csv", "mgm-csv", "nvidia-smi-xml" (`-q -x`), "nvidia-smi-q" (`-q` text), "gpuz", "jsonl"
  std::string format;
  std::vector<device_sample> samples;
  std::vector<process_row> process_rows;     ///< from a `--query-compute-apps` log
  std::vector<log_issue> issues;             ///< lines skipped (in lenient mode)
  /// False when the log has no timestamps: sample times are then the row's ordinal per GPU times
  /// `assumed_interval`, counted from the epoch.
  bool has_timestamps{true};
  std::chrono::duration<double> assumed_interval{1.0};
};

}  // namespace mgm::telemetry
