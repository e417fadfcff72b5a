/// @file
/// @brief What every adaptor shares: forwarding to the upstream, its platform and properties.
#pragma once

#include <mgm/allocator_ref.hpp>
#include <mgm/concepts.hpp>
#include <mgm/properties.hpp>
#include <mgm/stream.hpp>

#include <cstddef>
#include <utility>

namespace mgm::detail {

/// An adaptor wraps an `Upstream` and sees every call: `Derived` implements
///   `void* on_allocate(std::size_t bytes, std::size_t alignment, stream_ref s, Call upstream_call)`
///   `void on_deallocate(void* p, std::size_t bytes, std::size_t alignment, stream_ref s, Call upstream_call) noexcept`
/// and the base provides the four allocator calls (the stream-ordered ones when the upstream has
/// them), the upstream's platform (`stream_ops_type`), and its properties.
template <class Derived, allocator Upstream>
class adaptor_base : public ref_platform<Upstream> {
 public:
  using upstream_type = Upstream;

  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = cuda_allocation_alignment) {
    return self().on_allocate(bytes, alignment, stream_ref{}, [&] { return upstream_.allocate(bytes, alignment); });
  }
  void deallocate(void* p, std::size_t bytes, std::size_t alignment = cuda_allocation_alignment) noexcept {
    self().on_deallocate(p, bytes, alignment, stream_ref{}, [&] { upstream_.deallocate(p, bytes, alignment); });
  }
  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref s)
    requires stream_allocator<Upstream>
  {
    return self().on_allocate(bytes, alignment, s, [&] { return upstream_.allocate_async(bytes, alignment, s); });
  }
  void deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref s) noexcept
    requires stream_allocator<Upstream>
  {
    self().on_deallocate(p, bytes, alignment, s, [&] { upstream_.deallocate_async(p, bytes, alignment, s); });
  }
  [[nodiscard]] auto stream_ops() const
    requires platform_allocator<Upstream>
  {
    return upstream_.stream_ops();
  }
  /// @brief The device's free memory as the upstream sees it, where it can tell.
  [[nodiscard]] std::size_t free_bytes() const
    requires requires(const Upstream& u) { u.free_bytes(); }
  {
    return upstream_.free_bytes();
  }

  [[nodiscard]] Upstream& upstream() noexcept { return upstream_; }
  [[nodiscard]] const Upstream& upstream() const noexcept { return upstream_; }

  template <class P>
    requires has_property<Upstream, P>
  friend auto get_property(const Derived& a, P tag) noexcept {
    return get_property(a.upstream_, tag);
  }

 protected:
  explicit adaptor_base(Upstream upstream) : upstream_{std::move(upstream)} {}
  Upstream upstream_;

 private:
  Derived& self() noexcept { return static_cast<Derived&>(*this); }
};

}  // namespace mgm::detail
