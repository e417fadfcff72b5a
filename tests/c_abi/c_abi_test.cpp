// The C ABI as the frameworks call it: libmultigpumem_c.so opened with dlopen, its functions
// found with dlsym, on the simulator (MGM_C_SIM=dgx-h100) under its oracle. Each case that needs
// a fresh library state (another MGM_ALLOC_CONF) runs in a child process.
#include <mgm/c/multigpumem.h>
#include <mgm/error.hpp>

#include "sizes.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <atomic>
#include <functional>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

// The library's functions, by name, as PyTorch and ctypes find them.
struct c_abi {
  void* handle{nullptr};
  template <class F>
  F* get(const char* name) const {
    void* f = dlsym(handle, name);
    REQUIRE(f != nullptr);
    return reinterpret_cast<F*>(f);
  }
  decltype(&mgm_abi_version) abi_version{};
  decltype(&mgm_last_error) last_error{};
  decltype(&mgm_device_count) device_count{};
  decltype(&mgm_config) config{};
  decltype(&mgm_alloc_async) alloc{};
  decltype(&mgm_free_async) free{};
  decltype(&mgm_record_stream) record_stream{};
  decltype(&mgm_empty_cache) empty_cache{};
  decltype(&mgm_set_memory_fraction) set_fraction{};
  decltype(&mgm_stats_json) stats{};
  decltype(&mgm_snapshot_json) snapshot{};
  decltype(&mgm_record_memory_history) record_history{};
  decltype(&mgm_sim_create_stream) create_stream{};
  decltype(&mgm_sim_begin_capture) begin_capture{};
  decltype(&mgm_sim_end_capture) end_capture{};
  decltype(&mgm_torch_alloc) torch_alloc{};
  decltype(&mgm_torch_free) torch_free{};
  decltype(&mgm_torch_record_stream) torch_record_stream{};
  decltype(&mgm_torch_base_alloc) torch_base_alloc{};
  decltype(&mgm_ipc_export) ipc_export{};
  decltype(&mgm_ipc_unexport) ipc_unexport{};
  decltype(&mgm_ipc_import) ipc_import{};
  decltype(&mgm_ipc_close) ipc_close{};
};

