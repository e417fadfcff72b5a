/// @file
/// @brief NVTX memory annotations of a pool: segments as heaps, handed-out blocks as regions.
///
/// With them, tools that read NVTX's memory extension (compute-sanitizer's memcheck, Nsight
/// Systems' memory view) see each pool block as an allocation of its own, instead of one large
/// cudaMalloc: an access past a block's requested bytes is reported even when it stays inside the
/// segment, and freed blocks read as freed.
///
/// - Built in only with the CMake option `MGM_NVTX=ON` (it defines `MGM_WITH_NVTX=1` for every
///   user of the library). Otherwise every function here is an empty inline one: the pool's hit
///   path compiles to what it was.
/// - NVTX3 is header-only. With no tool attached (no `NVTX_INJECTION64_PATH`), the first call
///   marks the extension disabled and each later call is one load and one branch in NVTX, and
///   `nvtxMemHeapRegister` returns a "no tool" handle: no heap is recorded here, so the region
///   calls return after one relaxed atomic load without calling NVTX at all.
/// - Heaps: `register_heap(base, bytes)` on each upstream segment (or expandable range) the pool
///   takes; `unregister_heap(base)` before giving it back. Unregistering a heap drops its regions.
/// - Regions: `register_region(p, bytes)` on each block handed out (the requested bytes, not the
///   rounded block); `unregister_region(p)` when it is freed.
/// - The heaps of every pool of the process live in one registry (address to NVTX handle), so that
///   a region finds its heap without the pool storing anything.
///
/// **Thread safety:** safe; one mutex, taken only while a tool is attached. The pool calls these
/// under its own mutex; this mutex never waits for a pool's (lock order: pool, then registry).
#pragma once

#include <cstddef>

#if defined(MGM_WITH_NVTX) && MGM_WITH_NVTX
#include <nvtx3/nvToolsExtMem.h>

#include <atomic>
#include <cstdint>
#include <iterator>
#include <map>
#include <mutex>
#endif

namespace mgm::detail::nvtx {

#if defined(MGM_WITH_NVTX) && MGM_WITH_NVTX

/// @brief Whether the annotations are compiled in.
inline constexpr bool enabled = true;

/// The domain every annotation of MultiGpuMem goes to ("MultiGpuMem" in the tools).
inline nvtxDomainHandle_t domain() noexcept {
  static const nvtxDomainHandle_t d = nvtxDomainCreateA("MultiGpuMem");
  return d;
}

struct heap_entry {
  std::size_t bytes;
  nvtxMemHeapHandle_t handle;
};

struct heap_registry {
  std::mutex mutex;
  std::map<std::uintptr_t, heap_entry> heaps;  // by base address
  std::atomic<std::size_t> count{0};           // heaps.size(), read without the lock
};

/// Never destroyed: pools with static storage duration may release segments after main().
inline heap_registry& registry() noexcept {
  static heap_registry* const r = new heap_registry;
  return *r;
}

/// NVTX's `NVTX_MEM_HEAP_HANDLE_NO_TOOL` is a C cast of -1 that C++ rejects as a static_cast.
inline nvtxMemHeapHandle_t no_tool_heap() noexcept {
  return reinterpret_cast<nvtxMemHeapHandle_t>(static_cast<std::intptr_t>(-1));
}

inline void register_heap(const void* base, std::size_t bytes) noexcept {
  nvtxMemVirtualRangeDesc_t range{};
  range.size = bytes;
  range.ptr = base;
  nvtxMemHeapDesc_t desc{};
  desc.extCompatID = NVTX_EXT_COMPATID_MEM;
  desc.structSize = sizeof desc;
  desc.usage = NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR;
  desc.type = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
  desc.typeSpecificDescSize = sizeof range;
  desc.typeSpecificDesc = &range;
  desc.messageType = NVTX_MESSAGE_TYPE_ASCII;
  desc.message.ascii = "mgm::caching_pool segment";
  const nvtxMemHeapHandle_t h = nvtxMemHeapRegister(domain(), &desc);
  if (h == nullptr || h == no_tool_heap()) return;  // no tool attached: nothing to remember
  try {
    heap_registry& r = registry();
    const std::lock_guard lock{r.mutex};
    r.heaps.insert_or_assign(reinterpret_cast<std::uintptr_t>(base), heap_entry{bytes, h});
    r.count.store(r.heaps.size(), std::memory_order_relaxed);
  } catch (...) {  // no memory for the record: the heap stays registered, its blocks unannotated
  }
}

inline void unregister_heap(const void* base) noexcept {
  heap_registry& r = registry();
  if (r.count.load(std::memory_order_relaxed) == 0) return;
  nvtxMemHeapHandle_t h = nullptr;
  {
    const std::lock_guard lock{r.mutex};
    const auto it = r.heaps.find(reinterpret_cast<std::uintptr_t>(base));
    if (it == r.heaps.end()) return;
    h = it->second.handle;
    r.heaps.erase(it);
    r.count.store(r.heaps.size(), std::memory_order_relaxed);
  }
  nvtxMemHeapUnregister(domain(), h);
}

inline void register_region(const void* p, std::size_t bytes) noexcept {
  heap_registry& r = registry();
  if (r.count.load(std::memory_order_relaxed) == 0) return;  // no tool, or no heap of ours
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  nvtxMemHeapHandle_t heap = nullptr;
  {
    const std::lock_guard lock{r.mutex};
    auto it = r.heaps.upper_bound(addr);
    if (it == r.heaps.begin()) return;
    it = std::prev(it);
    if (addr - it->first >= it->second.bytes) return;
    heap = it->second.handle;
  }
  nvtxMemVirtualRangeDesc_t range{};
  range.size = bytes;
  range.ptr = p;
  nvtxMemRegionsRegisterBatch_t batch{};
  batch.extCompatID = NVTX_EXT_COMPATID_MEM;
  batch.structSize = sizeof batch;
  batch.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
  batch.heap = heap;
  batch.regionCount = 1;
  batch.regionDescElementSize = sizeof range;
  batch.regionDescElements = &range;
  batch.regionHandleElementsOut = nullptr;  // virtual-address regions are referred to by pointer
  nvtxMemRegionsRegister(domain(), &batch);
}

inline void unregister_region(const void* p) noexcept {
  if (registry().count.load(std::memory_order_relaxed) == 0) return;
  nvtxMemRegionRef_t ref{};
  ref.pointer = p;
  nvtxMemRegionsUnregisterBatch_t batch{};
  batch.extCompatID = NVTX_EXT_COMPATID_MEM;
  batch.structSize = sizeof batch;
  batch.refType = NVTX_MEM_REGION_REF_TYPE_POINTER;
  batch.refCount = 1;
  batch.refElementSize = sizeof ref;
  batch.refElements = &ref;
  nvtxMemRegionsUnregister(domain(), &batch);
}

#else  // MGM_WITH_NVTX

inline constexpr bool enabled = false;

// Empty: the pool's calls compile to nothing.
inline void register_heap(const void* /*base*/, std::size_t /*bytes*/) noexcept {}
inline void unregister_heap(const void* /*base*/) noexcept {}
inline void register_region(const void* /*p*/, std::size_t /*bytes*/) noexcept {}
inline void unregister_region(const void* /*p*/) noexcept {}

#endif  // MGM_WITH_NVTX

}  // namespace mgm::detail::nvtx
