// The driver's documented rules for virtual memory, enforced by the simulator: every rule broken
// once through the sim's seam, and once through the real `cuda_vmm_ops` over a fake driver table
// that forwards to the sim. The pool's expandable segments then run over that real seam code.
#include <mgm/error.hpp>
#include <mgm/platform/cuda_vmm_ops.hpp>
#include <mgm/pool/caching_pool.hpp>
#include <mgm/pool/imported_block.hpp>
#include <mgm/sim/judged.hpp>
#include <mgm/sim/machine.hpp>

#include "log_capture.hpp"
#include "sizes.hpp"

#include <catch2/catch.hpp>

#include <cuda.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using mgm::device_id;
using mgm::sim::hazard_kind;

namespace {

// ---- a driver table over the simulator ------------------------------------------------------

mgm::sim::machine* g_sim = nullptr;  // the machine the fake driver forwards to (one test at a time)

// Runs a seam call; a thrown error or a new hazard becomes the driver's CUDA_ERROR_INVALID_VALUE.
CUresult guarded(const std::function<void()>& call) {
  const auto before = g_sim->hazards().size();
  try {
    call();
  } catch (const mgm::out_of_memory&) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception&) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return g_sim->hazards().size() > before ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

bool g_address_space_full = false;  // cuMemAddressReserve finds no room left
bool g_create_oom = false;          // cuMemCreate finds no memory
bool g_map_oom = false;             // cuMemMap finds no memory for its page tables
bool g_set_access_oom = false;      // nor cuMemSetAccess
bool g_peer_refused = false;        // cuMemSetAccess refuses device 1 as a reader (no peer path)
// Runs once, in the next cuMemCreate, before it creates: while a pool's growth has released its
// lock, so that a test can make another thread act in that window.
std::function<void()> g_during_create;
// Work on device 0 runs until this time (set by a test): a cuMemUnmap before it is counted, since
// the driver need not wait for work that still uses the memory, as cudaFree does.
std::optional<std::chrono::nanoseconds> g_work_until;
int g_unmaps_under_work = 0;
std::vector<device_id> g_last_readers;  // of the last cuMemSetAccess that succeeded

// Runs once, in the next cuMemAddressReserve, before it reserves (the pool's lock released).
std::function<void()> g_during_reserve;

CUresult fake_reserve(CUdeviceptr* ptr, size_t size, size_t, CUdeviceptr addr, unsigned long long flags) {
  if (addr != 0 || flags != 0) return CUDA_ERROR_NOT_SUPPORTED;
  if (g_during_reserve) std::exchange(g_during_reserve, nullptr)();
  if (g_address_space_full) return CUDA_ERROR_OUT_OF_MEMORY;
  return guarded([&] { *ptr = reinterpret_cast<CUdeviceptr>(g_sim->vmm().reserve(device_id{0}, size)); });
}
CUresult fake_address_free(CUdeviceptr ptr, size_t size) {
  return guarded([&] { g_sim->vmm().unreserve(reinterpret_cast<void*>(ptr), size); });
}
// What the shareable-memory tests set and look at.
struct fake_sharing_state {
  bool fabric_supported{false};   // CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED
  bool refuse_fabric{false};      // cuMemCreate refuses fabric handles (no IMEX channel)
  int creates{0};
  std::vector<CUmemAllocationProp> props;  // every cuMemCreate's properties
  std::optional<CUmemAllocationGranularity_flags> granularity_asked;
  std::map<int, CUmemGenericAllocationHandle> exported;  // descriptor -> handle (the caller closes it)
};
fake_sharing_state g_sharing;

CUresult fake_create(CUmemGenericAllocationHandle* h, size_t size, const CUmemAllocationProp* prop, unsigned long long) {
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (g_during_create) std::exchange(g_during_create, nullptr)();
  if (g_create_oom) return CUDA_ERROR_OUT_OF_MEMORY;
  ++g_sharing.creates;
  g_sharing.props.push_back(*prop);
  if (g_sharing.refuse_fabric && (prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_FABRIC) != 0) {
    return CUDA_ERROR_NOT_PERMITTED;
  }
  // Memory asked for with descriptors is the sim's shareable memory (a memfd), as the driver's is.
  const auto sharing = (prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0
                           ? mgm::vmm_sharing::shareable
                           : mgm::vmm_sharing::process_local;
  return guarded([&] { *h = g_sim->vmm(sharing).create(device_id{prop->location.id}, size); });
}
CUresult fake_release(CUmemGenericAllocationHandle h) {
  return guarded([&] { g_sim->vmm().release(h); });
}
CUresult fake_map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long) {
  if (offset != 0) return CUDA_ERROR_INVALID_VALUE;
  if (g_map_oom) return CUDA_ERROR_OUT_OF_MEMORY;
  return guarded([&] { g_sim->vmm().map(reinterpret_cast<void*>(ptr), size, h); });
}
CUresult fake_unmap(CUdeviceptr ptr, size_t size) {
  if (g_work_until && g_sim->now(device_id{0}) < *g_work_until) ++g_unmaps_under_work;
  return guarded([&] { g_sim->vmm().unmap(reinterpret_cast<void*>(ptr), size); });
}
CUresult fake_set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  std::vector<device_id> readers;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    readers.push_back(device_id{desc[i].location.id});
  }
  if (g_set_access_oom) return CUDA_ERROR_OUT_OF_MEMORY;
  if (g_peer_refused && std::find(readers.begin(), readers.end(), device_id{1}) != readers.end()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const CUresult r = guarded([&] { g_sim->vmm().set_access(reinterpret_cast<void*>(ptr), size, readers); });
  if (r == CUDA_SUCCESS) g_last_readers = readers;
  return r;
}
// The recommended granularity is twice the minimum here, so that a test can tell which was asked.
CUresult fake_granularity(size_t* g, const CUmemAllocationProp*, CUmemAllocationGranularity_flags which) {
  g_sharing.granularity_asked = which;
  *g = mgm::sim::vmm_ops::granule_bytes * (which == CU_MEM_ALLOC_GRANULARITY_RECOMMENDED ? 2 : 1);
  return CUDA_SUCCESS;
}
CUresult fake_export(void* out, CUmemGenericAllocationHandle h, CUmemAllocationHandleType type, unsigned long long) {
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_INVALID_VALUE;
  int fd = -1;
  if (const CUresult r = guarded([&] { fd = g_sim->vmm().export_handle(h); }); r != CUDA_SUCCESS) return r;
  g_sharing.exported[fd] = h;
  *static_cast<int*>(out) = fd;
  return CUDA_SUCCESS;
}
CUresult fake_import(CUmemGenericAllocationHandle* h, void* handle, CUmemAllocationHandleType type) {
  // As the driver: a new handle for the same memory, whatever process exported it.
  const auto fd = static_cast<int>(reinterpret_cast<std::intptr_t>(handle));
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_INVALID_VALUE;
  return guarded([&] { *h = g_sim->vmm().import_handle(fd); });
}
CUresult fake_error_name(CUresult r, const char** name) {
  *name = r == CUDA_ERROR_INVALID_VALUE ? "CUDA_ERROR_INVALID_VALUE" : r == CUDA_ERROR_OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUDA_ERROR_UNKNOWN";
  return CUDA_SUCCESS;
}
CUresult fake_device_get(CUdevice* d, int ordinal) {
  if (ordinal < 0 || ordinal >= g_sim->device_count()) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}