c_abi open_library(const char* sim = "dgx-h100") {
  ::setenv("MGM_C_SIM", sim, 1);
  c_abi c;
  c.handle = dlopen(MGM_C_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  INFO(dlerror());
  REQUIRE(c.handle != nullptr);
  c.abi_version = c.get<int()>("mgm_abi_version");
  c.last_error = c.get<const char*()>("mgm_last_error");
  c.device_count = c.get<int()>("mgm_device_count");
  c.config = c.get<const char*()>("mgm_config");
  c.alloc = c.get<void*(size_t, int, void*)>("mgm_alloc_async");
  c.free = c.get<void(void*, size_t, int, void*)>("mgm_free_async");
  c.record_stream = c.get<int(void*, void*)>("mgm_record_stream");
  c.empty_cache = c.get<size_t()>("mgm_empty_cache");
  c.set_fraction = c.get<int(double, int)>("mgm_set_memory_fraction");
  c.stats = c.get<const char*(int)>("mgm_stats_json");
  c.snapshot = c.get<const char*(int)>("mgm_snapshot_json");
  c.record_history = c.get<int(size_t)>("mgm_record_memory_history");
  c.create_stream = c.get<void*(int)>("mgm_sim_create_stream");
  c.begin_capture = c.get<int(void*)>("mgm_sim_begin_capture");
  c.end_capture = c.get<int(void*)>("mgm_sim_end_capture");
  c.torch_alloc = c.get<void*(size_t, int, mgm_stream_t)>("mgm_torch_alloc");
  c.torch_free = c.get<void(void*, size_t, int, mgm_stream_t)>("mgm_torch_free");
  c.torch_record_stream = c.get<void(void*, mgm_stream_t)>("mgm_torch_record_stream");
  c.torch_base_alloc = c.get<void*(void*, size_t*)>("mgm_torch_base_alloc");
  c.ipc_export = c.get<const char*(void*, int)>("mgm_ipc_export");
  c.ipc_unexport = c.get<int(void*)>("mgm_ipc_unexport");
  c.ipc_import = c.get<void*(const char*, int)>("mgm_ipc_import");
  c.ipc_close = c.get<int(void*)>("mgm_ipc_close");
  return c;
}

nlohmann::json stats_of(const c_abi& c, int device) {
  const char* s = c.stats(device);
  REQUIRE(s != nullptr);
  return nlohmann::json::parse(s);
}

// Runs the hidden test case `name` in a new process of this program (a fresh library state),
// with `env` (VAR=value ...) added; true when it passes (a name that matches no case fails). Its
// stderr goes to `stderr_file` when given.
bool in_child(const std::string& name, const std::string& env, const std::string& stderr_file = "/dev/null") {
  char self[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);  // this program, not the shell's
  REQUIRE(n > 0);
  const std::string cmd = "env " + env + " '" + std::string{self, static_cast<std::size_t>(n)} + "' --warn NoTests '" + name +
                          "' >/dev/null 2>'" + stderr_file + "'";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

TEST_CASE("C ABI: allocations on several devices and streams, stats and snapshot against the pool", "[c_abi]") {
  const auto c = open_library();
  REQUIRE(c.abi_version() == MGM_ABI_VERSION);
  REQUIRE(c.device_count() == 8);
  REQUIRE(std::string{c.config()}.find("sim=dgx-h100") != std::string::npos);
  std::vector<void*> streams;
  for (int d = 0; d < 4; ++d) streams.push_back(c.create_stream(d));
  struct allocation {
    void* p;
    std::size_t size;
    void* stream;
  };
  std::vector<allocation> live[4];
  std::mt19937 rng{1};
  for (int i = 0; i < 400; ++i) {
    const int d = i % 4;
    const std::size_t size = 1 + rng() % (4 * MiB);
    void* s = (i / 4) % 2 == 0 ? streams[static_cast<std::size_t>(d)] : nullptr;
    void* p = c.alloc(size, d, s);
    INFO(c.last_error());
    REQUIRE(p != nullptr);
    live[d].push_back({p, size, s});
  }
  for (int d = 0; d < 4; ++d) {
    const auto st = stats_of(c, d);
    const auto snap = nlohmann::json::parse(c.snapshot(d));
    std::size_t reserved = 0;
    std::size_t allocated = 0;
    std::size_t blocks = 0;
    for (const auto& seg : snap["segments"]) {
      REQUIRE(seg["device"] == d);
      reserved += seg["total_size"].get<std::size_t>();
      for (const auto& b : seg["blocks"]) {
        if (b["state"] == "active_allocated") {
          allocated += b["size"].get<std::size_t>();
          ++blocks;
        }
      }
    }
    REQUIRE(st["allocated_bytes.all.current"].get<std::size_t>() == allocated);
    REQUIRE(st["allocation.all.current"].get<std::size_t>() == live[d].size());
    REQUIRE(blocks == live[d].size());
    REQUIRE(st["reserved_bytes.all.current"].get<std::size_t>() == reserved);
    std::size_t requested = 0;
    for (const auto& a : live[d]) requested += a.size;
    REQUIRE(st["requested_bytes.all.current"].get<std::size_t>() == requested);
    REQUIRE(snap["device_traces"].size() == 8);
  }
  for (int d = 0; d < 4; ++d) {
    for (const auto& a : live[d]) c.free(a.p, a.size, d, a.stream);
    REQUIRE(stats_of(c, d)["allocated_bytes.all.current"] == 0);
  }
  // Empty cache gives every idle byte back.
  REQUIRE(c.empty_cache() > 0);
  for (int d = 0; d < 4; ++d) REQUIRE(stats_of(c, d)["reserved_bytes.all.current"] == 0);
}

TEST_CASE("C ABI: the memory history, as memory_viz's timeline reads it", "[c_abi]") {
  const auto c = open_library();
  REQUIRE(c.abi_version() == MGM_ABI_VERSION);
  const auto traces = [&](int d) { return nlohmann::json::parse(c.snapshot(d))["device_traces"]; };
  void* before = c.alloc(MiB, 5, nullptr);  // not recorded: the history is off
  for (const auto& t : traces(5)) REQUIRE(t.empty());
  REQUIRE(c.record_history(4) == 0);
  void* stream = c.create_stream(5);
  void* a = c.alloc(3 * MiB, 5, stream);
  void* b = c.torch_alloc(5 * MiB, 5, static_cast<mgm_stream_t>(stream));
  c.free(a, 3 * MiB, 5, stream);
  void* later = c.alloc(7 * MiB, 5, stream);
  REQUIRE(c.set_fraction(0.001, 6) == 0);
  REQUIRE(c.alloc(GiB, 6, nullptr) == nullptr);
  REQUIRE(c.set_fraction(1.0, 6) == 0);
  const auto all = traces(0);  // every device's, whichever device the snapshot is of
  REQUIRE(all.size() == 8);
  // The last 4 of device 5's 5 entries, oldest first: the first allocation (of a) was dropped.
  const auto& t5 = all[5];
  REQUIRE(t5.size() == 4);
  CHECK(t5[0]["action"] == "alloc");
  CHECK(t5[0]["addr"] == reinterpret_cast<std::uintptr_t>(b));
  CHECK(t5[0]["size"] == 5 * MiB);
  CHECK(t5[0]["stream"] == reinterpret_cast<std::uintptr_t>(stream));
  CHECK(t5[1]["action"] == "free_requested");
  CHECK(t5[2]["action"] == "free_completed");
  CHECK(t5[2]["addr"] == reinterpret_cast<std::uintptr_t>(a));
  CHECK(t5[2]["size"] == 3 * MiB);
  CHECK(t5[0]["time_us"].get<std::int64_t>() <= t5[2]["time_us"].get<std::int64_t>());
  CHECK(t5[3]["action"] == "alloc");
  CHECK(t5[3]["addr"] == reinterpret_cast<std::uintptr_t>(later));
  const auto& t6 = all[6];
  REQUIRE(t6.size() == 1);
  CHECK(t6[0]["action"] == "oom");
  CHECK(t6[0]["size"] == GiB);
  CHECK(t6[0]["device_free"].get<std::size_t>() > 0);
  // A refused free is no event.
  c.free(a, 3 * MiB, 5, stream);
  CHECK(traces(5)[5].size() == 4);
  REQUIRE(c.record_history(0) == 0);  // stopped: the history goes
  for (const auto& t : traces(5)) CHECK(t.empty());
  c.free(b, 5 * MiB, 5, stream);
  c.free(later, 7 * MiB, 5, stream);
  c.free(before, MiB, 5, nullptr);
  for (const auto& t : traces(5)) CHECK(t.empty());
}

TEST_CASE("C ABI: record_stream, a graph capture, size 0, base_alloc", "[c_abi]") {
  const auto c = open_library();
  void* s1 = c.create_stream(0);
  void* s2 = c.create_stream(0);
  auto enqueue = c.get<int(void*, unsigned long long)>("mgm_sim_enqueue");
  // Without record_stream, a block freed on its own stream is reused there at once.
  void* first = c.alloc(MiB, 0, s1);
  c.free(first, MiB, 0, s1);
  REQUIRE(c.alloc(MiB, 0, s1) == first);
  c.free(first, MiB, 0, s1);
  // Used on s2 as well, behind 1 ms of work there: the free waits for that work, so the next
  // allocation gets other memory.
  void* p = c.alloc(MiB, 0, s1);
  REQUIRE(p == first);
  REQUIRE(enqueue(s2, 1'000'000) == 0);
  REQUIRE(c.record_stream(p, s2) == 0);
  c.free(p, MiB, 0, s1);
  void* next = c.alloc(MiB, 0, s1);
  REQUIRE(next != nullptr);
  REQUIRE(next != p);
  c.free(next, MiB, 0, s1);
  void* t = c.alloc(MiB, 0, s1);
  c.torch_record_stream(t, static_cast<mgm_stream_t>(s2));  // the hook PyTorch calls
  c.free(t, MiB, 0, s1);
  int outside = 0;
  REQUIRE(c.record_stream(&outside, s2) == -1);
  REQUIRE(std::string{c.last_error()}.find("no pool holds") != std::string::npos);
  // torch.cuda.graph allocates mid-capture: from the capture's private pool.
  void* g = c.create_stream(1);
  REQUIRE(c.begin_capture(g) == 0);
  void* during = c.alloc(8 * MiB, 1, g);
  INFO(c.last_error());
  REQUIRE(during != nullptr);
  c.free(during, 8 * MiB, 1, g);
  REQUIRE(c.end_capture(g) == 0);
  // The graph's memory stays its own once the capture ends: a replay writes to it, so no request
  // after the capture, on its stream or another, is handed that block.
  void* after_on_g = c.alloc(8 * MiB, 1, g);
  void* after_elsewhere = c.alloc(8 * MiB, 1, nullptr);
  REQUIRE(after_on_g != nullptr);
  REQUIRE(after_elsewhere != nullptr);
  CHECK(after_on_g != during);
  CHECK(after_elsewhere != during);
  c.free(after_on_g, 8 * MiB, 1, g);
  c.free(after_elsewhere, 8 * MiB, 1, nullptr);
  REQUIRE(c.begin_capture(nullptr) == -1);  // the default stream cannot capture
  // Size 0: no memory, no error (in a thread whose last error is empty).
  std::thread{[&] {
    REQUIRE(c.alloc(0, 0, nullptr) == nullptr);
    REQUIRE(std::string{c.last_error()}.empty());
    REQUIRE(c.torch_alloc(0, 0, nullptr) == nullptr);
  }}.join();
  c.free(nullptr, 0, 0, nullptr);
  std::size_t size = 123;
  REQUIRE(c.torch_base_alloc(&outside, &size) == &outside);
  REQUIRE(size == 0);
  // The base of a pool pointer is its segment's, which holds it.
  void* a = c.alloc(1000, 3, nullptr);
  void* b = c.alloc(1000, 3, nullptr);
  std::size_t seg = 0;
  auto* base = static_cast<char*>(c.torch_base_alloc(b, &seg));
  REQUIRE(base <= static_cast<char*>(b));
  REQUIRE(static_cast<char*>(b) + 1000 <= base + seg);
  c.free(a, 1000, 3, nullptr);
  c.free(b, 1000, 3, nullptr);
  // A stream about to be destroyed is forgotten; its cache joins the others.
  auto forget = c.get<int(int, void*)>("mgm_forget_stream");
  REQUIRE(forget(0, s2) == 0);
  REQUIRE(forget(0, nullptr) == -1);  // the default stream cannot be forgotten
}

TEST_CASE("C ABI: each thread's strings live until its own next call, whatever other threads do", "[c_abi]") {
  const auto c = open_library();
  void* held = c.alloc(3 * MiB, 0, nullptr);
  REQUIRE(held != nullptr);
  const char* mine = c.stats(0);
  REQUIRE(mine != nullptr);
  const std::string stats_copy = mine;  // taken before any other call
  const char* my_snapshot = c.snapshot(0);
  REQUIRE(my_snapshot != nullptr);
  const std::string snapshot_copy = my_snapshot;
  CHECK(std::string{mine} == stats_copy);  // another function's call leaves this string alone
  const std::string my_error = c.last_error();  // what earlier cases left on this thread
  std::string others_error;
  std::thread other{[&] {
    for (int i = 0; i < 200; ++i) {
      void* p = c.alloc(MiB, 1, nullptr);
      (void)c.stats(1);
      (void)c.snapshot(1);
      c.free(p, MiB, 1, nullptr);
    }
    (void)c.alloc(GiB * 1024, 1, nullptr);  // fails: sets this thread's error
    others_error = c.last_error();
  }};
  other.join();
  INFO(others_error);
  CHECK(others_error.find("mgm_alloc_async: caching_pool on device 1: out of memory allocating 1.00 TiB") == 0);
  CHECK(std::string{mine} == stats_copy);  // the same buffers, untouched by the other thread
  CHECK(std::string{my_snapshot} == snapshot_copy);
  CHECK(std::string{c.last_error()} == my_error);  // the other thread's error is its own
  c.free(held, 3 * MiB, 0, nullptr);
}

TEST_CASE("C ABI: a memory fraction fails allocations readably, and torch_alloc throws out_of_memory", "[c_abi]") {
  const auto c = open_library();
  REQUIRE(c.set_fraction(1.5, 2) == -1);
  REQUIRE(std::string{c.last_error()}.find("not in [0, 1]") != std::string::npos);
  REQUIRE(c.set_fraction(0.01, 2) == 0);  // 1 % of 80 GiB: about 800 MiB
  REQUIRE(c.alloc(GiB, 2, nullptr) == nullptr);
  const std::string why = c.last_error();
  REQUIRE(why.find("memory fraction") != std::string::npos);
  REQUIRE(why.find("GPU2") != std::string::npos);
  bool threw = false;
  try {
    (void)c.torch_alloc(GiB, 2, nullptr);
  } catch (const std::bad_alloc& e) {
    threw = true;
    REQUIRE(std::string{e.what()}.find("memory fraction") != std::string::npos);
    REQUIRE(std::string{e.what()}.rfind("CUDA out of memory", 0) == 0);
    REQUIRE(dynamic_cast<const mgm::out_of_memory*>(&e) != nullptr);
  }
  REQUIRE(threw);
  void* small = c.alloc(64 * MiB, 2, nullptr);  // under the fraction: fine
  REQUIRE(small != nullptr);
  c.torch_free(small, 64 * MiB, 2, nullptr);
  // Under the cap, one thread's failing requests never fail another's that fit.
  void* held = c.alloc(512 * MiB, 2, nullptr);
  REQUIRE(held != nullptr);
  std::atomic<bool> done{false};
  std::atomic<int> small_failures{0};
  std::atomic<int> greedy_got{0};  // (Catch's REQUIRE is for the main thread only)
  std::thread greedy{[&] {
    while (!done.load()) {
      if (void* g = c.alloc(400 * MiB, 2, nullptr)) {
        greedy_got.fetch_add(1);
        c.free(g, 400 * MiB, 2, nullptr);
      }
    }
  }};
  for (int i = 0; i < 2000; ++i) {
    void* q = c.alloc(MiB, 2, nullptr);
    if (q == nullptr) {
      small_failures.fetch_add(1);
    } else {
      c.free(q, MiB, 2, nullptr);
    }
  }
  done.store(true);
  greedy.join();
  REQUIRE(greedy_got.load() == 0);
  REQUIRE(small_failures.load() == 0);
  c.free(held, 512 * MiB, 2, nullptr);
  REQUIRE(c.set_fraction(1.0, 2) == 0);
  void* big = c.alloc(GiB, 2, nullptr);
  REQUIRE(big != nullptr);
  c.free(big, GiB, 2, nullptr);
}

TEST_CASE("C ABI: PyTorch's init, empty_cache and set_memory_fraction hooks, as it calls them", "[c_abi]") {
  const auto c = open_library();
  const auto init = c.get<void(int)>("mgm_torch_init");
  const auto empty_cache = c.get<void()>("mgm_torch_empty_cache");
  const auto set_fraction = c.get<void(double, int)>("mgm_torch_set_memory_fraction");
  init(0);  // before PyTorch knows its devices: no pool is made, nothing fails
  init(c.device_count());
  // A fraction caps the device's pool; the hook returns nothing, so a bad one is only logged.
  set_fraction(0.01, 3);
  REQUIRE(c.alloc(GiB, 3, nullptr) == nullptr);
  set_fraction(2.0, 3);  // refused: the cap of 1 % stays
  REQUIRE(std::string{c.last_error()}.find("not in [0, 1]") != std::string::npos);
  REQUIRE(c.alloc(GiB, 3, nullptr) == nullptr);
  set_fraction(1.0, 3);
  // empty_cache gives back what is cached, and what is live stays.
  void* live = c.alloc(256 * MiB, 3, nullptr);
  void* cached = c.alloc(GiB, 3, nullptr);
  REQUIRE(live != nullptr);
  REQUIRE(cached != nullptr);
  c.free(cached, GiB, 3, nullptr);
  const auto before = stats_of(c, 3);
  REQUIRE(before["reserved_bytes.all.current"].get<std::int64_t>() >= static_cast<std::int64_t>(GiB + 256 * MiB));
  empty_cache();
  const auto after = stats_of(c, 3);
  REQUIRE(after["reserved_bytes.all.current"].get<std::int64_t>() < static_cast<std::int64_t>(GiB));
  REQUIRE(after["allocated_bytes.all.current"].get<std::int64_t>() >= static_cast<std::int64_t>(256 * MiB));
  c.free(live, 256 * MiB, 3, nullptr);
}

TEST_CASE("C ABI: under a memory fraction, every request that fits is served", "[c_abi]") {
  // The pool maps ahead of a request; under a fraction it must never map ahead past the cap, or a
  // request that fits would fail.
  const auto c = open_library();
  REQUIRE(c.set_fraction(0.0625, 3) == 0);  // 1/16 of the simulated 79.65 GiB: 5097 MiB
  std::vector<void*> live;
  for (int i = 0; i < 39; ++i) {  // 39 x 128 MiB = 4992 MiB
    INFO("block " << i);
    live.push_back(c.alloc(128 * MiB, 3, nullptr));
    INFO((live.back() == nullptr ? c.last_error() : ""));
    REQUIRE(live.back() != nullptr);
    REQUIRE(stats_of(c, 3)["reserved_bytes.all.current"].get<std::size_t>() <= 5097 * MiB);
  }
  REQUIRE(c.alloc(128 * MiB, 3, nullptr) == nullptr);  // a 40th would cross it
  REQUIRE(std::string{c.last_error()}.find("memory fraction") != std::string::npos);
  for (void* p : live) c.free(p, 128 * MiB, 3, nullptr);
  REQUIRE(c.set_fraction(1.0, 3) == 0);
  (void)c.empty_cache();
}

TEST_CASE("C ABI: a bad device, a double free and a foreign pointer: errors, no crash, nothing lost", "[c_abi]") {
  const auto c = open_library();
  REQUIRE(c.alloc(MiB, 99, nullptr) == nullptr);
  REQUIRE(std::string{c.last_error()}.find("device 99 is not one of the 8 devices") != std::string::npos);
  REQUIRE(c.alloc(MiB, -1, nullptr) == nullptr);
  REQUIRE_THROWS_AS(c.torch_alloc(MiB, 99, nullptr), mgm::logic_error);
  REQUIRE(c.stats(99) == nullptr);
  void* p = c.alloc(3 * MiB, 0, nullptr);
  void* q = c.alloc(MiB, 0, nullptr);
  REQUIRE(p != nullptr);
  const auto before = stats_of(c, 0);
  // Each refused free is logged, and is the freeing thread's error; a good free leaves it alone.
  auto clear_error = c.get<void()>("mgm_clear_error");
  auto set_log_fn = c.get<void(mgm_log_fn, int, void*)>("mgm_set_log_fn");
  std::vector<std::string> logged;
  set_log_fn([](int level, const char* message, void* user) {
    static_cast<std::vector<std::string>*>(user)->push_back(std::to_string(level) + " " + message);
  }, MGM_LOG_ERROR, &logged);
  const auto refused = [&](void* ptr, std::size_t size, int device) {
    clear_error();
    const std::size_t seen = logged.size();
    c.free(ptr, size, device, nullptr);
    const std::string why = c.last_error();
    INFO(why);
    CHECK(logged.size() == seen + 1);
    if (logged.size() > seen) CHECK(logged.back().find(std::to_string(MGM_LOG_ERROR) + " ") == 0);
    return why;
  };
  clear_error();
  c.free(p, 3 * MiB, 0, nullptr);
  CHECK(std::string{c.last_error()}.empty());
  CHECK(logged.empty());
  CHECK(refused(p, 3 * MiB, 0).find("mgm_free_async: ") == 0);  // twice: nothing changes
  int outside = 0;
  CHECK(refused(&outside, 4, 0).find("mgm_free_async: ") == 0);  // never allocated
  CHECK(refused(q, MiB, 42).find("device 42 is not one of the 8 devices") != std::string::npos);  // not freed
  set_log_fn(nullptr, MGM_LOG_WARNING, nullptr);  // stderr again
  const auto after = stats_of(c, 0);
  REQUIRE(after["allocated_bytes.all.current"].get<std::size_t>() ==
          before["allocated_bytes.all.current"].get<std::size_t>() - 3 * MiB);
  REQUIRE(after["allocation.all.current"] == 1);  // q is still there
  c.free(q, MiB, 0, nullptr);
  REQUIRE(stats_of(c, 0)["allocation.all.current"] == 0);
  c.free(q, MiB, 7, nullptr);  // a device whose pool handed out nothing: no pool is made to free it
  REQUIRE(stats_of(c, 7)["reserved_bytes.all.current"] == 0);
  REQUIRE(nlohmann::json::parse(c.snapshot(7))["segments"].empty());
  void* again = c.alloc(3 * MiB, 0, nullptr);  // the pool keeps working
  REQUIRE(again != nullptr);
  c.free(again, 3 * MiB, 0, nullptr);
}

TEST_CASE("C ABI: 8 threads at once on 4 devices", "[c_abi]") {
  const auto c = open_library();
  std::vector<void*> streams;
  for (int t = 0; t < 8; ++t) streams.push_back(c.create_stream(t % 4));
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng{static_cast<unsigned>(t)};
      std::vector<std::pair<void*, std::size_t>> held;
      for (int i = 0; i < 1500; ++i) {
        if (held.size() < 16 && rng() % 2 == 0) {
          const std::size_t n = 256 + rng() % (2 * MiB);
          void* p = c.alloc(n, t % 4, streams[static_cast<std::size_t>(t)]);
          if (p == nullptr) {
            failures.fetch_add(1);
          } else {
            held.push_back({p, n});
          }
        } else if (!held.empty()) {
          c.free(held.back().first, held.back().second, t % 4, streams[static_cast<std::size_t>(t)]);
          held.pop_back();
        }
        if (i % 300 == 0) (void)c.stats(t % 4);
      }
      for (const auto& [p, n] : held) c.free(p, n, t % 4, streams[static_cast<std::size_t>(t)]);
    });
  }
  for (auto& th : threads) th.join();
  REQUIRE(failures.load() == 0);
  for (int d = 0; d < 4; ++d) REQUIRE(stats_of(c, d)["allocated_bytes.all.current"] == 0);
}

