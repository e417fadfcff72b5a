/// @file
/// @brief `allocator_ref<A>`: a copyable, non-owning handle to an allocator object.
#pragma once

#include <mgm/concepts.hpp>
#include <mgm/properties.hpp>
#include <mgm/stream.hpp>

#include <cstddef>
#include <memory>

namespace mgm {

namespace detail {
template <class A, bool = platform_allocator<A>>
struct ref_platform {};
template <class A>
struct ref_platform<A, true> {
  using stream_ops_type = typename A::stream_ops_type;
};
}  // namespace detail

/// @brief Refers to an allocator that cannot be copied (a `caching_pool`), so that it can be
/// passed where a copyable allocator is expected (containers, `cuda::mr` refs, the adaptors).
/// Two refs are equal when they refer to the same object. The object must outlive the refs.
/// @tparam A an `mgm::allocator`.
/// **Thread safety:** that of `A`.
template <allocator A>
class allocator_ref : public detail::ref_platform<A> {
 public:
  explicit allocator_ref(A& a) noexcept : a_{std::addressof(a)} {}

  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = cuda_allocation_alignment) {
    return a_->allocate(bytes, alignment);
  }
  void deallocate(void* p, std::size_t bytes, std::size_t alignment = cuda_allocation_alignment) noexcept {
    a_->deallocate(p, bytes, alignment);
  }
  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref s)
    requires stream_allocator<A>
  {
    return a_->allocate_async(bytes, alignment, s);
  }
  void deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref s) noexcept
    requires stream_allocator<A>
  {
    a_->deallocate_async(p, bytes, alignment, s);
  }
  [[nodiscard]] auto stream_ops() const
    requires platform_allocator<A>
  {
    return a_->stream_ops();
  }

  [[nodiscard]] A& get() const noexcept { return *a_; }

  friend bool operator==(const allocator_ref& x, const allocator_ref& y) noexcept { return x.a_ == y.a_; }
  template <class P>
    requires has_property<A, P>
  friend auto get_property(const allocator_ref& r, P tag) noexcept {
    return get_property(*r.a_, tag);
  }

 private:
  A* a_;
};

}  // namespace mgm