CUresult fake_device_attribute(int* value, CUdevice_attribute attribute, CUdevice) {
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED: *value = g_sharing.fabric_supported ? 1 : 0; break;
    default: *value = 0;
  }
  return CUDA_SUCCESS;
}

const mgm::cuda_vmm_driver& fake_driver() {
  static const mgm::cuda_vmm_driver table = [] {
    mgm::cuda_vmm_driver t;
    t.address_reserve = fake_reserve;
    t.address_free = fake_address_free;
    t.create = fake_create;
    t.release = fake_release;
    t.map = fake_map;
    t.unmap = fake_unmap;
    t.set_access = fake_set_access;
    t.granularity = fake_granularity;
    t.error_name = fake_error_name;
    t.device_get = fake_device_get;
    t.device_attribute = fake_device_attribute;
    t.export_shareable = fake_export;
    t.import_shareable = fake_import;
    return t;
  }();
  return table;
}

struct fake_driver_machine {
  mgm::sim::machine m{mgm::sim::parse_device_list("2x64MiB")};
  fake_driver_machine() {
    g_sim = &m;
    g_sharing = {};
  }
  ~fake_driver_machine() {
    g_sharing = {};
    g_address_space_full = false;
    g_create_oom = false;
    g_map_oom = false;
    g_set_access_oom = false;
    g_peer_refused = false;
    g_during_create = nullptr;
    g_during_reserve = nullptr;
    g_work_until.reset();
    g_unmaps_under_work = 0;
    g_last_readers.clear();
    g_sim = nullptr;
  }
};

