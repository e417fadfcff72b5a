/// @file
/// @brief `sim::machine`: a simulated multi-GPU machine, for tests, CI and capacity planning
/// on hosts without a GPU.
///
/// Glossary:
/// - *device memory*: one `mmap(MAP_NORESERVE)` range per device, as large as its capacity. When
///   enough memory is free but not in one piece, a block gets a range of its own, as a GPU's
///   driver remaps pages: `cudaMalloc` does not fail for fragmentation, nor does the simulator.
///   Addresses are real; only touched pages cost host RAM, so an 8 x 141 GiB machine runs here.
/// - *clock*: each device's virtual time in nanoseconds. It moves only by `advance`, or when the
///   host waits (`synchronize`, an event's `synchronize`, a free that models `cudaFree`).
/// - *tail*: when a stream's enqueued work completes; `enqueue(s, w)`: `tail = max(tail, now) + w`.
/// - *modelled cost*: the `cost_model` charge of each platform call; never a measurement.
/// - *judge*: the `oracle`, which checks every hand-out `sim::judged` reports against the uses
///   the machine knows of (streams, events, graphs) and lists what breaks a rule in `hazards()`.
///   The virtual-memory seam checks the driver's documented rules the same way.
/// - *graph*: work captured on a stream between `begin_capture` and `end_capture`; it runs only
///   when launched, and memory its capture allocated or freed stays its own until `destroy`.
///
/// Invariants, per device d:
/// - `used(d) == Σ live allocations (rounded to 256 B) + Σ unreleased physical VMM bytes +
///   Σ foreign holds`
/// - `used(d) <= capacity(d)`; `free(d) == capacity(d) - used(d)`
/// - an event recorded on stream s completes exactly when `now(d) >= tail(s)` at its recording.
///
/// Each device has its own lock, so devices driven from different threads do not serialise.
#pragma once

#include <mgm/device.hpp>
#include <mgm/sim/cost_model.hpp>
#include <mgm/sim/device_allocator.hpp>
#include <mgm/sim/device_spec.hpp>
#include <mgm/sim/fault_plan.hpp>
#include <mgm/sim/hazard.hpp>
#include <mgm/sim/oracle.hpp>
#include <mgm/sim/peer_ops.hpp>
#include <mgm/sim/pinned_host_allocator.hpp>
#include <mgm/sim/stream_ops.hpp>
#include <mgm/sim/vmm_ops.hpp>
#include <mgm/stream.hpp>
#include <mgm/topology/topology.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mgm::sim {

namespace detail {
class machine_state;
}

/// @brief A device's memory as `cudaMemGetInfo` and the allocator's own records see it.
struct memory_info {
  std::size_t total_bytes{0};
  std::size_t used_bytes{0};
  std::size_t free_bytes{0};
  std::size_t peak_used_bytes{0};
  std::size_t largest_free_bytes{0};  ///< the largest single allocation that would succeed now
  std::size_t live_allocations{0};
};

/// @brief How a machine judges and prices: the defaulted last parameter of every constructor.
struct machine_options {
  oracle_mode oracle{oracle_mode::enforce};  ///< the stream-safety judge, on by default
  cost_model costs{cost_model::typical()};   ///< the price of each driver call
};

/// @brief A captured graph (`end_capture`), until `destroy`.
struct graph {
  std::uint64_t id{0};
  friend bool operator==(const graph&, const graph&) = default;
};

/// @brief N simulated GPUs with their memory, streams, events, virtual memory, peer access,
/// fault injection and cost model.
///
/// Movable, not copyable; allocators, seams and streams obtained from it stay valid across a
/// move and must not outlive it. Memory still allocated when it is destroyed is unmapped.
/// @code
///   auto m = mgm::sim::machine::preset("dgx-h100");
///   auto gpu3 = m.allocator(mgm::device_id{3});
///   void* p = gpu3.allocate(1 << 20);
/// @endcode
/// **Thread safety:** every member is safe to call concurrently. **Device affinity:** explicit.
class machine {
 public:
  /// @brief A preset by name (see `preset_names()`). @throws mgm::logic_error listing the names.
  [[nodiscard]] static machine preset(std::string_view name, machine_options options = {});
  /// @brief `dgx1-v100`, `dgx-a100`, `dgx-h100`, `hgx-h200`, `pcie-4gpu-mixed`.
  [[nodiscard]] static std::span<const std::string_view> preset_names() noexcept;
  /// @brief A preset name, or else a device list as `parse_device_list` reads it.
  /// @throws mgm::parse_error (naming the column) when it is neither.
  [[nodiscard]] static machine from_string(std::string_view preset_or_device_list, machine_options options = {});

  /// @brief Devices as given; pairs are `PHB` apart on the same (or unknown) NUMA node, else `SYS`.
  explicit machine(std::vector<device_spec> devices, machine_options options = {});
  /// @brief Devices with an explicit topology (`links.gpu_count() == devices.size()`).
  machine(std::vector<device_spec> devices, topology links, std::string name = "custom", machine_options options = {});
  ~machine();
  machine(machine&&) noexcept;
  machine& operator=(machine&&) noexcept;
  machine(const machine&) = delete;
  machine& operator=(const machine&) = delete;

  [[nodiscard]] int device_count() const noexcept;
  [[nodiscard]] const std::string& name() const noexcept;
  [[nodiscard]] const device_spec& spec(device_id d) const;
  [[nodiscard]] const topology& links() const noexcept;