TEST_CASE("C ABI: MGM_ALLOC_CONF takes PyTorch's keys it honours and refuses the others by name", "[c_abi]") {
  REQUIRE(in_child("child: honoured keys", "MGM_ALLOC_CONF=max_split_size_mb:64,expandable_segments:True"));
  REQUIRE(in_child("child: refused key", "MGM_ALLOC_CONF=garbage_collection_threshold:0.6,max_split_size_mb:64 "
                                         "MGM_EXPECT=garbage_collection_threshold MGM_EXPECT2=release_threshold"));
  REQUIRE(in_child("child: refused key", "MGM_ALLOC_CONF=roundup_power2_divisions:4 MGM_EXPECT=roundup_power2_divisions "
                                         "MGM_EXPECT2=segment_round"));
  REQUIRE(in_child("child: bad machine", "MGM_C_SIM_CHILD=no-such-machine"));
  REQUIRE(in_child("child: not simulated", ""));
  REQUIRE_FALSE(in_child("child: refused key", "MGM_ALLOC_CONF=max_split_size_mb:64 MGM_EXPECT=x MGM_EXPECT2=y"));  // can fail
}

TEST_CASE("C ABI: MGM_LOG sets what reaches stderr, and a bad value is refused by name", "[c_abi]") {
  const std::string file = "mgm_c_abi_log." + std::to_string(::getpid()) + ".txt";
  const auto read = [&] {
    std::string text;
    if (FILE* f = std::fopen(file.c_str(), "r")) {
      char buf[4096];
      for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
      std::fclose(f);
    }
    return text;
  };
  REQUIRE(in_child("child: a double free", "", file));  // the default: warnings and errors
  std::string text = read();
  INFO(text);
  CHECK(text.find("multigpumem: error: ") != std::string::npos);
  CHECK(text.find("multigpumem: error: mgm_free_async: device 42 is not one of") != std::string::npos);
  REQUIRE(in_child("child: a double free", "MGM_LOG=off", file));
  CHECK(read().find("multigpumem:") == std::string::npos);
  REQUIRE(in_child("child: bad MGM_LOG", "MGM_LOG=loud", file));
  std::remove(file.c_str());
}