// A simulated device whose virtual-memory seam is the real cuda_vmm_ops over the fake table: a
// pool over it runs its expandable segments through the code that runs on a GPU.
class fake_driver_device {
 public:
  using stream_ops_type = mgm::sim::stream_ops;
  using vmm_ops_type = mgm::cuda_vmm_ops;
  explicit fake_driver_device(mgm::sim::device_allocator inner,
                              mgm::vmm_sharing sharing = mgm::vmm_sharing::process_local)
      : inner_{inner}, sharing_{sharing} {}
  void* allocate(std::size_t b, std::size_t a = 256) { return inner_.allocate(b, a); }
  void deallocate(void* p, std::size_t b, std::size_t a = 256) noexcept { inner_.deallocate(p, b, a); }
  void* allocate_async(std::size_t b, std::size_t a, mgm::stream_ref s) { return inner_.allocate_async(b, a, s); }
  void deallocate_async(void* p, std::size_t b, std::size_t a, mgm::stream_ref s) noexcept {
    inner_.deallocate_async(p, b, a, s);
  }
  [[nodiscard]] stream_ops_type stream_ops() const noexcept { return inner_.stream_ops(); }
  [[nodiscard]] vmm_ops_type vmm_ops() const noexcept { return mgm::cuda_vmm_ops{fake_driver(), sharing_}; }
  [[nodiscard]] std::size_t total_bytes() const { return inner_.total_bytes(); }
  friend bool operator==(const fake_driver_device&, const fake_driver_device&) = default;
  friend void get_property(const fake_driver_device&, mgm::device_accessible) noexcept {}
  friend device_id get_property(const fake_driver_device& d, mgm::device_affinity) noexcept { return d.inner_.device(); }

 private:
  mgm::sim::device_allocator inner_;
  mgm::vmm_sharing sharing_;
};
static_assert(mgm::vmm_allocator<fake_driver_device>);

mgm::pool_options expandable_options() {
  mgm::pool_options o;
  o.expandable_segments = true;
  return o;
}

// The fake driver's machine and a pool with expandable segments on its device 0, over the real
// cuda_vmm_ops.
struct fake_driver_pool : fake_driver_machine {
  mgm::caching_pool<fake_driver_device> pool{fake_driver_device{m.allocator(device_id{0})}, expandable_options()};
};

// Hands out the start of a mapped range without ever granting access: breaks "access before use".
template <class Vmm>
struct no_access_allocator {
  Vmm vmm;
  void* va{nullptr};
  void* allocate(std::size_t, std::size_t = 256) { return va; }
  void deallocate(void*, std::size_t, std::size_t = 256) noexcept {}
  friend bool operator==(const no_access_allocator&, const no_access_allocator&) noexcept { return true; }
  friend device_id get_property(const no_access_allocator&, mgm::device_affinity) noexcept { return device_id{0}; }
};

