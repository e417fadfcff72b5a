// The CUDA leaf allocators and seams on a real device (label gpu).
#include "conformance.hpp"
#include "gpu/skip.hpp"

#include <mgm/allocators/cuda_allocator.hpp>
#include <mgm/allocators/cuda_async_allocator.hpp>
#include <mgm/allocators/managed_allocator.hpp>
#include <mgm/allocators/pinned_host_allocator.hpp>
#include <mgm/device.hpp>
#include <mgm/platform/cuda_peer_ops.hpp>
#include <mgm/platform/cuda_stream_ops.hpp>
#include <mgm/platform/cuda_vmm_ops.hpp>
#include <mgm/pool/caching_pool.hpp>
#include <mgm/pool/imported_block.hpp>
#include <mgm/pool/shared_block.hpp>
#include <mgm/telemetry/nvml.hpp>
#include <mgm/telemetry/source.hpp>
#include <mgm/trace/replay.hpp>
#include <mgm/trace/trace.hpp>

#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <sstream>
#include <tuple>
#include <vector>

// Defined in nvcc_headers.cu: fills n bytes with `value` in a kernel and waits for it.
void mgm_test_fill_on_device(void* p, std::size_t n, unsigned char value);

namespace {

void touch_device(void* p, std::size_t bytes) {
  mgm_test_fill_on_device(p, bytes, 0x3C);
  unsigned char first = 0;
  unsigned char last = 0;
  REQUIRE(cudaMemcpy(&first, p, 1, cudaMemcpyDeviceToHost) == cudaSuccess);
  REQUIRE(cudaMemcpy(&last, static_cast<unsigned char*>(p) + bytes - 1, 1, cudaMemcpyDeviceToHost) == cudaSuccess);
  REQUIRE(first == 0x3C);
  REQUIRE(last == 0x3C);
}

struct stream_holder {
  cudaStream_t s{};
  stream_holder() { REQUIRE(cudaStreamCreate(&s) == cudaSuccess); }
  ~stream_holder() { (void)cudaStreamDestroy(s); }
};

struct cuda_fixture {
  using allocator_type = mgm::cuda_allocator;
  static constexpr bool exact_oom = true;
  static constexpr bool stream_ordered = true;
  stream_holder h;
  allocator_type make() { return allocator_type{mgm::device_id{0}}; }
  mgm::stream_ref stream() { return h.s; }
  void touch(void* p, std::size_t n) { touch_device(p, n); }
};
struct async_fixture {
  using allocator_type = mgm::cuda_async_allocator;
  static constexpr bool exact_oom = false;  // the driver may answer SIZE_MAX with another error
  static constexpr bool stream_ordered = true;
  stream_holder h;
  allocator_type make() { return allocator_type{mgm::device_id{0}}; }
  mgm::stream_ref stream() { return h.s; }
  void touch(void* p, std::size_t n) {
    REQUIRE(cudaStreamSynchronize(h.s) == cudaSuccess);
    touch_device(p, n);
  }
};
struct pinned_fixture {
  using allocator_type = mgm::pinned_host_allocator;
  static constexpr bool exact_oom = false;
  static constexpr bool stream_ordered = true;
  stream_holder h;
  allocator_type make() { return allocator_type{mgm::device_id{0}}; }
  mgm::stream_ref stream() { return h.s; }
  void touch(void* p, std::size_t n) {
    std::memset(p, 0x11, n);
    touch_device(p, n);  // mapped: a kernel reaches it too
  }
};
struct managed_fixture {
  using allocator_type = mgm::managed_allocator;
  static constexpr bool exact_oom = false;
  static constexpr bool stream_ordered = true;
  stream_holder h;
  allocator_type make() { return allocator_type{mgm::device_id{0}}; }
  mgm::stream_ref stream() { return h.s; }
  void touch(void* p, std::size_t n) {
    touch_device(p, n);
    REQUIRE(static_cast<unsigned char*>(p)[n - 1] == 0x3C);  // and the host reads it
  }
};

using cuda_fixtures = std::tuple<cuda_fixture, async_fixture, pinned_fixture, managed_fixture>;

}  // namespace

MGM_CONFORMANCE_SUITE("cuda", cuda_fixtures)

TEST_CASE("cudaMalloc failure is out_of_memory naming the size", "[gpu]") {
  mgm::cuda_allocator a{mgm::device_id{0}};
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  try {
    (void)a.allocate(total * 2);
    FAIL("no exception");
  } catch (const mgm::out_of_memory& e) {
    REQUIRE(e.requested_bytes() == total * 2);
    REQUIRE(std::string{e.what()}.find("device 0") != std::string::npos);
  }
  REQUIRE(cudaGetLastError() == cudaSuccess);
  a.deallocate(a.allocate(1024), 1024);
}