TEST_CASE("child: a double free", "[.]") {
  const auto c = open_library();
  void* p = c.alloc(MiB, 0, nullptr);
  REQUIRE(p != nullptr);
  c.free(p, MiB, 0, nullptr);
  c.free(p, MiB, 0, nullptr);
  c.free(p, MiB, 42, nullptr);
  REQUIRE(std::string{c.last_error()}.find("device 42") != std::string::npos);
}

TEST_CASE("child: bad MGM_LOG", "[.]") {
  const auto c = open_library();
  REQUIRE(c.device_count() == -1);
  REQUIRE(std::string{c.last_error()}.find("MGM_LOG=loud: not one of off, error, warning, info, debug") !=
          std::string::npos);
}

TEST_CASE("child: honoured keys", "[.]") {
  const auto c = open_library();
  REQUIRE(std::string{c.config()}.find("max_split_size:67108864") != std::string::npos);
  REQUIRE(c.device_count() == 8);
}

TEST_CASE("child: refused key", "[.]") {
  const auto c = open_library();
  REQUIRE(c.device_count() == -1);
  REQUIRE(c.alloc(MiB, 0, nullptr) == nullptr);
  const std::string why = c.last_error();
  REQUIRE(why.find(std::getenv("MGM_EXPECT")) != std::string::npos);
  REQUIRE(why.find(std::getenv("MGM_EXPECT2")) != std::string::npos);
}

