/// @file
/// @brief `cub_with_temp_storage`: CUB's two-phase device calls with temporary storage from a pool.
///
/// CUB's device-wide algorithms are called twice: first with a null `d_temp_storage` to learn how
/// many bytes they need, then with that much memory to run. This helper does both, taking the
/// memory from a pool on the call's stream and giving it back stream-ordered afterwards:
///
/// ```cpp
/// const cudaError_t e = mgm::cub_with_temp_storage(pool, stream, [&](void* temp, std::size_t& bytes) {
///   return cub::DeviceRadixSort::SortKeys(temp, bytes, d_in, d_out, n, 0, 32, stream.get());
/// });
/// ```
///
/// - `call(nullptr, bytes)` sizes; an error from it is returned and nothing is allocated.
/// - Then `call(block, bytes)` with a block of at least `bytes` (at least 1 byte: CUB takes a null
///   pointer as "size only", so a request of 0 bytes still gets a real block), aligned to 256.
/// - The block is freed with `deallocate_async(..., stream)` whatever the call does: returns an
///   error, or throws (the exception propagates). The call must enqueue its work on `stream`, the
///   stream the block is ordered on: the pool reuses it on that stream at once, and on other
///   streams only after an event covers the work.
/// - Header-only, host code only: it compiles under g++ and nvcc; the kernels are the call's.
#pragma once

#include <mgm/concepts.hpp>
#include <mgm/stream.hpp>

#include <cuda_runtime_api.h>

#include <concepts>
#include <cstddef>
#include <functional>
#include <type_traits>
#include <utility>

namespace mgm {

namespace detail {

/// A pooled block freed stream-ordered when it leaves scope.
template <class Pool>
class scoped_temp_block {
 public:
  scoped_temp_block(Pool& pool, std::size_t bytes, stream_ref stream)
      : pool_{pool}, bytes_{bytes}, stream_{stream}, p_{pool.allocate_async(bytes, cuda_allocation_alignment, stream)} {}
  scoped_temp_block(const scoped_temp_block&) = delete;
  scoped_temp_block& operator=(const scoped_temp_block&) = delete;
  ~scoped_temp_block() { pool_.deallocate_async(p_, bytes_, cuda_allocation_alignment, stream_); }
  [[nodiscard]] void* get() const noexcept { return p_; }

 private:
  Pool& pool_;
  std::size_t bytes_;
  stream_ref stream_;
  void* p_;
};

}  // namespace detail

/// @brief Runs a CUB two-phase call with temporary storage from `pool` on `stream` (see above).
/// @tparam Pool an `mgm::stream_allocator` (a `caching_pool`, an `allocator_ref` to one, ...).
/// @tparam F callable as `call(void* d_temp_storage, std::size_t& temp_storage_bytes)`, returning
///   something convertible to `cudaError_t` (what CUB's device algorithms return).
/// @return the sizing call's error if it failed, else the second call's.
/// @throws what `pool.allocate_async` throws (`mgm::out_of_memory`, ...) and what `call` throws;
///   the block is freed in both cases.
/// **Thread safety:** that of the pool. **Device affinity:** the pool's; CUB runs on the current
/// device, which should be the pool's.
template <stream_allocator Pool, class F>
  requires std::invocable<F&, void*, std::size_t&> &&
           std::convertible_to<std::invoke_result_t<F&, void*, std::size_t&>, cudaError_t>
cudaError_t cub_with_temp_storage(Pool& pool, stream_ref stream, F&& call) {
  std::size_t bytes = 0;
  const cudaError_t sized = std::invoke(call, static_cast<void*>(nullptr), bytes);
  if (sized != cudaSuccess) return sized;
  const detail::scoped_temp_block<Pool> block{pool, bytes == 0 ? std::size_t{1} : bytes, stream};
  return std::invoke(call, block.get(), bytes);
}

}  // namespace mgm
