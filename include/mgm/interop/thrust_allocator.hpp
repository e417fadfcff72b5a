/// @file
/// @brief Thrust allocators over a pool: `thrust_allocator<T>` for containers
/// (`thrust::device_vector<T, mgm::thrust_allocator<T>>`) and `thrust_temporary_allocator` for
/// algorithms' scratch memory (`thrust::cuda::par(alloc).on(stream)`).
///
/// Both refer to any `mgm::stream_allocator` (a `caching_pool`, a `multi_device_pool`'s pool, an
/// adaptor, a leaf) without naming its type, so that `thrust_allocator<float>` is one type
/// whatever the pool, and allocate on the stream given at construction: the memory is
/// stream-ordered on it, so give Thrust the same stream (`par.on(stream)`). The pool is held by
/// pointer: it must outlive every allocator and every container that uses it.
///
/// A `device_vector`'s own kernels (the fill of its constructor, `resize`, copies) run on Thrust's
/// default stream, which cannot be chosen. Give `thrust_allocator` the default stream or a
/// *blocking* stream (created without `cudaStreamNonBlocking`), which the legacy default stream
/// orders against; with a non-blocking stream a block the pool hands out again at once could be
/// written by a default-stream kernel before the stream's earlier work on it has finished.
///
/// Requires Thrust (CCCL) on the include path, which `MultiGpuMem::multigpumem` provides; compiles
/// under the host compiler too (containers and algorithms themselves need nvcc to launch kernels).
#pragma once

#include <mgm/allocator_ref.hpp>
#include <mgm/concepts.hpp>
#include <mgm/error.hpp>
#include <mgm/stream.hpp>

#include <thrust/device_ptr.h>
#include <thrust/device_reference.h>

#include <cstddef>
#include <limits>
#include <memory>
#include <new>

namespace mgm {

namespace detail {

/// A non-owning reference to any `stream_allocator`, its type erased: an object pointer and a
/// table of two functions. Equal when it refers to the same object.
class erased_stream_allocator_ref {
 public:
  template <stream_allocator A>
  explicit erased_stream_allocator_ref(A& a) noexcept : object_{std::addressof(a)}, table_{&table_for<A>} {}

  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref s) const {
    return table_->allocate(object_, bytes, alignment, s);
  }
  void deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref s) const noexcept {
    table_->deallocate(object_, p, bytes, alignment, s);
  }
  [[nodiscard]] void* object() const noexcept { return object_; }

  friend bool operator==(const erased_stream_allocator_ref& a, const erased_stream_allocator_ref& b) noexcept {
    return a.object_ == b.object_;
  }

 private:
  struct table {
    void* (*allocate)(void*, std::size_t, std::size_t, stream_ref);
    void (*deallocate)(void*, void*, std::size_t, std::size_t, stream_ref) noexcept;
  };
  template <class A>
  static void* allocate_with(void* a, std::size_t bytes, std::size_t alignment, stream_ref s) {
    return static_cast<A*>(a)->allocate_async(bytes, alignment, s);
  }
  template <class A>
  static void deallocate_with(void* a, void* p, std::size_t bytes, std::size_t alignment, stream_ref s) noexcept {
    static_cast<A*>(a)->deallocate_async(p, bytes, alignment, s);
  }
  template <class A>
  static constexpr table table_for{&allocate_with<A>, &deallocate_with<A>};

  void* object_;
  const table* table_;
};

/// What Thrust's allocators ask of a pool: CUDA's allocation alignment, or the type's if larger
/// (a pool that cannot honour it says so with `mgm::logic_error`).
template <class T>
inline constexpr std::size_t thrust_alignment = alignof(T) > cuda_allocation_alignment ? alignof(T)
                                                                                       : cuda_allocation_alignment;

}  // namespace detail

/// @brief A Thrust container allocator whose memory comes from a pool, stream-ordered on one
/// stream: `thrust::device_vector<T, mgm::thrust_allocator<T>> v(n, mgm::thrust_allocator<T>{pool, s})`.
/// @tparam T the element type.
/// @throws from `allocate`: what the pool throws (`mgm::out_of_memory`, ...); `std::bad_alloc`
///   when `n * sizeof(T)` overflows.
/// **Thread safety:** that of the pool. **Device affinity:** the pool's; Thrust runs its kernels
/// on the current device, so make the pool's device current (`mgm::scoped_device`).
template <class T>
class thrust_allocator {
 public:
  using value_type = T;
  using pointer = thrust::device_ptr<T>;
  using const_pointer = thrust::device_ptr<const T>;
  using reference = thrust::device_reference<T>;
  using const_reference = thrust::device_reference<const T>;
  using size_type = std::size_t;
  using difference_type = std::ptrdiff_t;

