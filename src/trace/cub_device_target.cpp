// CUB's CachingDeviceAllocator on a real GPU, for `replay_on_device(..., "cub")`: CUB's cudaMalloc
// and cudaFree go through counting, timing wrappers (by macro, in this one file); its other CUDA
// calls (events, devices) are the real ones.
#include <cuda_runtime_api.h>

#include "replay_target.hpp"

#include <mgm/error.hpp>

#include <algorithm>
#include <unordered_map>

namespace mgm_cub_device_shim {

thread_local mgm::detail::upstream_counters* counters = nullptr;
thread_local std::unordered_map<void*, std::size_t>* sizes = nullptr;

inline cudaError_t malloc(void** p, std::size_t bytes) {
  const auto t0 = std::chrono::steady_clock::now();
  const cudaError_t e = ::cudaMalloc(p, bytes);
  counters->time += std::chrono::steady_clock::now() - t0;
  ++counters->mallocs;
  if (e == cudaSuccess) {
    (*sizes)[*p] = bytes;
    counters->live_bytes += bytes;
    counters->peak_bytes = std::max(counters->peak_bytes, counters->live_bytes);
  }
  return e;
}
inline cudaError_t free(void* p) {
  const auto t0 = std::chrono::steady_clock::now();
  const cudaError_t e = ::cudaFree(p);
  counters->time += std::chrono::steady_clock::now() - t0;
  ++counters->frees;
  if (auto it = sizes->find(p); it != sizes->end()) {
    counters->live_bytes -= it->second;
    sizes->erase(it);
  }
  return e;
}

}  // namespace mgm_cub_device_shim

#define cudaMalloc mgm_cub_device_shim::malloc
#define cudaFree mgm_cub_device_shim::free
#define CUB_WRAPPED_NAMESPACE mgm_device_cub
#include <cub/util_allocator.cuh>

namespace mgm::detail {
namespace {

class cub_device_target final : public replay_target {
 public:
  cub_device_target(device_id d, upstream_counters& c) : device_{d}, counters_{c} {
    bind();
    allocator_ = std::make_unique<mgm_device_cub::cub::CachingDeviceAllocator>(2u, 8u, 28u);
  }
  ~cub_device_target() override {
    bind();
    allocator_.reset();  // frees its cached blocks: counted too
  }
  void* allocate(std::size_t bytes, stream_ref s) override {
    bind();
    void* p = nullptr;
    const cudaError_t status = allocator_->DeviceAllocate(device_.value(), &p, bytes, s.get());
    return cub_allocation(status, p, bytes);
  }
  void deallocate(void* p, std::size_t, stream_ref) noexcept override {
    bind();
    (void)allocator_->DeviceFree(device_.value(), p);
  }

 private:
  void bind() noexcept {
    mgm_cub_device_shim::counters = &counters_;
    mgm_cub_device_shim::sizes = &sizes_;
  }
  device_id device_;
  upstream_counters& counters_;
  std::unordered_map<void*, std::size_t> sizes_;
  std::unique_ptr<mgm_device_cub::cub::CachingDeviceAllocator> allocator_;
};

}  // namespace

void* cub_allocation(cudaError_t status, void* p, std::size_t bytes) {
  if (status == cudaSuccess) return p;
  (void)cudaGetLastError();  // the real runtime's: CUB may have left its error there
  if (status == cudaErrorMemoryAllocation) {
    throw out_of_memory{"cub::CachingDeviceAllocator: out of memory allocating " + std::to_string(bytes) + " bytes", bytes};
  }
  throw cuda_error{status, "cub::CachingDeviceAllocator::DeviceAllocate failed"};
}

std::unique_ptr<replay_target> make_cub_device_target(device_id d, upstream_counters& counters) {
  return std::make_unique<cub_device_target>(d, counters);
}

}  // namespace mgm::detail
