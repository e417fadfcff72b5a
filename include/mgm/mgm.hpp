/// @file
/// @brief MultiGpuMem: memory management across all the GPUs of a machine. The umbrella header.
///
/// Where things are (bottom-up; each layer includes only the ones above it in this list):
/// - core: `error.hpp` (exceptions, `MGM_` macros), `device.hpp` (`device_id`, `scoped_device`),
///   `concepts.hpp` (the allocator concepts and the three platform seams), `properties.hpp`,
///   `stream.hpp` (`stream_ref`), `bytes.hpp` (sizes as text), `log.hpp` (the log callback)
/// - platform seams on CUDA: `platform/cuda_stream_ops.hpp`, `cuda_vmm_ops.hpp`, `cuda_peer_ops.hpp`
/// - leaf allocators: `allocators/` (`cuda_allocator`, `cuda_async_allocator`,
///   `pinned_host_allocator`, `managed_allocator`, `host_allocator`)
/// - the caching pool: `pool/caching_pool.hpp` (its design comment is the place to start),
///   `pool/multi_device_pool.hpp`, options (`MGM_ALLOC_CONF`), statistics, snapshots
/// - adaptors: `adaptors/` (statistics, limiting, tracking with tags and checkpoints, RMM-CSV
///   logging, fault injection)
/// - topology: `topology/topology.hpp` (nvidia-smi text, NCCL XML), `topology/discovery.hpp`
/// - partition: `partition/partitioner.hpp` (capacity-proportional splits, rebalancing),
///   `partition/cluster.hpp` (over the nodes of a cluster, then each node's GPUs),
///   `partition/rebalancer.hpp` (the plan kept in step with free memory as a job runs),
///   `partition/rebalance_driver.hpp` (its loop over a telemetry source)
/// - telemetry (not included here): `telemetry/source.hpp` (NVML, CUDA, the simulator),
///   `telemetry/prometheus_source.hpp` (a cluster's GPUs from Prometheus), `telemetry/sampler.hpp`,
///   `telemetry/publisher.hpp`, `telemetry/log_format.hpp`, `telemetry/leak_analysis.hpp`
/// - placement: `placement/placement_policy.hpp` (ranking), `peer_access.hpp`, `placed_allocator.hpp`
/// - trace: `trace/trace.hpp` (RMM CSV), `trace/replay.hpp` (replays, the fit search)
/// - the simulated machine: `sim/machine.hpp` (and its allocator, seams, faults, cost model);
///   its judge: `sim/judged.hpp` (an adaptor reporting every hand-out), `sim/oracle.hpp`, `sim/hazard.hpp`
/// - interop: `interop/cuda_mr.hpp` (CCCL `cuda::mr`)
#pragma once

#include <mgm/bytes.hpp>
#include <mgm/concepts.hpp>
#include <mgm/device.hpp>
#include <mgm/error.hpp>
#include <mgm/log.hpp>
#include <mgm/properties.hpp>
#include <mgm/stream.hpp>

#include <mgm/platform/cuda_peer_ops.hpp>
#include <mgm/platform/cuda_stream_ops.hpp>
#include <mgm/platform/cuda_vmm_ops.hpp>

#include <mgm/allocators/cuda_allocator.hpp>
#include <mgm/allocators/cuda_async_allocator.hpp>
#include <mgm/allocators/host_allocator.hpp>
#include <mgm/allocators/managed_allocator.hpp>
#include <mgm/allocators/pinned_host_allocator.hpp>

#include <mgm/allocator_ref.hpp>
#include <mgm/tag.hpp>

#include <mgm/pool/caching_pool.hpp>
#include <mgm/pool/multi_device_pool.hpp>
#include <mgm/pool/pool_options.hpp>
#include <mgm/pool/pool_snapshot.hpp>
#include <mgm/pool/pool_statistics.hpp>

#include <mgm/adaptors/fault_injection_adaptor.hpp>
#include <mgm/adaptors/limiting_adaptor.hpp>
#include <mgm/adaptors/logging_adaptor.hpp>
#include <mgm/adaptors/statistics_adaptor.hpp>
#include <mgm/adaptors/tracking_adaptor.hpp>

#include <mgm/topology/discovery.hpp>
#include <mgm/topology/topology.hpp>

#include <mgm/partition/cluster.hpp>
#include <mgm/partition/partitioner.hpp>
#include <mgm/partition/rebalance_driver.hpp>
#include <mgm/partition/rebalancer.hpp>

#include <mgm/placement/peer_access.hpp>
#include <mgm/placement/placed_allocator.hpp>
#include <mgm/placement/placement_policy.hpp>

#include <mgm/trace/replay.hpp>
#include <mgm/trace/trace.hpp>

#include <mgm/sim/judged.hpp>
#include <mgm/sim/machine.hpp>

#include <mgm/interop/cuda_mr.hpp>

/// @brief The library's version, as the CMake package reports it.
#define MGM_VERSION_MAJOR 0
#define MGM_VERSION_MINOR 1
#define MGM_VERSION_PATCH 0