  template <class U>
  struct rebind {
    using other = thrust_allocator<U>;
  };

  /// @brief Memory from `pool` (held by pointer), stream-ordered on `stream`.
  template <stream_allocator A>
  explicit thrust_allocator(A& pool, stream_ref stream = {}) noexcept : pool_{pool}, stream_{stream} {}
  /// @brief Memory from the object `pool` refers to (not from the ref, a temporary).
  template <stream_allocator A>
  explicit thrust_allocator(allocator_ref<A> pool, stream_ref stream = {}) noexcept
      : pool_{pool.get()}, stream_{stream} {}
  /// @brief The same pool and stream, for another element type (rebinding).
  template <class U>
  thrust_allocator(const thrust_allocator<U>& other) noexcept  // NOLINT: implicit, as allocators convert
      : pool_{other.pool_}, stream_{other.stream_} {}

  [[nodiscard]] pointer allocate(size_type n) {
    if (n > max_size()) throw std::bad_alloc{};
    return pointer{static_cast<T*>(pool_.allocate_async(n * sizeof(T), detail::thrust_alignment<T>, stream_))};
  }
  void deallocate(pointer p, size_type n) noexcept {
    pool_.deallocate_async(thrust::raw_pointer_cast(p), n * sizeof(T), detail::thrust_alignment<T>, stream_);
  }
  [[nodiscard]] size_type max_size() const noexcept { return std::numeric_limits<size_type>::max() / sizeof(T); }

  /// @brief The stream allocations are ordered on.
  [[nodiscard]] stream_ref stream() const noexcept { return stream_; }
  /// @brief The pool, as an opaque address (for comparisons and logs).
  [[nodiscard]] const void* pool() const noexcept { return pool_.object(); }

  /// Equal when memory from one can be freed by the other: the same pool, whatever the stream.
  template <class U>
  [[nodiscard]] bool operator==(const thrust_allocator<U>& other) const noexcept {
    return pool_ == other.pool_;
  }

 private:
  template <class>
  friend class thrust_allocator;

  detail::erased_stream_allocator_ref pool_;
  stream_ref stream_;
};

/// @brief Scratch memory of Thrust's algorithms from a pool:
/// `thrust::sort(thrust::cuda::par(alloc).on(stream), first, last)` with
/// `mgm::thrust_temporary_allocator alloc{pool, stream}` (the same stream in both places). The
/// scratch is freed stream-ordered on that stream when the algorithm returns, and reused by the
/// next algorithm at once, without a cudaMalloc or a synchronisation.
/// @throws from `allocate`: what the pool throws; mgm::logic_error for a negative size.
/// **Thread safety:** that of the pool. **Device affinity:** the pool's.
class thrust_temporary_allocator {
 public:
  using value_type = char;
  using size_type = std::size_t;

  template <stream_allocator A>
  explicit thrust_temporary_allocator(A& pool, stream_ref stream = {}) noexcept : pool_{pool}, stream_{stream} {}
  template <stream_allocator A>
  explicit thrust_temporary_allocator(allocator_ref<A> pool, stream_ref stream = {}) noexcept
      : pool_{pool.get()}, stream_{stream} {}

  [[nodiscard]] char* allocate(std::ptrdiff_t bytes) {
    MGM_EXPECTS(bytes >= 0, "thrust_temporary_allocator: a negative size");
    return static_cast<char*>(
        pool_.allocate_async(static_cast<std::size_t>(bytes), cuda_allocation_alignment, stream_));
  }
  void deallocate(char* p, std::size_t bytes) noexcept {
    pool_.deallocate_async(p, bytes, cuda_allocation_alignment, stream_);
  }

  [[nodiscard]] stream_ref stream() const noexcept { return stream_; }
  [[nodiscard]] const void* pool() const noexcept { return pool_.object(); }

  friend bool operator==(const thrust_temporary_allocator& a, const thrust_temporary_allocator& b) noexcept {
    return a.pool_ == b.pool_;
  }

 private:
  detail::erased_stream_allocator_ref pool_;
  stream_ref stream_;
};

}  // namespace mgm
