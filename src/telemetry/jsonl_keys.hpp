// The field names of our JSON lines, shared by their writer (jsonl_sink.cpp) and their reader
// (jsonl_reader.cpp) so that the two cannot drift apart. Names with a unit (`memory.used_mib`)
// replaced the bare names (`memory.used`) that logs written before them use; the reader takes
// both. Internal: not installed.
#pragma once

namespace mgm::telemetry::jsonl_keys {

inline constexpr const char* timestamp = "timestamp";
inline constexpr const char* index = "index";
inline constexpr const char* uuid = "uuid";
inline constexpr const char* pci_bus_id = "pci.bus_id";
inline constexpr const char* name = "name";
inline constexpr const char* cuda_ordinal = "mgm.cuda_ordinal";
inline constexpr const char* memory_total = "memory.total_mib";
inline constexpr const char* memory_used = "memory.used_mib";
inline constexpr const char* memory_free = "memory.free_mib";
inline constexpr const char* memory_reserved = "memory.reserved_mib";
inline constexpr const char* temperature = "temperature.gpu_c";
inline constexpr const char* power_draw = "power.draw_w";
inline constexpr const char* power_limit = "power.limit_w";
inline constexpr const char* clock_sm = "clocks.current.sm_mhz";
inline constexpr const char* clock_mem = "clocks.current.memory_mhz";
inline constexpr const char* pcie_gen = "pcie.link.gen.current";
inline constexpr const char* pcie_width = "pcie.link.width.current";
inline constexpr const char* utilization_gpu = "utilization.gpu_pct";
inline constexpr const char* utilization_mem = "utilization.memory_pct";
inline constexpr const char* pcie_rx = "mgm.pcie.rx_mb_per_s";
inline constexpr const char* pcie_tx = "mgm.pcie.tx_mb_per_s";
inline constexpr const char* nvlink_up = "mgm.nvlink.up";
inline constexpr const char* pool_allocated = "mgm.pool.allocated_mib";
inline constexpr const char* pool_reserved = "mgm.pool.reserved_mib";
inline constexpr const char* mig_gpu_instance = "mgm.mig.gpu_instance_id";
inline constexpr const char* mig_compute_instance = "mgm.mig.compute_instance_id";
inline constexpr const char* mig_profile = "mgm.mig.profile";
inline constexpr const char* processes = "processes";
inline constexpr const char* pid = "pid";
inline constexpr const char* process_name = "process_name";
inline constexpr const char* used_gpu_memory = "used_gpu_memory_mib";
inline constexpr const char* missing = "missing";

}  // namespace mgm::telemetry::jsonl_keys