// Without MGM_C_SIM the library runs on CUDA: no simulated streams, on a GPU or (here) on none.
TEST_CASE("child: not simulated", "[.]") {
  const auto c = open_library("");  // an empty MGM_C_SIM is no simulator
  REQUIRE(c.create_stream(0) == nullptr);
  const std::string why = c.last_error();
  if (c.device_count() > 0) {
    CHECK(why == "mgm_sim_create_stream: the library runs on CUDA (MGM_C_SIM is not set); create streams with CUDA");
  } else {  // no GPU here: no device 0 either
    REQUIRE(c.device_count() == 0);
    CHECK(why == "mgm_sim_create_stream: device 0 is not one of the 0 devices this process sees");
  }
}

TEST_CASE("child: bad machine", "[.]") {
  const auto c = open_library(std::getenv("MGM_C_SIM_CHILD"));
  REQUIRE(c.device_count() == -1);
  REQUIRE(std::string{c.last_error()}.find("no-such-machine") != std::string::npos);
}

TEST_CASE("C ABI: a block shared with another process through a token, and refused where memory is process-local",
          "[c_abi][ipc]") {
  const auto c = open_library();
  void* p = c.alloc(MiB, 1, nullptr);
  REQUIRE(p != nullptr);
  REQUIRE(c.ipc_export(p, 1) == nullptr);  // this process's pools are process-local (no shareable:True)
  CHECK(std::string{c.last_error()}.find("shareable:True") != std::string::npos);
  CHECK(c.ipc_import("mgm-ipc1:nonsense", 1) == nullptr);
  CHECK(std::string{c.last_error()}.find("token") != std::string::npos);
  CHECK(c.ipc_close(p) == -1);
  CHECK(c.ipc_unexport(p) == -1);
  c.free(p, MiB, 1, nullptr);
  // Shareable pools in two processes: the exporter runs the importer while it holds the block.
  REQUIRE(in_child("child: ipc exporter", "MGM_ALLOC_CONF=shareable:True"));
}