// Breaks each rule once through `vmm` (the sim's seam or cuda_vmm_ops over the fake); `rejects`
// checks a call that may throw was refused.
template <class Vmm>
void breach_every_rule(mgm::sim::machine& m, Vmm vmm, const std::function<void(std::function<void()>)>& rejects) {
  const device_id d{0};
  mgm::test::log_capture log;
  std::size_t expected = 0;
  const auto one_more = [&](const char* rule) {
    INFO(rule);
    ++expected;
    REQUIRE(m.hazards().size() == expected);
    REQUIRE(m.hazards().back().kind == hazard_kind::vmm_contract);
  };
  void* va = vmm.reserve(d, 16 * MiB);
  auto* base = static_cast<std::byte*>(va);
  const auto h = vmm.create(d, 4 * MiB);

  // 1. Sizes and offsets are multiples of the granularity.
  rejects([&] { (void)vmm.create(d, 3 * MiB); });
  one_more("create of a size that is not a granule multiple");
  rejects([&] { vmm.map(base + MiB, 2 * MiB, h); });
  one_more("map at an offset that is not a granule multiple");
  // 2. Maps go only inside a reserved range, never over an existing mapping.
  rejects([&] { vmm.map(base + 14 * MiB, 4 * MiB, h); });
  one_more("map past the end of the reservation");
  vmm.map(base, 4 * MiB, h);
  const auto h2 = vmm.create(d, 2 * MiB);
  rejects([&] { vmm.map(base + 2 * MiB, 2 * MiB, h2); });
  one_more("map over a mapped range");
  // 3. Access is granted before use.
  {
    no_access_allocator<Vmm> raw{vmm, va};
    mgm::sim::judged judged{m, raw};
    REQUIRE_THROWS_AS(judged.allocate(MiB), mgm::sim::stream_hazard);
    one_more("memory handed out before set_access");
  }
  const std::vector<device_id> owner{d};
  vmm.set_access(va, 4 * MiB, owner);
  std::memset(va, 0x11, 4 * MiB);
  // 4. Only whole mapped ranges are unmapped.
  vmm.unmap(base, 2 * MiB);
  one_more("unmap of half a mapping");
  // 5. A handle is released only after it is unmapped.
  vmm.release(h);
  one_more("release of a mapped handle");
  // 6. A reserved range is freed only when nothing is mapped in it.
  vmm.unreserve(va, 16 * MiB);
  one_more("unreserve of a range with a mapping");
  REQUIRE(log.messages.size() >= 3);  // the noexcept calls say what they refused

  // The right order leaves nothing behind.
  vmm.unmap(base, 4 * MiB);
  vmm.release(h2);
  vmm.unreserve(va, 16 * MiB);
  REQUIRE(m.hazards().size() == expected);
  REQUIRE(m.memory(d).used_bytes == 0);
}

}  // namespace

TEST_CASE("vmm contract: every rule broken once through the simulator's seam", "[sim][vmm][judge]") {
  mgm::sim::machine m{mgm::sim::parse_device_list("2x64MiB")};
  breach_every_rule(m, m.vmm(), [](const std::function<void()>& call) {
    REQUIRE_THROWS_AS(call(), mgm::sim::stream_hazard);
  });
}

TEST_CASE("vmm contract: every rule broken once through cuda_vmm_ops over a fake driver table", "[sim][vmm][judge]") {
  fake_driver_machine f;
  const mgm::cuda_vmm_ops vmm{fake_driver()};
  REQUIRE(vmm.supported(device_id{0}));
  REQUIRE(vmm.granularity(device_id{0}) == 2 * MiB);
  REQUIRE_FALSE(vmm == mgm::cuda_vmm_ops{});  // another table than the driver's own
  breach_every_rule(f.m, vmm, [](const std::function<void()>& call) {
    try {
      call();
      FAIL("not refused");
    } catch (const mgm::cuda_error& e) {  // the driver's code, through cuda_vmm_ops' own translation
      REQUIRE(e.code() == cudaErrorInvalidValue);
      REQUIRE(std::string{e.what()}.find("CUDA_ERROR_INVALID_VALUE") != std::string::npos);
    }
  });
  // Out of memory is the driver's CUDA_ERROR_OUT_OF_MEMORY, and our out_of_memory.
  REQUIRE_THROWS_AS(vmm.create(device_id{1}, 128 * MiB), mgm::out_of_memory);
}

TEST_CASE("vmm contract: out of memory from cuMemMap or cuMemSetAccess is out_of_memory, and the pool undoes the growth and serves later", "[pool][vmm]") {
  for (bool* flag : {&g_map_oom, &g_set_access_oom}) {
    fake_driver_pool f;
    auto& pool = f.pool;
    INFO((flag == &g_map_oom ? "cuMemMap" : "cuMemSetAccess"));
    const std::size_t used_before = f.m.memory(device_id{0}).used_bytes;
    *flag = true;  // the fixture clears it
    REQUIRE_THROWS_AS(pool.allocate(16 * MiB), mgm::out_of_memory);  // before: a cuda_error, no reclaim, no handler
    CHECK(pool.statistics().ooms == 1);
    CHECK(pool.statistics().reserved_bytes.current == 0);            // the growth was undone: nothing counted as mapped
    CHECK(f.m.memory(device_id{0}).used_bytes == used_before);      // and no physical memory created was kept
    *flag = false;
    void* p = pool.allocate(16 * MiB);  // memory again: the same pool serves
    REQUIRE(p != nullptr);
    pool.deallocate(p, 16 * MiB);
    pool.release();
    CHECK(f.m.hazards().empty());
  }
}

