// CUB's CachingDeviceAllocator (CCCL 3.0's cub/util_allocator.cuh), replayed on the simulator:
// its nine CUDA calls are redirected by macro, in this one file, to the simulated machine's seams.
// The CUDA headers are included first, so the redirection touches CUB's code only and the real
// runtime stays usable in the same binary.
#include <cuda_runtime_api.h>

#include "replay_target.hpp"

#include <mgm/error.hpp>
#include <mgm/sim/machine.hpp>

#include <cstdint>

namespace mgm_cub_shim {

thread_local mgm::sim::machine* machine = nullptr;
thread_local int current = 0;

inline cudaEvent_t encode(mgm::sim::event e) {
  return reinterpret_cast<cudaEvent_t>(((std::uintptr_t{e.device} << 32) | e.slot) + 1);
}
inline mgm::sim::event decode(cudaEvent_t e) {
  const auto v = reinterpret_cast<std::uintptr_t>(e) - 1;
  return {static_cast<std::uint32_t>(v >> 32), static_cast<std::uint32_t>(v & 0xFFFFFFFFu)};
}

inline cudaError_t get_device(int* d) {
  *d = current;
  return cudaSuccess;
}
inline cudaError_t set_device(int d) {
  if (d < 0 || d >= machine->device_count()) return cudaErrorInvalidDevice;
  current = d;
  return cudaSuccess;
}
inline cudaError_t malloc(void** p, std::size_t bytes) {
  try {
    *p = machine->allocator(mgm::device_id{current}).allocate(bytes);
    return cudaSuccess;
  } catch (const mgm::out_of_memory&) {
    return cudaErrorMemoryAllocation;
  } catch (...) {
    return cudaErrorUnknown;
  }
}
inline cudaError_t free(void* p) {
  const auto owner = machine->owner_of(p);
  if (!owner) return cudaErrorInvalidValue;
  machine->allocator(*owner).deallocate(p, 0);
  return cudaSuccess;
}
inline cudaError_t event_create_with_flags(cudaEvent_t* e, unsigned int /*flags*/) {
  try {
    *e = encode(machine->streams().create_event(mgm::device_id{current}));
    return cudaSuccess;
  } catch (...) {
    return cudaErrorUnknown;
  }
}
inline cudaError_t event_record(cudaEvent_t e, cudaStream_t s) {
  try {
    machine->streams().record(decode(e), mgm::stream_ref{s});
    return cudaSuccess;
  } catch (...) {
    return cudaErrorInvalidResourceHandle;
  }
}
inline cudaError_t event_query(cudaEvent_t e) {
  try {
    return machine->streams().query(decode(e)) ? cudaSuccess : cudaErrorNotReady;
  } catch (...) {
    return cudaErrorInvalidResourceHandle;
  }
}
inline cudaError_t event_destroy(cudaEvent_t e) {
  machine->streams().destroy_event(decode(e));
  return cudaSuccess;
}
inline cudaError_t get_last_error() { return cudaSuccess; }

}  // namespace mgm_cub_shim

#define cudaGetDevice mgm_cub_shim::get_device
#define cudaSetDevice mgm_cub_shim::set_device
#define cudaMalloc mgm_cub_shim::malloc
#define cudaFree mgm_cub_shim::free
#define cudaEventCreateWithFlags mgm_cub_shim::event_create_with_flags
#define cudaEventRecord mgm_cub_shim::event_record
#define cudaEventQuery mgm_cub_shim::event_query
#define cudaEventDestroy mgm_cub_shim::event_destroy
#define cudaGetLastError mgm_cub_shim::get_last_error

// CUB in a namespace of its own here, so that this redirected copy never meets (and never breaks
// the one-definition rule with) the real CUB a program may also use.
#define CUB_WRAPPED_NAMESPACE mgm_sim_cub
#include <cub/util_allocator.cuh>

namespace mgm::detail {
namespace {

class cub_target final : public replay_target {
 public:
  cub_target(sim::machine& m, device_id d) : machine_{m}, device_{d} {
    bind();
    // Power-of-two bins from 256 B (2^8) to 256 MiB (2^28); larger blocks go straight to cudaMalloc.
    allocator_ = std::make_unique<mgm_sim_cub::cub::CachingDeviceAllocator>(2u, 8u, 28u);
  }
  ~cub_target() override {
    bind();
    allocator_.reset();
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
    mgm_cub_shim::machine = &machine_;
    mgm_cub_shim::current = device_.value();
  }
  sim::machine& machine_;
  device_id device_;
  std::unique_ptr<mgm_sim_cub::cub::CachingDeviceAllocator> allocator_;
};

}  // namespace

std::unique_ptr<replay_target> make_cub_target(sim::machine& m, device_id d) { return std::make_unique<cub_target>(m, d); }

}  // namespace mgm::detail
