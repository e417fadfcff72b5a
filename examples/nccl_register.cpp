// A pooled buffer registered with NCCL (ncclCommRegister), then reduced in place across every GPU
// of the machine, one rank per GPU in this process.
//
// NCCL registers user buffers that follow its "qualified allocator" rules: physical memory made
// with POSIX-descriptor (and, where supported, fabric) handles, at the recommended granularity,
// its address and size aligned to it. A pool over `cuda_allocator{d, vmm_sharing::shareable}`
// with expandable segments makes exactly that, so the pool's segments can be registered once and
// sub-allocated (NCCL's "allocate a large chunk of buffer and register it once").
//
// What it shows: NCCL accepts the pooled buffers (ncclCommRegister succeeds; since NCCL 2.24 it
// registers plain cudaMalloc memory only with NCCL_LEGACY_CUDA_REGISTER=1), and the collective over
// them is right. Whether NCCL then takes its zero-copy path is NCCL's choice: NCCL_DEBUG=INFO says so. With
// one GPU the all-reduce is a copy.
//
// NCCL is opened at run time (libnccl.so.2), so the example builds against the toolkit's nccl.h
// alone. Usage: mgm_example_nccl_register. Exits 77 without a GPU or without NCCL.
#include <mgm/allocators/cuda_allocator.hpp>
#include <mgm/device.hpp>
#include <mgm/pool/caching_pool.hpp>

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <type_traits>
#include <vector>

namespace {

// NCCL's entry points, found in the library loaded at run time.
struct nccl_api {
  decltype(&ncclCommInitAll) init_all{};
  decltype(&ncclCommDestroy) destroy{};
  decltype(&ncclCommRegister) register_buffer{};
  decltype(&ncclCommDeregister) deregister{};
  decltype(&ncclAllReduce) all_reduce{};
  decltype(&ncclGroupStart) group_start{};
  decltype(&ncclGroupEnd) group_end{};
  decltype(&ncclGetErrorString) error_string{};
  decltype(&ncclGetVersion) version{};

  bool load(void* lib) {
    const auto find = [lib](auto& f, const char* name) {
      f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(lib, name));
      return f != nullptr;
    };
    return find(init_all, "ncclCommInitAll") && find(destroy, "ncclCommDestroy") &&
           find(register_buffer, "ncclCommRegister") && find(deregister, "ncclCommDeregister") &&
           find(all_reduce, "ncclAllReduce") && find(group_start, "ncclGroupStart") && find(group_end, "ncclGroupEnd") &&
           find(error_string, "ncclGetErrorString") && find(version, "ncclGetVersion");
  }
};

bool ok(const nccl_api& nccl, ncclResult_t r, const char* call) {
  if (r == ncclSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", call, nccl.error_string(r));
  return false;
}

}  // namespace

int main() {
  try {
    const int devices = mgm::device_count();
    if (devices == 0) {
      std::puts("no CUDA device here: nothing to register (skipped)");
      return 77;
    }
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    nccl_api nccl;
    if (lib == nullptr || !nccl.load(lib)) {
      std::printf("NCCL (libnccl.so.2) is not on this machine: %s (skipped)\n", lib == nullptr ? dlerror() : "entry points missing");
      return 77;
    }
    int version = 0;
    (void)nccl.version(&version);
    std::printf("NCCL %d, %d GPU(s), one rank each\n", version, devices);

    constexpr std::size_t count = std::size_t{8} << 20;  // floats per rank: 32 MiB
    std::vector<std::unique_ptr<mgm::caching_pool<mgm::cuda_allocator>>> pools;
    std::vector<float*> buffers;
    std::vector<cudaStream_t> streams(static_cast<std::size_t>(devices));
    mgm::pool_options o;
    o.expandable_segments = true;
    for (int d = 0; d < devices; ++d) {
      const mgm::scoped_device on{mgm::device_id{d}};
      pools.push_back(std::make_unique<mgm::caching_pool<mgm::cuda_allocator>>(
          mgm::cuda_allocator{mgm::device_id{d}, mgm::vmm_sharing::shareable}, o));
      if (!pools.back()->expandable()) {
        std::printf("GPU%d has no virtual memory management: its buffers are not NCCL-registrable (skipped)\n", d);
        return 77;
      }
      if (cudaStreamCreate(&streams[static_cast<std::size_t>(d)]) != cudaSuccess) return 1;
      auto* p = static_cast<float*>(pools.back()->allocate(count * sizeof(float)));
      std::vector<float> ones(count, 1.0F);
      if (cudaMemcpy(p, ones.data(), count * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) return 1;
      buffers.push_back(p);
    }

    std::vector<ncclComm_t> comms(static_cast<std::size_t>(devices));
    if (!ok(nccl, nccl.init_all(comms.data(), devices, nullptr), "ncclCommInitAll")) return 1;
    std::vector<void*> registrations(static_cast<std::size_t>(devices));
    for (int d = 0; d < devices; ++d) {
      const mgm::scoped_device on{mgm::device_id{d}};
      const auto i = static_cast<std::size_t>(d);
      if (!ok(nccl, nccl.register_buffer(comms[i], buffers[i], count * sizeof(float), &registrations[i]),
              "ncclCommRegister")) {
        return 1;
      }
    }
    std::printf("registered %d pooled buffer(s) of %zu MiB\n", devices, count * sizeof(float) >> 20);
    if (!ok(nccl, nccl.group_start(), "ncclGroupStart")) return 1;
    for (int d = 0; d < devices; ++d) {
      const auto i = static_cast<std::size_t>(d);
      if (!ok(nccl, nccl.all_reduce(buffers[i], buffers[i], count, ncclFloat, ncclSum, comms[i], streams[i]),
              "ncclAllReduce")) {
        return 1;
      }
    }
    if (!ok(nccl, nccl.group_end(), "ncclGroupEnd")) return 1;
    int wrong = 0;
    for (int d = 0; d < devices; ++d) {
      const mgm::scoped_device on{mgm::device_id{d}};
      const auto i = static_cast<std::size_t>(d);
      if (cudaStreamSynchronize(streams[i]) != cudaSuccess) return 1;
      float first = 0;
      float last = 0;
      (void)cudaMemcpy(&first, buffers[i], sizeof first, cudaMemcpyDeviceToHost);
      (void)cudaMemcpy(&last, buffers[i] + count - 1, sizeof last, cudaMemcpyDeviceToHost);
      if (first != static_cast<float>(devices) || last != static_cast<float>(devices)) ++wrong;
      (void)ok(nccl, nccl.deregister(comms[i], registrations[i]), "ncclCommDeregister");
    }
    for (auto c : comms) (void)nccl.destroy(c);
    for (int d = 0; d < devices; ++d) {
      const mgm::scoped_device on{mgm::device_id{d}};
      const auto i = static_cast<std::size_t>(d);
      pools[i]->deallocate(buffers[i], count * sizeof(float));
      (void)cudaStreamDestroy(streams[i]);
    }
    std::printf("all-reduce in place over the registered buffers: %s\n", wrong == 0 ? "every element right" : "WRONG");
    return wrong == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mgm_example_nccl_register: %s\n", e.what());
    return 1;
  }
}