  /// @brief The device's allocator (a handle). @throws mgm::logic_error when `d` is out of range.
  [[nodiscard]] device_allocator allocator(device_id d) const;
  /// @brief The device's allocator, whose virtual memory (a pool's expandable segments) is made
  /// `sharing`: `shareable` memory is backed by a `memfd` that another process can map
  /// (`vmm_ops::export_handle`, `import_handle`).
  [[nodiscard]] device_allocator allocator(device_id d, vmm_sharing sharing) const;
  /// @brief Pinned host memory near `numa_node` (unknown: any), for a host tier.
  [[nodiscard]] pinned_host_allocator host_allocator(std::optional<int> numa_node = std::nullopt) const noexcept {
    return pinned_host_allocator{state_.get(), numa_node};
  }
  [[nodiscard]] memory_info memory(device_id d) const;
  /// @brief The device whose memory holds `p`, if any.
  [[nodiscard]] std::optional<device_id> owner_of(const void* p) const noexcept;
  /// @brief Another process's memory on `d` (a competing tenant): `bytes` more are used, the
  /// process is listed by `foreign_processes`, until `release_foreign(d, pid)`. A second hold of
  /// the same pid adds to it. @throws mgm::out_of_memory when the device has not that much free.
  void hold_foreign(device_id d, std::uint32_t pid, std::string name, std::size_t bytes);
  /// @brief Gives back everything `pid` holds on `d`; returns the bytes (0 when it held none).
  std::size_t release_foreign(device_id d, std::uint32_t pid);
  /// @brief The other processes holding memory on `d`: pid, name, bytes.
  struct foreign_process {
    std::uint32_t pid{0};
    std::string name;
    std::size_t bytes{0};
  };
  [[nodiscard]] std::vector<foreign_process> foreign_processes(device_id d) const;
  /// @brief Whether `d` fell off the bus (`faults(d).lose_device()`).
  [[nodiscard]] bool lost(device_id d) const;
  /// @brief Frees given pointers the device did not hold (each also reported through `mgm::log`).
  [[nodiscard]] std::uint64_t invalid_frees(device_id d) const;

  /// @brief A new stream on `d`, until `destroy_stream`. It may get the handle value of a
  /// destroyed stream, as CUDA's streams may; it is a different stream all the same.
  [[nodiscard]] stream_ref create_stream(device_id d);
  /// @brief `cudaStreamDestroy`: work already enqueued completes; recording an event on, waiting
  /// on or allocating on the stream afterwards is a hazard (undefined behaviour on CUDA).
  /// @throws mgm::logic_error for the default stream, a capturing or an unknown stream.
  void destroy_stream(stream_ref s);
  /// @brief `d`'s default stream (what a null `stream_ref` means for `d`'s allocator).
  [[nodiscard]] stream_ref default_stream(device_id d) const;
  /// @brief The device a stream of this machine belongs to. @throws mgm::logic_error for a
  /// null or foreign stream.
  [[nodiscard]] device_id device_of(stream_ref s) const;
  /// @brief Work of duration `work` on `s`: `tail(s) = max(tail(s), now) + work`.
  void enqueue(stream_ref s, std::chrono::nanoseconds work);
  /// @brief Moves `d`'s clock forward by `dt` (>= 0).
  void advance(device_id d, std::chrono::nanoseconds dt);
  [[nodiscard]] std::chrono::nanoseconds now(device_id d) const;
  /// @brief The host waits for all of `d`'s work: `now = max(now, every tail)`.
  void synchronize(device_id d);
  /// @brief Starts capturing a graph on `s` in `mode` (`cudaStreamBeginCapture`). Work enqueued
  /// on `s` until `end_capture` is recorded into the graph, not run.
  /// @throws mgm::logic_error for the default stream, a dead or an already capturing stream.
  void begin_capture(stream_ref s, capture_mode mode = capture_mode::global);
  /// @brief Ends the capture on `s` and returns its graph.
  /// @throws mgm::cuda_error (`cudaErrorStreamCaptureInvalidated`) when a prohibited call broke
  /// the capture (the stream no longer captures then); mgm::logic_error when `s` is not capturing.
  graph end_capture(stream_ref s);
  /// @brief Runs `g`'s work again on `s` (`cudaGraphLaunch`); it touches every range its capture
  /// used: one now held by another user is a `graph_replay` hazard.
  void launch(graph g, stream_ref s);
  /// @brief `cudaGraphExecDestroy`: memory used by the capture is the graph's until its last
  /// launch ends. @throws mgm::logic_error for an unknown or destroyed graph.
  void destroy(graph g);

  /// @brief Every hazard found so far, in order.
  [[nodiscard]] std::vector<hazard> hazards() const;
  void clear_hazards();
  /// @brief The judge `sim::judged` reports to.
  [[nodiscard]] sim::oracle oracle() const noexcept { return sim::oracle{state_.get()}; }
  [[nodiscard]] oracle_mode judging() const noexcept;

  [[nodiscard]] sim::stream_ops streams() const noexcept;
  [[nodiscard]] sim::vmm_ops vmm(vmm_sharing sharing = vmm_sharing::process_local) const noexcept;
  [[nodiscard]] sim::peer_ops peers() const noexcept;
  [[nodiscard]] fault_plan faults(device_id d) const;

  /// @brief The cost constants; set them before the machine is used from several threads.
  [[nodiscard]] cost_model& costs() noexcept;
  /// @brief The driver calls `d` was asked for, with their modelled time, per kind.
  [[nodiscard]] modelled_costs modelled(device_id d) const;
  /// @brief Host time the simulator spent in the calls whose time is modelled (its own mmap,
  /// mprotect and table bookkeeping for cudaMalloc, cudaFree and the virtual-memory calls),
  /// measured, so a replay can subtract it from the allocator's host time.
  [[nodiscard]] std::chrono::nanoseconds bookkeeping(device_id d) const;

 private:
  std::unique_ptr<detail::machine_state> state_;
};

}  // namespace mgm::sim