TEST_CASE("vmm contract: a growth that fails while another thread unmaps its neighbour gives its range back merged",
          "[pool][vmm]") {
  // The growth releases the pool's lock around its driver calls. Meanwhile another thread frees
  // the block below the growing range and unmaps it; then cuMemCreate fails. The range given back
  // must merge with that neighbour: left apart, the two would never serve a request needing both.
  fake_driver_pool f;
  auto& pool = f.pool;
  void* x = pool.allocate(20 * MiB);  // the first growth maps exactly this (large requests are at least 20 MiB): x ends where the range's unmapped rest begins
  REQUIRE(pool.reserved_bytes() == 20 * MiB);
  g_during_create = [&] {
    std::thread other{[&] {
      pool.deallocate(x, 20 * MiB);
      (void)pool.release();  // unmaps x's granules, beside the range that is growing
    }};
    other.join();
    g_create_oom = true;  // and this growth fails, as does the pool's retry
  };
  REQUIRE_THROWS_AS(pool.allocate(24 * MiB), mgm::out_of_memory);
  REQUIRE(g_during_create == nullptr);  // the other thread ran inside the growth
  REQUIRE(pool.reserved_bytes() == 0);
  REQUIRE_NOTHROW(pool.check_invariants());  // before acb1fbb: two unmapped neighbours that did not merge
  g_create_oom = false;
  void* y = pool.allocate(24 * MiB);  // the merged range serves from its start, where x was
  CHECK(y == x);
  pool.deallocate(y, 24 * MiB);
  (void)pool.release();
  CHECK(f.m.modelled(device_id{0}).count(mgm::sim::driver_call::reserve) == 1);
  CHECK(f.m.memory(device_id{0}).used_bytes == 0);
  CHECK(f.m.hazards().empty());
}

TEST_CASE("vmm contract: two misses at once on one stream reserve one range between them", "[pool][vmm]") {
  // The first miss releases the lock to reserve a range; another thread's miss on the same stream
  // reserves one too meanwhile. The first then finds the other's range, gives its own back and
  // grows in that one: the pool keeps one range, not one per thread that missed at once.
  fake_driver_pool f;
  auto& pool = f.pool;
  void* theirs = nullptr;
  g_during_reserve = [&] {
    std::thread other{[&] { theirs = pool.allocate(20 * MiB); }};
    other.join();
  };
  void* mine = pool.allocate(20 * MiB);
  REQUIRE(g_during_reserve == nullptr);  // the other thread ran inside the reservation
  REQUIRE(theirs != nullptr);
  CHECK(pool.statistics().segments.current == 1);
  const auto& calls = f.m.modelled(device_id{0});
  CHECK(calls.count(mgm::sim::driver_call::reserve) == 2);
  CHECK(calls.count(mgm::sim::driver_call::unreserve) == 1);  // the spare range, given back at once
  REQUIRE_NOTHROW(pool.check_invariants());
  // Both blocks are in the one range, side by side.
  const auto a = reinterpret_cast<std::uintptr_t>(mine);
  const auto b = reinterpret_cast<std::uintptr_t>(theirs);
  CHECK((a > b ? a - b : b - a) == 20 * MiB);
  pool.deallocate(mine, 20 * MiB);
  pool.deallocate(theirs, 20 * MiB);
  (void)pool.release();
  CHECK(f.m.hazards().empty());
}

