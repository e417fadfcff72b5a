/// @file
/// @brief The bridge to CCCL's `cuda::mr` memory-resource concepts (CUDA 13.0, CCCL 3.0).
///
/// CCCL 3.0 keeps `cuda::mr` behind `LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE`; define it
/// before including this header (and before any `<cuda/...>` header) to use our allocators where
/// a `cuda::mr::async_resource_ref<cuda::mr::device_accessible>` is expected. Without the macro
/// this header declares nothing.
///
/// What it does: maps each of our property tags onto CCCL's, with `get_property` overloads that
/// argument-dependent lookup finds for every allocator in `mgm` and `mgm::sim`. Our concepts already
/// have CCCL 3.0's shape (`allocate(bytes, alignment)`, `allocate_async(bytes, alignment,
/// stream)`, equality), and `mgm::stream_ref` converts from `cuda::stream_ref`.
/// CCCL 3.1 renamed the concepts (`resource` became stream-ordered, `synchronous_resource` the
/// old `resource`); this is the one place that will change for it.
#pragma once

#if defined(LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE)

#include <mgm/properties.hpp>

#include <cuda/memory_resource>
#include <cuda/stream_ref>

#include <concepts>

// The tag is a template parameter checked first, so that looking up our own tags never
// considers these overloads (which would make has_property depend on itself). They are declared
// in each namespace that holds allocators: nvcc's front end does not let argument-dependent
// lookup see them through a using-declaration.
#define MGM_DETAIL_CUDA_MR_BRIDGE                                                                   \
  template <class A, class Tag>                                                                   \
    requires std::same_as<Tag, ::cuda::mr::device_accessible> && ::mgm::has_property<A, ::mgm::device_accessible> \
  constexpr void get_property(const A&, Tag) noexcept {}                                          \
  template <class A, class Tag>                                                                   \
    requires std::same_as<Tag, ::cuda::mr::host_accessible> && ::mgm::has_property<A, ::mgm::host_accessible> \
  constexpr void get_property(const A&, Tag) noexcept {}

namespace mgm {
MGM_DETAIL_CUDA_MR_BRIDGE

/// @brief `A` is a CCCL 3.0 stream-ordered resource whose memory kernels can use.
template <class A>
concept cuda_mr_device_resource = ::cuda::mr::async_resource_with<A, ::cuda::mr::device_accessible>;
}  // namespace mgm

namespace mgm::sim {
MGM_DETAIL_CUDA_MR_BRIDGE
}  // namespace mgm::sim

#undef MGM_DETAIL_CUDA_MR_BRIDGE

#endif  // LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