TEST_CASE("child: ipc exporter", "[.]") {
  const auto c = open_library();
  const std::size_t bytes = 5 * MiB + 256;
  auto* p = static_cast<unsigned char*>(c.alloc(bytes, 2, nullptr));
  REQUIRE(p != nullptr);
  for (std::size_t i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(i * 13);
  const char* t = c.ipc_export(p, 2);
  INFO(c.last_error());
  REQUIRE(t != nullptr);
  const std::string token = t;
  REQUIRE(std::string{c.ipc_export(p, 2)} == token);  // exported again: the same token, still valid
  REQUIRE(in_child("child: ipc importer", "MGM_ALLOC_CONF=shareable:True MGM_IPC_BYTES=" + std::to_string(bytes) +
                                              " MGM_IPC_TOKEN='" + token + "'"));
  for (std::size_t i = 0; i < bytes; ++i) REQUIRE(p[i] == 0x5a);  // what the importer wrote
  // Unexported: the token's descriptors are gone, a later import fails, the block stays ours.
  REQUIRE(c.ipc_unexport(p) == 0);
  REQUIRE(c.ipc_unexport(p) == -1);
  REQUIRE(in_child("child: ipc importer", "MGM_ALLOC_CONF=shareable:True MGM_IPC_BYTES=16 MGM_IPC_TOKEN='" + token +
                                              "' MGM_IPC_EXPECT='no longer exported'"));
  // A free ends an export too.
  REQUIRE(c.ipc_export(p, 2) != nullptr);
  c.free(p, bytes, 2, nullptr);
  REQUIRE(c.ipc_unexport(p) == -1);
  REQUIRE(c.ipc_export(p, 2) == nullptr);  // no longer a live allocation
}

TEST_CASE("child: ipc importer", "[.]") {
  const auto c = open_library();
  const std::size_t bytes = std::stoull(std::getenv("MGM_IPC_BYTES"));
  auto* p = static_cast<unsigned char*>(c.ipc_import(std::getenv("MGM_IPC_TOKEN"), 2));
  INFO(c.last_error());
  if (const char* expect = std::getenv("MGM_IPC_EXPECT")) {  // the import must fail, for this reason
    REQUIRE(p == nullptr);
    REQUIRE(std::string{c.last_error()}.find(expect) != std::string::npos);
    return;
  }
  REQUIRE(p != nullptr);
  for (std::size_t i = 0; i < bytes; ++i) REQUIRE(p[i] == static_cast<unsigned char>(i * 13));
  std::memset(p, 0x5a, bytes);
  REQUIRE(c.ipc_close(p) == 0);
  REQUIRE(c.ipc_close(p) == -1);
}