TEST_CASE("vmm contract: a peer granted access during a growth gets the new granules too, or the growth is undone",
          "[pool][vmm]") {
  fake_driver_pool f;
  auto& pool = f.pool;
  const std::size_t used_before = f.m.memory(device_id{0}).used_bytes;
  // While the growth has released the lock, another thread grants device 1 access (it skips the
  // busy granules, which the growth then covers); that access is refused for the new granules.
  g_during_create = [&] {
    std::thread other{[&] { pool.grant_access(device_id{1}); }};
    other.join();
    g_peer_refused = true;
  };
  // Before: the refusal was only logged, and the block handed out although device 1, which
  // `grant_access` was told may read every granule, could not read these.
  REQUIRE_THROWS_AS(pool.allocate(16 * MiB), mgm::cuda_error);
  REQUIRE(g_during_create == nullptr);
  CHECK(pool.reserved_bytes() == 0);
  CHECK(f.m.memory(device_id{0}).used_bytes == used_before);  // the chunks made were released
  REQUIRE_NOTHROW(pool.check_invariants());
  g_peer_refused = false;
  // The growth that serves now gives both devices access, in one call.
  const auto before = f.m.modelled(device_id{0}).count(mgm::sim::driver_call::set_access);
  void* p = pool.allocate(16 * MiB);
  CHECK(f.m.modelled(device_id{0}).count(mgm::sim::driver_call::set_access) - before == 1);
  CHECK(g_last_readers == std::vector<device_id>{device_id{0}, device_id{1}});
  pool.deallocate(p, 16 * MiB);
  (void)pool.release();
  CHECK(f.m.memory(device_id{0}).used_bytes == used_before);
  CHECK(f.m.hazards().empty());
}

TEST_CASE("vmm contract: a pool's end waits for the device before it unmaps memory a stream may still use",
          "[pool][vmm]") {
  using namespace std::chrono_literals;
  fake_driver_machine f;
  const device_id d{0};
  {
    mgm::caching_pool<fake_driver_device> pool{fake_driver_device{f.m.allocator(d)}, expandable_options()};
    const auto s = f.m.create_stream(d);
    void* p = pool.allocate_async(16 * MiB, 256, s);
    f.m.enqueue(s, 5ms);                          // a kernel still using p
    pool.deallocate_async(p, 16 * MiB, 256, s);  // reusable on s at once: no event, nothing waits
    g_work_until = f.m.now(d) + 5ms;
  }  // the pool ends while the kernel runs
  CHECK(g_unmaps_under_work == 0);  // before: its memory was unmapped under the running kernel
  CHECK(f.m.now(d) >= *g_work_until);
  CHECK(f.m.memory(d).used_bytes == 0);
  CHECK(f.m.hazards().empty());
}

TEST_CASE("vmm contract: an exhausted address space is out_of_memory, and the pool reports it as one", "[pool][vmm]") {
  fake_driver_machine f;
  const mgm::cuda_vmm_ops vmm{fake_driver()};
  g_address_space_full = true;
  REQUIRE_THROWS_MATCHES(vmm.reserve(device_id{0}, 64 * MiB), mgm::out_of_memory,
                         Catch::Message("device 0: cannot reserve 64.00 MiB (67108864 bytes) of virtual address space "
                                        "(cuMemAddressReserve)"));
  mgm::caching_pool<fake_driver_device> pool{fake_driver_device{f.m.allocator(device_id{0})}, expandable_options()};
  REQUIRE_THROWS_MATCHES(pool.allocate(16 * MiB), mgm::out_of_memory,  // a large request: mapped memory
                         Catch::Predicate<mgm::out_of_memory>([](const mgm::out_of_memory& e) {
                           const std::string what = e.what();
                           return what.rfind("caching_pool on device 0: out of memory allocating 16.00 MiB", 0) == 0 &&
                                  what.find("0 B allocated and 0 B reserved") != std::string::npos &&
                                  what.find("the process's address space is exhausted, not the device's memory") !=
                                      std::string::npos &&
                                  e.requested_bytes() == 16 * MiB;
                         }));
  REQUIRE(pool.statistics().ooms == 1);
  g_address_space_full = false;  // room again: the same pool serves
  void* p = pool.allocate(16 * MiB);
  pool.deallocate(p, 16 * MiB);
  g_address_space_full = true;  // the reserved range serves; the next report no longer blames the address space
  REQUIRE_THROWS_WITH(pool.allocate(128 * MiB),
                      !Catch::Contains("address space") && Catch::Contains("out of memory allocating 128.00 MiB"));
  (void)pool.release();
  REQUIRE(f.m.memory(device_id{0}).used_bytes == 0);
  REQUIRE(f.m.hazards().empty());
}

