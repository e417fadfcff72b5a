/// @file
/// @brief `sim::vmm_ops`: the virtual-memory seam on the simulated machine.
#pragma once

#include <mgm/concepts.hpp>
#include <mgm/device.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace mgm::sim {

namespace detail {
class machine_state;
}

/// @brief Virtual memory in 2 MiB granules, satisfying `mgm::vmm_ops`, with CUDA's rules.
///
/// `reserve` takes host address space (`PROT_NONE`, no memory); `create` charges the device's
/// capacity exactly (`out_of_memory` past it; fault injection applies); `map` makes the range
/// readable and writable host memory; `set_access` checks each reader may access the owner
/// (itself, or a peer `peer_ops::can_access` allows); `unmap` returns the pages to the host and
/// `release` the capacity once the handle is no longer mapped. Sizes and addresses that are not
/// multiples of the granule, unknown handles and overlapping maps throw `mgm::cuda_error` with
/// `cudaErrorInvalidValue`, as the driver fails. Invariant: per device,
/// `Σ created bytes not yet freed + Σ allocator bytes <= capacity`.
///
/// **Shareable memory** (`vmm_sharing::shareable`): `create` backs the memory with a `memfd`
/// (named after its device), which `map` maps shared over the reservation, so that another
/// process can map the same pages: `export_handle` gives a new descriptor for it, and
/// `import_handle` in another process (its own machine, with that device) makes a handle for it.
/// Imported memory is charged to nobody here: the exporter's machine holds it, until the exporter
/// releases it (a GPU counts it until the last importer lets go too; the simulator cannot). An imported
/// descriptor must be a sim `memfd` of whole granules, else `cuda_error` (`cudaErrorInvalidValue`).
/// A handle to its machine. **Thread safety:** safe.
class vmm_ops {
 public:
  using physical_handle = std::uint64_t;
  static constexpr std::size_t granule_bytes = std::size_t{2} << 20;

  explicit vmm_ops(detail::machine_state* machine, vmm_sharing sharing = vmm_sharing::process_local) noexcept
      : machine_{machine}, sharing_{sharing} {}

  [[nodiscard]] vmm_sharing sharing() const noexcept { return sharing_; }

  [[nodiscard]] bool supported(device_id d);
  [[nodiscard]] std::size_t granularity(device_id d);
  [[nodiscard]] void* reserve(device_id d, std::size_t bytes);
  void unreserve(void* va, std::size_t bytes) noexcept;
  [[nodiscard]] physical_handle create(device_id d, std::size_t bytes);
  void release(physical_handle h) noexcept;
  void map(void* va, std::size_t bytes, physical_handle h);
  void unmap(void* va, std::size_t bytes) noexcept;
  void set_access(void* va, std::size_t bytes, std::span<const device_id> readers);
  /// @brief A new descriptor of shareable memory `h`. @throws mgm::logic_error for process-local
  /// memory; mgm::cuda_error for an unknown handle.
  [[nodiscard]] int export_handle(physical_handle h);
  /// @brief A handle for memory another process exported; `fd` stays the caller's.
  [[nodiscard]] physical_handle import_handle(int fd);
  /// @brief The devices given access to the mapping at `va` (not part of the seam: for tests).
  [[nodiscard]] std::vector<device_id> access(const void* va);
  /// @brief Bytes of `d`'s physical memory mapped now (not part of the seam).
  [[nodiscard]] std::size_t mapped_bytes(device_id d);

  friend bool operator==(const vmm_ops&, const vmm_ops&) = default;

 private:
  detail::machine_state* machine_;
  vmm_sharing sharing_{vmm_sharing::process_local};
};
static_assert(mgm::shareable_vmm_ops<vmm_ops>);

}  // namespace mgm::sim