TEST_CASE("a device out of range is a clear error", "[gpu]") {
  const int n = mgm::device_count();
  mgm::cuda_allocator a{mgm::device_id{n + 3}};
  try {
    (void)a.allocate(256);
    FAIL("no exception");
  } catch (const mgm::cuda_error& e) {
    REQUIRE(e.code() == cudaErrorInvalidDevice);
  }
  REQUIRE(mgm::current_device() == mgm::device_id{0});  // unchanged
}

TEST_CASE("scoped_device switches and restores", "[gpu]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  const int last = mgm::device_count() - 1;
  {
    const mgm::scoped_device on{mgm::device_id{last}};
    REQUIRE(mgm::current_device() == mgm::device_id{last});
  }
  REQUIRE(mgm::current_device() == mgm::device_id{0});
}

TEST_CASE("the CUDA stream seam: events order streams", "[gpu]") {
  mgm::cuda_stream_ops ops;
  stream_holder a;
  stream_holder b;
  auto e = ops.create_event(mgm::device_id{0});
  REQUIRE(ops.query(e));
  ops.record(e, a.s);
  ops.wait(b.s, e);
  ops.synchronize(e);
  REQUIRE(ops.query(e));
  REQUIRE_FALSE(ops.is_capturing(a.s));
  REQUIRE(cudaStreamBeginCapture(a.s, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  REQUIRE(ops.is_capturing(a.s));
  cudaGraph_t g{};
  REQUIRE(cudaStreamEndCapture(a.s, &g) == cudaSuccess);
  (void)cudaGraphDestroy(g);
  ops.destroy_event(e);
}

TEST_CASE("the CUDA virtual-memory seam maps granules", "[gpu]") {
  mgm::cuda_vmm_ops vmm;
  const mgm::device_id d{0};
  if (!vmm.supported(d)) {
    WARN("device 0 does not support virtual memory management");
    return;
  }
  const std::size_t g = vmm.granularity(d);
  REQUIRE(g > 0);
  void* va = vmm.reserve(d, 4 * g);
  const auto h = vmm.create(d, 2 * g);
  vmm.map(va, 2 * g, h);
  const std::vector<mgm::device_id> readers{d};
  vmm.set_access(va, 2 * g, readers);
  touch_device(va, 2 * g);
  vmm.unmap(va, 2 * g);
  vmm.release(h);
  vmm.unreserve(va, 4 * g);
}

TEST_CASE("the CUDA peer seam: already enabled is success", "[gpu]") {
  mgm::cuda_peer_ops peers;
  REQUIRE(peers.can_access(mgm::device_id{0}, mgm::device_id{0}));
  if (mgm::device_count() < 2 || !peers.can_access(mgm::device_id{0}, mgm::device_id{1})) {
    mgm_gpu_test::skip("fewer than two peer-capable devices");
    return;
  }
  peers.enable(mgm::device_id{0}, mgm::device_id{1});
  REQUIRE_NOTHROW(peers.enable(mgm::device_id{0}, mgm::device_id{1}));
  REQUIRE(cudaGetLastError() == cudaSuccess);
  peers.disable(mgm::device_id{0}, mgm::device_id{1});
}

TEST_CASE("the CUDA peer seam's copy: host to GPU to GPU and back, done when it returns", "[gpu]") {
  mgm::cuda_peer_ops peers;
  const std::size_t n = 1 << 20;
  std::vector<unsigned char> host(n, 0x3C);
  std::vector<unsigned char> back(n, 0);
  const int last = mgm::device_count() - 1;  // the second GPU where there is one, else GPU0 again
  void* a = nullptr;
  void* b = nullptr;
  {
    const mgm::scoped_device on{mgm::device_id{0}};
    REQUIRE(cudaMalloc(&a, n) == cudaSuccess);
  }
  {
    const mgm::scoped_device on{mgm::device_id{last}};
    REQUIRE(cudaMalloc(&b, n) == cudaSuccess);
  }
  peers.copy(a, mgm::device_id{0}, host.data(), mgm::device_id::host(), n, {});
  peers.copy(b, mgm::device_id{last}, a, mgm::device_id{0}, n, {});  // cudaMemcpyPeerAsync (staged without P2P)
  peers.copy(back.data(), mgm::device_id::host(), b, mgm::device_id{last}, n, {});
  REQUIRE(back == host);
  REQUIRE(cudaFree(a) == cudaSuccess);
  REQUIRE(cudaFree(b) == cudaSuccess);
}

TEST_CASE("a trace replays on the GPU through the pool, cudaMalloc and cudaMallocAsync", "[gpu][trace]") {
  std::istringstream in{"Thread,Time,Action,Pointer,Size,Stream\n"
                        "1,00:00:00.000000,allocate,0x1000,3145728,0\n"
                        "1,00:00:00.000001,allocate,0x2000,1048576,0\n"
                        "1,00:00:00.000002,free,0x1000,3145728,0\n"
                        "1,00:00:00.000003,allocate,0x3000,4194304,0\n"
                        "1,00:00:00.000004,free,0x2000,1048576,0\n"
                        "1,00:00:00.000005,free,0x3000,4194304,0\n"};
  const auto t = mgm::read_rmm_csv(in, "six").compile();
  mgm::replay_options o;
  o.iterations = 4;
  const auto pool = mgm::replay_on_device(t, "pool", o);
  REQUIRE(pool.upstream_allocations >= 1);
  REQUIRE(pool.peak_live_bytes == 5u << 20);
  const auto direct = mgm::replay_on_device(t, "direct", o);
  REQUIRE(direct.upstream_allocations == 12);
  REQUIRE(direct.measured_upstream_seconds.has_value());
  REQUIRE(*direct.measured_upstream_seconds > 0.0);
  REQUIRE(mgm::replay_on_device(t, "async", o).events == 6);
  REQUIRE(pool.to_json().find("\"allocator\":\"pool\"") != std::string::npos);
  // CUB's caching allocator on the real driver: it caches, so after the first iteration no calls.
  const auto cub = mgm::replay_on_device(t, "cub", o);
  REQUIRE(cub.upstream_allocations >= 1);
  REQUIRE(cub.upstream_allocations < 12);
  REQUIRE(cub.upstream_calls_after_first_iteration == 0);
  REQUIRE(cub.peak_reserved_bytes >= cub.peak_live_bytes);
}

TEST_CASE("expandable segments on the real driver: granules mapped, written, unmapped on release", "[gpu][pool]") {
  const mgm::device_id d{0};
  if (!mgm::cuda_vmm_ops{}.supported(d)) {
    WARN("device 0 does not support virtual memory management");
    return;
  }
  mgm::pool_options o;
  o.expandable_segments = true;
  mgm::caching_pool<mgm::cuda_allocator> pool{mgm::cuda_allocator{d}, o};
  const auto before = mgm::memory_info(d);
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(pool.allocate(std::size_t{48} << 20));  // large: expandable
  for (void* b : blocks) touch_device(b, std::size_t{48} << 20);
  auto st = pool.statistics();
  REQUIRE(st.allocated_bytes.current == std::int64_t{4 * 48} << 20);
  REQUIRE(st.reserved_bytes.current >= st.allocated_bytes.current);
  REQUIRE(st.reserved_bytes.current < st.allocated_bytes.current + (std::int64_t{8} << 20));  // granules, not 20 MiB rounding
  const auto during = mgm::memory_info(d);
  REQUIRE(before.free_bytes - during.free_bytes >= std::size_t{4 * 48} << 20);
  for (void* b : blocks) pool.deallocate(b, std::size_t{48} << 20);
  pool.release();
  st = pool.statistics();
  REQUIRE(st.reserved_bytes.current == 0);
  const auto after = mgm::memory_info(d);
  REQUIRE(after.free_bytes + (std::size_t{4} << 20) >= before.free_bytes);  // the driver got it back
}

// A capture in the default global mode: the pool takes its private segment under the relaxed
// mode (a plain cudaMalloc would invalidate the capture), the graph replays into its own memory,
// and the memory comes back only after the graph is destroyed and the pool released.
TEST_CASE("a CUDA graph capture allocates from a private pool on the real driver", "[gpu][pool][graph]") {
  const mgm::device_id d{0};
  mgm::caching_pool<mgm::cuda_allocator> pool{mgm::cuda_allocator{d}, mgm::pool_options{}};
  stream_holder s;
  void* warm = pool.allocate_async(std::size_t{1} << 20, 256, mgm::stream_ref{s.s});
  pool.deallocate_async(warm, std::size_t{1} << 20, 256, mgm::stream_ref{s.s});
  REQUIRE(cudaStreamBeginCapture(s.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  REQUIRE(pool.stream_ops().capture_id(mgm::stream_ref{s.s}) != 0);
  void* g = pool.allocate_async(std::size_t{1} << 20, 256, mgm::stream_ref{s.s});
  REQUIRE(g != warm);  // the capture's own memory
  REQUIRE(cudaMemsetAsync(g, 1, std::size_t{1} << 20, s.s) == cudaSuccess);
  pool.deallocate_async(g, std::size_t{1} << 20, 256, mgm::stream_ref{s.s});
  const mgm::capture_pool_id id = pool.capture_pool_of(mgm::stream_ref{s.s});
  cudaGraph_t graph{};
  REQUIRE(cudaStreamEndCapture(s.s, &graph) == cudaSuccess);  // not invalidated
  cudaGraphExec_t exec{};
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  void* ordinary = pool.allocate_async(std::size_t{1} << 20, 256, mgm::stream_ref{s.s});
  REQUIRE(ordinary == warm);  // the shared cache's block, never the graph's
  REQUIRE(cudaGraphLaunch(exec, s.s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s.s) == cudaSuccess);
  pool.deallocate_async(ordinary, std::size_t{1} << 20, 256, mgm::stream_ref{s.s});
  REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  const auto reserved = pool.reserved_bytes();
  pool.release_capture_pool(id);
  REQUIRE(pool.reserved_bytes() < reserved);
  pool.check_invariants();
}

TEST_CASE("NVML on the real driver joins every CUDA device by bus id", "[gpu][telemetry]") {
  std::string why;
  auto lib = mgm::telemetry::nvml_library::acquire(&why);
  if (!lib) {
    WARN("NVML not available: " << why);
    return;
  }
  auto src = mgm::telemetry::make_nvml_source(&why);
  REQUIRE(src != nullptr);
  const auto batch = src->sample();
  REQUIRE(batch.size() >= static_cast<std::size_t>(mgm::device_count()));
  std::size_t joined = 0;
  for (const auto& s : batch) {
    if (!s.cuda_ordinal) continue;
    ++joined;
    const auto mem = mgm::memory_info(mgm::device_id{*s.cuda_ordinal});
    REQUIRE(s.memory_total.has_value());
    // NVML counts all of the memory, cudaMemGetInfo what the context can use: within 2 %.
    REQUIRE(static_cast<double>(mem.total_bytes) >= 0.97 * static_cast<double>(*s.memory_total));
    REQUIRE(s.temperature_c.has_value());
    REQUIRE_FALSE(s.uuid.empty());
  }
  REQUIRE(joined == static_cast<std::size_t>(mgm::device_count()));
}

// Shareable memory across two processes on the real driver: this process exports a pooled block
// (POSIX descriptors, recommended granularity), a second process (this program again, running the
// hidden case below) takes the descriptors with pidfd_getfd, maps them, checks the bytes and
// overwrites them; this process then sees the new bytes.
TEST_CASE("a pooled block exported to a second process on the real driver", "[gpu][pool][ipc]") {
  const mgm::device_id d{0};
  if (!mgm::cuda_vmm_ops{mgm::vmm_sharing::shareable}.supported(d)) {
    WARN("device 0 does not support POSIX-descriptor virtual memory");
    return;
  }
  mgm::pool_options o;
  o.expandable_segments = true;
  mgm::caching_pool<mgm::cuda_allocator> pool{mgm::cuda_allocator{d, mgm::vmm_sharing::shareable}, o};
  const std::size_t bytes = (std::size_t{40} << 20) + 4096;
  void* p = pool.allocate(bytes);
  std::vector<unsigned char> host(bytes);
  for (std::size_t i = 0; i < bytes; ++i) host[i] = static_cast<unsigned char>(i * 7 + 1);
  REQUIRE(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice) == cudaSuccess);
  const mgm::shared_block s = pool.export_block(p);
  REQUIRE_FALSE(s.chunks.empty());
  (void)mgm::allow_token_imports();  // the child takes our descriptors (Yama's ptrace_scope 1)
  const std::string token = mgm::shared_block_token(s);
  char self[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  REQUIRE(n > 0);
  const std::string cmd = "MGM_IPC_TOKEN='" + token + "' MGM_IPC_BYTES=" + std::to_string(bytes) + " '" +
                          std::string{self, static_cast<std::size_t>(n)} + "' 'gpu ipc child' 2>&1";
  const int status = std::system(cmd.c_str());
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  REQUIRE(cudaMemcpy(host.data(), p, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
  for (std::size_t i = 0; i < bytes; i += 4099) REQUIRE(host[i] == 0x5a);
  REQUIRE(host[bytes - 1] == 0x5a);
  pool.deallocate(p, bytes);
  pool.release();
}

TEST_CASE("gpu ipc child", "[.]") {
  const char* token = std::getenv("MGM_IPC_TOKEN");
  REQUIRE(token != nullptr);
  const std::size_t bytes = std::stoull(std::getenv("MGM_IPC_BYTES"));
  REQUIRE(cudaFree(nullptr) == cudaSuccess);  // the primary context, for the driver's cuMem calls
  const mgm::shared_block s = mgm::open_shared_block_token(token);
  const mgm::imported_block ib{mgm::cuda_vmm_ops{mgm::vmm_sharing::shareable}, s};
  std::vector<unsigned char> host(bytes);
  REQUIRE(cudaMemcpy(host.data(), ib.get(), bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
  std::vector<unsigned char> expect(bytes);
  for (std::size_t i = 0; i < bytes; ++i) expect[i] = static_cast<unsigned char>(i * 7 + 1);
  REQUIRE(host == expect);
  mgm_test_fill_on_device(ib.get(), bytes, 0x5a);
}