TEST_CASE("vmm contract: without a driver, cuda_vmm_ops says so", "[sim][vmm]") {
  mgm::cuda_vmm_driver none;
  none.unavailable = "the CUDA driver entry point cuMemCreate is unavailable (test)";
  const mgm::cuda_vmm_ops vmm{none};
  REQUIRE_FALSE(vmm.supported(device_id{0}));
  REQUIRE_THROWS_AS(vmm.create(device_id{0}, 2 * MiB), mgm::cuda_error);
  vmm.unmap(nullptr, 0);  // noexcept calls do nothing
}

TEST_CASE("vmm contract: the pool's expandable segments over the real cuda_vmm_ops", "[pool][vmm][judge]") {
  fake_driver_machine f;
  {
    mgm::caching_pool<fake_driver_device> pool{fake_driver_device{f.m.allocator(device_id{0})}, expandable_options()};
    REQUIRE(pool.expandable());
    mgm::sim::judged judged{f.m, pool};
    const auto s1 = f.m.create_stream(device_id{0});
    const auto s2 = f.m.create_stream(device_id{0});
    std::vector<void*> ps;
    for (int i = 0; i < 3; ++i) ps.push_back(judged.allocate_async(12 * MiB, 256, i % 2 == 0 ? s1 : s2));
    for (void* p : ps) std::memset(p, 0x3C, 12 * MiB);  // mapped and accessible through the fake driver
    REQUIRE(f.m.vmm().mapped_bytes(device_id{0}) == 36 * MiB);
    for (std::size_t i = 0; i < ps.size(); ++i) judged.deallocate_async(ps[i], 12 * MiB, 256, i % 2 == 0 ? s1 : s2);
    void* again = judged.allocate_async(24 * MiB, 256, s1);
    judged.deallocate_async(again, 24 * MiB, 256, s1);
    (void)pool.release();
    REQUIRE(pool.reserved_bytes() == 0);
    REQUIRE(f.m.vmm().mapped_bytes(device_id{0}) == 0);
    using mgm::sim::driver_call;
    // A 64 MiB device: chunks of at most 1/512 of it, one 2 MiB granule; 6 per growth.
    REQUIRE(f.m.modelled(device_id{0}).count(driver_call::create) == 18);
    REQUIRE(f.m.modelled(device_id{0}).count(driver_call::map) == 18);
    REQUIRE(f.m.modelled(device_id{0}).count(driver_call::set_access) == 3);
    REQUIRE(f.m.modelled(device_id{0}).count(driver_call::unmap) >= 1);
    REQUIRE(f.m.hazards().empty());
  }
  REQUIRE(f.m.memory(device_id{0}).used_bytes == 0);
  REQUIRE(f.m.hazards().empty());
}

