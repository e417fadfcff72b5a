/// @file
/// @brief The allocator concepts and the three platform seams every layer above the leaves uses.
///
/// The allocator concepts mirror CCCL 3.0's `cuda::mr::resource` / `async_resource`, so that our
/// allocators also satisfy them (proved in `interop/cuda_mr.hpp`). The seams are each implemented
/// twice: for CUDA (`mgm/platform/cuda_*_ops.hpp`) and by the simulated machine (`mgm/sim/`).
/// Code above the leaves calls the platform through nothing else, so the same pool runs on real
/// streams and on the simulator's virtual clocks.
#pragma once

#include <mgm/device.hpp>
#include <mgm/stream.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

namespace mgm {

/// @brief Synchronous allocation.
///
/// - `allocate(bytes, alignment)` returns memory of at least `bytes` aligned to `alignment`
///   (a power of two), or throws: `mgm::out_of_memory` when memory ran out, `mgm::logic_error` for
///   a bad argument. `allocate(0, a)` may return `nullptr`.
/// - `deallocate(p, bytes, alignment)` is `noexcept` and takes the `bytes` and `alignment` given
///   to `allocate`; `deallocate(nullptr, ...)` does nothing.
/// - Two allocators compare equal when memory from one can be returned to the other.
template <class A>
concept allocator = std::equality_comparable<A> &&
                    requires(A& a, void* p, std::size_t bytes, std::size_t alignment) {
                      { a.allocate(bytes, alignment) } -> std::same_as<void*>;
                      { a.deallocate(p, bytes, alignment) } noexcept;
                    };

/// @brief Stream-ordered allocation: the memory may be used by work enqueued on `stream` after
/// the call; `deallocate_async` lets it be reused once the work enqueued on `stream` so far is done.
template <class A>
concept stream_allocator =
    allocator<A> && requires(A& a, void* p, std::size_t bytes, std::size_t alignment, stream_ref s) {
      { a.allocate_async(bytes, alignment, s) } -> std::same_as<void*>;
      { a.deallocate_async(p, bytes, alignment, s) } noexcept;
    };

/// @brief Seam 1: streams and events, as a caching pool needs them.
///
/// | call                      | meaning                                                          |
/// |---------------------------|------------------------------------------------------------------|
/// | `create_event(d)`         | a new event on device `d`; throws `cuda_error`                   |
/// | `record(e, st)`           | `e` completes when the work enqueued on `st` so far completes    |
/// | `query(e)`                | has `e` completed? Never blocks. An unrecorded event is complete |
/// | `wait(st, e)`             | work enqueued on `st` later runs after `e`; the host does not block |
/// | `synchronize(e)`          | the host blocks until `e` completes (release paths only)         |
/// | `destroy_event(e)`        | `noexcept`                                                       |
/// | `is_capturing(st)`        | a CUDA graph capture is under way on `st`: no event queries, no  |
/// |                           | upstream calls may be made for it                                |
/// | `capture_id(st)`          | the id of the capture under way on `st` (unique in the process), |
/// |                           | or 0; the legacy default stream (`stream_ref{}`) never captures  |
/// | `exchange_capture_mode(m)`| sets the calling thread's capture mode, returns the previous one |
/// |                           | (`cudaThreadExchangeStreamCaptureMode`; see `capture_mode`)      |
///
/// Optional: `synchronize_device(d)`, the host blocks until all of `d`'s work completes
/// (`cudaDeviceSynchronize`). A pool that has it waits so before unmapping its memory at its end
/// (`stream_ops_can_synchronize_device`); one without it unmaps at once.
template <class S>
concept stream_ops = std::copyable<S> && requires(S& s, stream_ref st, typename S::event e, device_id d,
                                                  capture_mode mode) {
  typename S::event;
  { s.create_event(d) } -> std::same_as<typename S::event>;
  s.record(e, st);
  { s.query(e) } -> std::same_as<bool>;
  s.wait(st, e);
  s.synchronize(e);
  { s.destroy_event(e) } noexcept;
  { s.is_capturing(st) } -> std::same_as<bool>;
  { s.capture_id(st) } -> std::same_as<std::uint64_t>;
  { s.exchange_capture_mode(mode) } -> std::same_as<capture_mode>;
};

/// @brief Whether seam `S` has the optional `synchronize_device(d)` (see `stream_ops`).
template <class S>
concept stream_ops_can_synchronize_device = requires(S& s, device_id d) { s.synchronize_device(d); };

/// @brief Seam 2: virtual memory, for expandable segments (CUDA's `cuMem*` family).
///
/// Sizes and addresses are multiples of `granularity(d)`.
/// | call                         | meaning                                                       |
/// |------------------------------|---------------------------------------------------------------|
/// | `supported(d)`               | `d` supports virtual memory management                        |
/// | `granularity(d)`             | the mapping granule in bytes (2 MiB on current GPUs)          |
/// | `reserve(d, bytes)`          | a range of addresses with no memory behind it                 |
/// | `unreserve(va, bytes)`       | `noexcept`; the range must be unmapped                        |
/// | `create(d, bytes)`           | physical memory on `d`; `out_of_memory` when `d` is full      |
/// | `release(h)`                 | `noexcept`; the memory is freed once no mapping uses it       |
/// | `map(va, bytes, h)`          | back `[va, va+bytes)` with `h` (from its offset 0)            |
/// | `unmap(va, bytes)`           | `noexcept`; remove the backing                                |
/// | `set_access(va, bytes, ds)`  | devices `ds` may read and write the range (the owner included: |
/// |                              | a mapped range is inaccessible until this is called)          |
template <class V>
concept vmm_ops = std::copyable<V> &&
                  requires(V& v, device_id d, std::size_t bytes, void* va, typename V::physical_handle h,
                           std::span<const device_id> readers) {
                    typename V::physical_handle;
                    { v.supported(d) } -> std::same_as<bool>;
                    { v.granularity(d) } -> std::same_as<std::size_t>;
                    { v.reserve(d, bytes) } -> std::same_as<void*>;
                    { v.unreserve(va, bytes) } noexcept;
                    { v.create(d, bytes) } -> std::same_as<typename V::physical_handle>;
                    { v.release(h) } noexcept;
                    v.map(va, bytes, h);
                    { v.unmap(va, bytes) } noexcept;
                    v.set_access(va, bytes, readers);
                  };

/// @brief How a virtual-memory seam creates physical memory.
enum class vmm_sharing {
  /// No handle types, at the minimum granularity: memory only this process can map.
  process_local,
  /// POSIX file descriptors, plus fabric handles where the device supports them (created again
  /// without them when the driver refuses, as NCCL does), GPUDirect RDMA where supported, at the
  /// recommended granularity. These are NCCL's rules for registering user buffers
  /// (`ncclCommRegister`, its "qualified allocator"), and what another process needs to map the
  /// memory (`export_handle`, `import_handle`).
  shareable,
};

/// @brief A virtual-memory seam whose physical memory other processes can map.
///
/// | call               | meaning                                                                 |
/// |--------------------|-------------------------------------------------------------------------|
/// | `sharing()`        | how `create` makes memory; only `shareable` memory can be exported      |
/// | `export_handle(h)` | a new POSIX file descriptor for `h`, the caller's to close              |
/// | `import_handle(fd)`| a handle here for memory another process exported; `fd` stays the       |
/// |                    | caller's. Map it, give access, and `release` it as one's own            |
template <class V>
concept shareable_vmm_ops = vmm_ops<V> && requires(V& v, typename V::physical_handle h, int fd) {
  { v.sharing() } -> std::same_as<vmm_sharing>;
  { v.export_handle(h) } -> std::same_as<int>;
  { v.import_handle(fd) } -> std::same_as<typename V::physical_handle>;
};

/// @brief Seam 3: peer access between devices.
///
/// | call                      | meaning                                                            |
/// |---------------------------|--------------------------------------------------------------------|
/// | `can_access(a, o)`        | device `a` could map memory owned by device `o`                    |
/// | `enable(a, o)`            | `a` may access `o`'s `cudaMalloc` memory from now on; "already    |
/// |                           | enabled" is success; a device holds at most 8 peer connections:    |
/// |                           | beyond that `cuda_error` with `cudaErrorTooManyPeers`              |
/// | `disable(a, o)`           | undo `enable`; disabling a pair that is not enabled is a no-op     |
/// | `copy(d, dd, s, sd, n, q)`| `n` bytes from `s` (on `sd`) to `d` (on `dd`), host memory allowed |
/// |                           | (`device_id::host()`), on stream `q`; done when it returns         |
template <class P>
concept peer_ops = std::copyable<P> && requires(P& p, device_id accessor, device_id owner, void* dst, const void* src,
                                                 std::size_t bytes, stream_ref s) {
  { p.can_access(accessor, owner) } -> std::same_as<bool>;
  p.enable(accessor, owner);
  p.disable(accessor, owner);
  p.copy(dst, accessor, src, owner, bytes, s);  // done (the source free to reuse) when it returns
};

/// @brief An allocator that names its platform: `A::stream_ops_type` and `a.stream_ops()`.
/// A pool over it picks the matching seam, so a pool over a simulated device never calls CUDA.
template <class A>
concept platform_allocator = stream_allocator<A> && requires(const A& a) {
  typename A::stream_ops_type;
  requires stream_ops<typename A::stream_ops_type>;
  { a.stream_ops() } -> std::same_as<typename A::stream_ops_type>;
};

/// @brief A leaf allocator that also offers its device's virtual-memory seam (`A::vmm_ops_type`,
/// `a.vmm_ops()`) and its device's size (`a.total_bytes()`): a pool over it can grow expandable
/// segments instead of asking it for blocks. Adaptors do not offer it: memory mapped through the
/// seam would bypass them.
template <class A>
concept vmm_allocator = platform_allocator<A> && requires(const A& a) {
  typename A::vmm_ops_type;
  requires vmm_ops<typename A::vmm_ops_type>;
  { a.vmm_ops() } -> std::same_as<typename A::vmm_ops_type>;
  { a.total_bytes() } -> std::convertible_to<std::size_t>;
};

/// @brief The largest alignment every leaf allocator honours (CUDA's allocation alignment).
inline constexpr std::size_t cuda_allocation_alignment = 256;

/// @brief True for a power of two (0 is not one).
[[nodiscard]] constexpr bool is_power_of_two(std::size_t n) noexcept { return n != 0 && (n & (n - 1)) == 0; }

}  // namespace mgm