TEST_CASE("vmm: shareable memory has POSIX descriptors (fabric where supported) at the recommended granularity",
          "[sim][vmm]") {
  fake_driver_machine f;
  g_sharing.fabric_supported = true;
  const mgm::cuda_vmm_ops vmm{fake_driver(), mgm::vmm_sharing::shareable};
  REQUIRE(vmm.supported(device_id{0}));
  REQUIRE(vmm.granularity(device_id{0}) == 4 * MiB);  // NCCL's rule: the recommended granularity
  REQUIRE(g_sharing.granularity_asked == CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  const auto h = vmm.create(device_id{0}, 4 * MiB);
  REQUIRE(g_sharing.props.size() == 1);
  CHECK(g_sharing.props[0].requestedHandleTypes == (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_FABRIC));
  CHECK(g_sharing.props[0].allocFlags.gpuDirectRDMACapable == 1);
  // Exported as a descriptor, and imported back to the same memory (as another process would).
  const int fd = vmm.export_handle(h);
  CHECK(fd >= 0);
  const auto imported = vmm.import_handle(fd);
  CHECK(imported != h);  // a handle of its own, for the same memory
  vmm.release(imported);
  REQUIRE_THROWS_AS(vmm.import_handle(fd + 1000), mgm::cuda_error);
  ::close(fd);
  vmm.release(h);

  // A driver that refuses fabric handles (no IMEX channel): created again with descriptors only.
  g_sharing.refuse_fabric = true;
  const auto h2 = vmm.create(device_id{0}, 4 * MiB);
  REQUIRE(g_sharing.props.size() == 3);
  CHECK(g_sharing.props[2].requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  vmm.release(h2);
  // Without fabric support, descriptors are asked for from the start.
  g_sharing.fabric_supported = false;
  vmm.release(vmm.create(device_id{0}, 4 * MiB));
  REQUIRE(g_sharing.props.size() == 4);
  CHECK(g_sharing.props[3].requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);

  // Process-local memory: no handle types, the minimum granularity, nothing to export.
  const mgm::cuda_vmm_ops local{fake_driver()};
  REQUIRE(local.granularity(device_id{0}) == 2 * MiB);
  const auto h3 = local.create(device_id{0}, 2 * MiB);
  CHECK(g_sharing.props.back().requestedHandleTypes == CU_MEM_HANDLE_TYPE_NONE);
  REQUIRE_THROWS_AS(local.export_handle(h3), mgm::logic_error);
  local.release(h3);
  CHECK_FALSE(local == vmm);
  REQUIRE(f.m.hazards().empty());
}

TEST_CASE("vmm: a pool's expandable segments over shareable memory: descriptors, whole recommended granules",
          "[pool][vmm][judge]") {
  fake_driver_machine f;
  {
    mgm::caching_pool<fake_driver_device> pool{
        fake_driver_device{f.m.allocator(device_id{0}), mgm::vmm_sharing::shareable}, expandable_options()};
    REQUIRE(pool.expandable());
    mgm::sim::judged judged{f.m, pool};
    const auto s1 = f.m.create_stream(device_id{0});
    void* a = judged.allocate_async(10 * MiB, 256, s1);
    void* b = judged.allocate_async(14 * MiB, 256, s1);
    std::memset(a, 1, 10 * MiB);
    std::memset(b, 2, 14 * MiB);
    const auto mapped = f.m.vmm().mapped_bytes(device_id{0});
    CHECK(mapped % (4 * MiB) == 0);  // what is mapped is whole recommended granules
    CHECK(mapped >= 24 * MiB);
    REQUIRE_FALSE(g_sharing.props.empty());
    for (const auto& p : g_sharing.props) CHECK((p.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0);
    judged.deallocate_async(a, 10 * MiB, 256, s1);
    judged.deallocate_async(b, 14 * MiB, 256, s1);
    (void)pool.release();
    REQUIRE(f.m.vmm().mapped_bytes(device_id{0}) == 0);
  }
  REQUIRE(f.m.hazards().empty());
}

TEST_CASE("vmm: a pooled block exported and imported through cuda_vmm_ops, the code a GPU runs",
          "[pool][vmm][ipc][judge]") {
  fake_driver_machine f;
  mgm::pool_options o;
  o.expandable_segments = true;
  o.map_chunk_bytes = 8 * MiB;
  mgm::caching_pool<fake_driver_device> pool{fake_driver_device{f.m.allocator(device_id{0}), mgm::vmm_sharing::shareable}, o};
  void* p = pool.allocate(20 * MiB);
  std::memset(p, 3, 20 * MiB);
  const mgm::shared_block s = pool.export_block(p);
  CHECK(s.chunks.size() >= 3);  // 20 MiB in chunks of at most 8 MiB
  for (const auto& c : s.chunks) CHECK(c.bytes % (4 * MiB) == 0);  // whole recommended granules
  CHECK(g_sharing.exported.size() == s.chunks.size());
  {
    const mgm::imported_block ib{mgm::cuda_vmm_ops{fake_driver(), mgm::vmm_sharing::shareable}, s};
    CHECK(static_cast<unsigned char*>(ib.get())[20 * MiB - 1] == 3);  // the same memory
    std::memset(ib.get(), 4, 20 * MiB);
    CHECK(static_cast<unsigned char*>(p)[0] == 4);
  }
  pool.deallocate(p, 20 * MiB);
  (void)pool.release();
  CHECK(f.m.vmm().mapped_bytes(device_id{0}) == 0);
  CHECK(f.m.memory(device_id{0}).used_bytes == 0);
  // Process-local memory cannot be exported.
  mgm::caching_pool<fake_driver_device> local{fake_driver_device{f.m.allocator(device_id{0})}, o};
  void* q = local.allocate(MiB);
  REQUIRE_THROWS_WITH(local.export_block(q), Catch::Contains("process-local"));
  local.deallocate(q, MiB);
  REQUIRE(f.m.hazards().empty());
}
