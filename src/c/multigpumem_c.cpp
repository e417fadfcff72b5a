// The C ABI (include/mgm/c/multigpumem.h): one multi_device_pool per process, on CUDA or on the
// simulator (MGM_C_SIM), and the PyTorch hooks over it. Nothing but mgm_torch_alloc throws.
#include <mgm/c/multigpumem.h>

#include "c_backend.hpp"

#include <mgm/allocators/cuda_allocator.hpp>
#include <mgm/bytes.hpp>
#include <mgm/device.hpp>
#include <mgm/error.hpp>
#include <mgm/log.hpp>
#include <mgm/pool/imported_block.hpp>
#include <mgm/pool/multi_device_pool.hpp>
#include <mgm/pool/shared_block.hpp>
#include <mgm/pool/pool_options.hpp>
#include <mgm/sim/judged.hpp>
#include <mgm/sim/machine.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

namespace {
thread_local std::string t_error;
thread_local bool t_error_lost = false;  // the last error's text could not be stored
}  // namespace

void mgm::c_abi::set_error(std::string_view a, std::string_view b, std::string_view c) noexcept {
  try {
    t_error.clear();
    t_error.reserve(a.size() + b.size() + c.size());
    t_error.append(a).append(b).append(c);
    t_error_lost = false;
  } catch (...) {
    t_error.clear();
    t_error_lost = true;
  }
}

namespace {

using mgm::c_abi::backend;
using mgm::c_abi::pool_backend;
using mgm::c_abi::set_error;

constexpr std::size_t unlimited = std::numeric_limits<std::size_t>::max();

// ---- The library's messages ----------------------------------------------------------------
// MGM_LOG's threshold (default warning) and where messages go: stderr, or mgm_set_log_fn's.
struct log_sink {
  mgm_log_fn fn{nullptr};
  void* user{nullptr};
  int min_level{MGM_LOG_WARNING};
};

constexpr const char* level_names[] = {"debug", "info", "warning", "error"};

int to_c_level(mgm::log_level l) noexcept {
  switch (l) {
    case mgm::log_level::debug: return MGM_LOG_DEBUG;
    case mgm::log_level::info: return MGM_LOG_INFO;
    case mgm::log_level::warning: return MGM_LOG_WARNING;
    case mgm::log_level::error: break;
  }
  return MGM_LOG_ERROR;
}

// MGM_LOG=off|error|warning|info|debug as a threshold (off: above every level); throws on others.
int log_threshold_from_env() {
  const char* v = std::getenv("MGM_LOG");
  if (v == nullptr || *v == '\0') return MGM_LOG_WARNING;
  const std::string_view s{v};
  if (s == "off") return MGM_LOG_ERROR + 1;
  for (int l = MGM_LOG_DEBUG; l <= MGM_LOG_ERROR; ++l) {
    if (s == level_names[l]) return l;
  }
  throw mgm::logic_error{"MGM_LOG=" + std::string{s} + ": not one of off, error, warning, info, debug"};
}

// One line on stderr, in one write, so that lines of several threads do not interleave.
void to_stderr(int level, const char* message, void* /*user*/) {
  std::string line = std::string{"multigpumem: "} + level_names[level] + ": " + message + "\n";
  const char* p = line.data();
  std::size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

// Installs `sink` as the library's voice (its own copy of mgm::log: the host's is untouched).
void install(log_sink sink) {
  mgm::set_log_callback([sink](mgm::log_level level, std::string_view message) {
    const int l = to_c_level(level);
    if (l < sink.min_level) return;
    const std::string text{message};  // NUL-terminated for C
    (sink.fn != nullptr ? sink.fn : to_stderr)(l, text.c_str(), sink.user);
  });
}

// The process's pools, made on the first call.
struct state {
  std::string failure;  // why the library cannot run (a bad MGM_ALLOC_CONF, a bad MGM_C_SIM)
  std::optional<mgm::sim::machine> machine;
  std::string sim_name;
  std::unique_ptr<backend> pools;
  int devices{0};
  // A device's memory fraction. `cap` is read without the lock on every allocation; a capped
  // allocation, and a change of the fraction, take the lock (a capped allocation checks and
  // allocates alone, and sees the fraction and its cap as one pair).
  struct device_limit {
    std::atomic<std::size_t> cap{unlimited};
    std::mutex mutex;
    double fraction{1.0};  // under `mutex`
  };
  std::unique_ptr<device_limit[]> limits;
  // The allocation history of each device (mgm_record_memory_history): a ring of the last
  // `max_entries`, taken only while `recording` (one relaxed load on each call otherwise).
  struct trace_entry {
    const char* action;
    std::uintptr_t addr;
    std::size_t size;
    std::uintptr_t stream;
    std::int64_t time_us;
    std::size_t device_free;  // "oom" only
  };
  struct device_history {
    std::mutex mutex;
    std::vector<trace_entry> ring;  // oldest at `next` once full
    std::size_t next{0};
    std::size_t max{0};
  };
  std::atomic<bool> recording{false};
  std::unique_ptr<device_history[]> history;

  // Appends one entry to a device's history; its mutex is held by the caller.
  static void append(device_history& h, const char* action, const void* addr, std::size_t size, mgm::stream_ref stream,
                     std::size_t device_free = 0) noexcept {
    if (h.max == 0) return;  // stopped since the caller looked
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch());
    const trace_entry e{action, reinterpret_cast<std::uintptr_t>(addr), size, reinterpret_cast<std::uintptr_t>(stream.get()),
                        static_cast<std::int64_t>(us.count()), device_free};
    try {
      if (h.ring.size() < h.max) {
        h.ring.push_back(e);
        return;
      }
    } catch (...) {  // no host memory for the entry: the ring is as long as it got, and the oldest makes room
      h.max = h.ring.size();
    }
    if (h.ring.empty()) return;
    h.ring[h.next] = e;
    h.next = (h.next + 1) % h.ring.size();
  }
  void record(int device, const char* action, const void* addr, std::size_t size, mgm::stream_ref stream,
              std::size_t device_free = 0) noexcept {
    auto& h = history[static_cast<std::size_t>(device)];
    const std::lock_guard lock{h.mutex};
    append(h, action, addr, size, stream, device_free);
  }

  state() {
    try {
      install(log_sink{nullptr, nullptr, log_threshold_from_env()});
      const mgm::pool_options o = mgm::pool_options::from_env();
      const auto sharing = o.shareable ? mgm::vmm_sharing::shareable : mgm::vmm_sharing::process_local;
      const char* sim = std::getenv("MGM_C_SIM");
      if (sim != nullptr && *sim != '\0') {
        sim_name = sim;
        // MGM_C_SIM_JUDGE=off: no judge (for benchmarks of the C layer itself).
        const char* judge = std::getenv("MGM_C_SIM_JUDGE");
        mgm::sim::machine_options mo;
        if (judge != nullptr && std::string{judge} == "off") mo.oracle = mgm::sim::oracle_mode::off;
        machine.emplace(mgm::sim::machine::from_string(sim, mo));
        auto* m = &*machine;
        pools = std::make_unique<pool_backend<mgm::sim::device_allocator>>(
            m->device_count(), [m, sharing](mgm::device_id d) { return m->allocator(d, sharing); }, o, m);
      } else {
        pools = std::make_unique<pool_backend<mgm::cuda_allocator>>(
            mgm::device_count(), [sharing](mgm::device_id d) { return mgm::cuda_allocator{d, sharing}; }, o, nullptr);
      }
      devices = pools->device_count();
      limits = std::make_unique<device_limit[]>(static_cast<std::size_t>(devices));
      history = std::make_unique<device_history[]>(static_cast<std::size_t>(devices));
    } catch (const std::exception& e) {
      failure = std::string{"libmultigpumem_c cannot start: "} + e.what();
      pools.reset();
    }
  }
};

// Never destroyed: frees from other threads and from static destructors may come after main returns.
// nullptr when the host had no memory for it (the next call tries again).
state* the_state() noexcept {
  try {
    static state* s = new state;
    return s;
  } catch (...) {
    return nullptr;
  }
}

// The state when it runs, else nullptr with the error set.
state* running() noexcept {
  state* s = the_state();
  if (s == nullptr) {
    set_error("libmultigpumem_c cannot start: out of host memory");
    return nullptr;
  }
  if (s->pools == nullptr) {
    set_error(s->failure);
    return nullptr;
  }
  return s;
}

bool valid_device(const state& s, int device, const char* who) noexcept {
  if (device >= 0 && device < s.devices) [[likely]] return true;
  try {
    set_error(who, ": device " + std::to_string(device) + " is not one of the " + std::to_string(s.pools->device_count()) +
                       " devices this process sees",
              s.sim_name.empty() ? "" : " (simulated machine " + s.sim_name + ")");
  } catch (...) {
  }
  return false;
}

// An allocation, or an exception: the shared path of mgm_alloc_async and mgm_torch_alloc.
void* allocate_or_throw(state& s, std::size_t size, int device, mgm::stream_ref stream) {
  auto& limit = s.limits[static_cast<std::size_t>(device)];
  if (limit.cap.load(std::memory_order_relaxed) == unlimited) [[likely]] return s.pools->allocate(device, size, stream);
  // Capped allocations of one device check and allocate one at a time, so that one thread's
  // attempt never fails another's that fits (frees may still come in between: they only help).
  // The pool keeps to the cap itself (pool_limits, set here in case the pool is new: what it maps
  // ahead of a request never crosses the cap). The check below covers a pool that held more than
  // the cap before it was set: it gives its idle memory back and tries once more.
  const std::lock_guard alone{limit.mutex};
  const std::size_t cap = limit.cap.load(std::memory_order_relaxed);
  s.pools->set_max_reserved(device, cap);
  const auto reserved = [&] { return static_cast<std::size_t>(s.pools->statistics(device).reserved_bytes.current); };
  for (int attempt = 0; attempt < 2; ++attempt) {
    void* p = nullptr;
    try {
      p = s.pools->allocate(device, size, stream);
    } catch (const mgm::out_of_memory&) {
      // Far below the cap (more than a segment's rounding, 32 MiB): the device, not the cap, ran
      // out, and the pool's message says so; else the fraction's message below.
      constexpr std::size_t rounding = std::size_t{32} << 20;
      if (reserved() + size + rounding <= cap) throw;
      break;
    }
    if (reserved() <= cap) return p;
    s.pools->deallocate(device, p, size, stream);
    (void)s.pools->release(device);
  }
  using mgm::detail::describe_bytes;
  const auto st = s.pools->statistics(device);
  throw mgm::out_of_memory{"GPU" + std::to_string(device) + ": " + describe_bytes(size) + " would take the pool past its " +
                               "memory fraction " + std::to_string(limit.fraction) + " (" + describe_bytes(cap) + " of " +
                               describe_bytes(s.pools->total_bytes(device)) + "); it holds " +
                               describe_bytes(static_cast<std::size_t>(st.reserved_bytes.current)) + ", " +
                               describe_bytes(static_cast<std::size_t>(st.allocated_bytes.current)) + " of it in use",
                           size};
}

nlohmann::ordered_json stats_object(const mgm::pool_statistics& st) {
  nlohmann::ordered_json j;
  const auto put = [&](const char* name, const mgm::stat& v) {
    const std::string base = std::string{name} + ".all.";
    j[base + "current"] = v.current;
    j[base + "peak"] = v.peak;
    j[base + "allocated"] = v.total;
    j[base + "freed"] = v.total - static_cast<std::uint64_t>(v.current);
  };
  put("allocated_bytes", st.allocated_bytes);
  put("reserved_bytes", st.reserved_bytes);
  put("active_bytes", st.active_bytes);
  put("inactive_split_bytes", st.inactive_split_bytes);
  put("requested_bytes", st.requested_bytes);
  put("allocation", st.allocations);
  put("segment", st.segments);
  j["num_alloc_retries"] = st.oom_retries;
  j["num_ooms"] = st.ooms;
  j["num_device_alloc"] = st.upstream_allocations;
  j["num_device_free"] = st.upstream_frees;
  j["mgm.cache_hits"] = st.cache_hits;
  j["mgm.cache_misses"] = st.cache_misses;
  j["mgm.stream_steals"] = st.stream_steals;
  return j;
}

// allocate_or_throw, with the allocation (or the out-of-memory) in the history while it is recorded.
void* allocate_recorded(state& s, std::size_t size, int device, mgm::stream_ref stream) {
  if (!s.recording.load(std::memory_order_relaxed)) [[likely]] return allocate_or_throw(s, size, device, stream);
  try {
    void* p = allocate_or_throw(s, size, device, stream);
    s.record(device, "alloc", p, size, stream);
    return p;
  } catch (const mgm::out_of_memory&) {
    std::size_t free_bytes = 0;
    try {
      free_bytes = s.pools->free_bytes(device);
    } catch (...) {
    }
    s.record(device, "oom", nullptr, size, stream, free_bytes);
    throw;
  }
}

// Each device's history, oldest first, as torch.cuda.memory._snapshot()'s "device_traces".
nlohmann::ordered_json device_traces(state& s) {
  nlohmann::ordered_json traces = nlohmann::ordered_json::array();
  for (int d = 0; d < s.devices; ++d) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    auto& h = s.history[static_cast<std::size_t>(d)];
    const std::lock_guard lock{h.mutex};
    for (std::size_t i = 0; i < h.ring.size(); ++i) {
      const auto& e = h.ring[(h.next + i) % h.ring.size()];
      nlohmann::ordered_json j{{"action", e.action}, {"addr", e.addr}, {"size", e.size}, {"stream", e.stream},
                               {"time_us", e.time_us}, {"frames", nlohmann::ordered_json::array()}};
      if (std::string_view{e.action} == "oom") j["device_free"] = e.device_free;
      list.push_back(std::move(j));
    }
    traces.push_back(std::move(list));
  }
  return traces;
}

nlohmann::ordered_json snapshot_object(const mgm::pool_snapshot& snap, nlohmann::ordered_json traces) {
  using state_type = mgm::block_snapshot::state_type;
  nlohmann::ordered_json segments = nlohmann::ordered_json::array();
  for (const auto& seg : snap.segments) {
    nlohmann::ordered_json blocks = nlohmann::ordered_json::array();
    std::size_t total = 0;
    std::size_t allocated = 0;
    std::size_t active = 0;
    std::size_t requested = 0;
    std::uintptr_t stream = 0;
    for (const auto& b : seg.blocks) {
      if (b.state == state_type::unmapped) continue;  // address space of an expandable segment, no memory
      total += b.size;
      const char* st = "inactive";
      if (b.state == state_type::allocated) {
        st = "active_allocated";
        allocated += b.size;
        active += b.size;
        requested += b.requested;
      } else if (b.state == state_type::pending) {
        st = "active_pending_free";
        active += b.size;
      }
      stream = b.stream;
      blocks.push_back({{"address", b.address}, {"size", b.size}, {"requested_size", b.requested}, {"state", st},
                        {"frames", nlohmann::ordered_json::array()}});
    }
    segments.push_back({{"device", snap.device}, {"address", seg.address}, {"total_size", total},
                        {"allocated_size", allocated}, {"active_size", active}, {"requested_size", requested},
                        {"stream", stream}, {"segment_type", seg.small ? "small" : "large"},
                        {"segment_pool_id", {0, 0}}, {"is_expandable", seg.expandable},
                        {"frames", nlohmann::ordered_json::array()}, {"blocks", std::move(blocks)}});
  }
  return {{"segments", std::move(segments)}, {"device_traces", std::move(traces)}};
}

template <class F>
auto guarded(const char* who, F&& f, decltype(f()) on_error) noexcept -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    set_error(who, ": ", e.what());
  } catch (...) {
    set_error(who, ": an unknown exception");
  }
  return on_error;
}

// 0 when `f` found `ptr`, else -1 with "WHO: ptr NOT_FOUND" as the error.
template <class F>
int found_or_fail(const char* who, const void* ptr, const char* not_found, F&& f) noexcept {
  return guarded(
      who,
      [&] {
        if (f()) return 0;
        set_error(who, ": " + mgm::detail::describe_address(ptr) + " ", not_found);
        return -1;
      },
      -1);
}

int capture(void* stream, bool begin) noexcept {
  state* s = running();
  if (s == nullptr) return -1;
  return guarded(begin ? "mgm_sim_begin_capture" : "mgm_sim_end_capture", [&] { return s->pools->capture(stream, begin); },
                 -1);
}

}  // namespace

extern "C" {

MGM_C_API int mgm_abi_version(void) { return MGM_ABI_VERSION; }

MGM_C_API const char* mgm_last_error(void) {
  return t_error_lost ? "out of host memory while describing an error" : t_error.c_str();
}

MGM_C_API void mgm_clear_error(void) {
  t_error.clear();
  t_error_lost = false;
}

MGM_C_API void mgm_set_log_fn(mgm_log_fn fn, int min_level, void* user) {
  (void)the_state();  // its start installs stderr first: this call must come after, not be undone
  try {
    install(log_sink{fn, user, std::clamp(min_level, MGM_LOG_DEBUG, MGM_LOG_ERROR + 1)});
  } catch (...) {
    // no host memory for the new sink: the old one stays
  }
}

MGM_C_API int mgm_device_count(void) {
  state* s = running();
  return s == nullptr ? -1 : s->pools->device_count();
}

MGM_C_API int mgm_memory_info(int device, size_t* free_bytes, size_t* total_bytes) {
  state* s = running();
  if (s == nullptr || !valid_device(*s, device, "mgm_memory_info")) return -1;
  return guarded(
      "mgm_memory_info",
      [&] {
        if (free_bytes != nullptr) *free_bytes = s->pools->free_bytes(device);
        if (total_bytes != nullptr) *total_bytes = s->pools->total_bytes(device);
        return 0;
      },
      -1);
}

MGM_C_API const char* mgm_config(void) {
  thread_local std::string out;
  state* s = running();
  if (s == nullptr) return nullptr;
  return guarded(
      "mgm_config",
      [&]() -> const char* {
        out = s->pools->describe() + (s->sim_name.empty() ? "" : ",sim=" + s->sim_name);
        return out.c_str();
      },
      static_cast<const char*>(nullptr));
}

MGM_C_API void* mgm_alloc_async(size_t size, int device, void* stream) {
  state* s = running();
  if (s == nullptr || !valid_device(*s, device, "mgm_alloc_async")) return nullptr;
  if (size == 0) return nullptr;
  return guarded(
      "mgm_alloc_async", [&] { return allocate_recorded(*s, size, device, mgm::stream_ref{static_cast<cudaStream_t>(stream)}); },
      static_cast<void*>(nullptr));
}

MGM_C_API void mgm_free_async(void* ptr, size_t size, int device, void* stream) {
  if (ptr == nullptr) return;
  state* s = running();
  if (s == nullptr) return;
  if (!valid_device(*s, device, "mgm_free_async")) {
    try {
      t_error.append("; the pointer was not freed");
    } catch (...) {  // the reason alone, then
    }
    mgm::log(mgm::log_level::error, mgm_last_error());
    return;
  }
  // The pool refuses a pointer it did not hand out (its free cannot fail otherwise): it counts the
  // refusal, with why, and logs it. Other errors logged during a free (a block freed mid-capture
  // kept reserved, say) come from frees that happened.
  const std::uint64_t refused = mgm::refused_deallocations();
  const mgm::stream_ref on{static_cast<cudaStream_t>(stream)};
  if (s->recording.load(std::memory_order_relaxed)) [[unlikely]] {
    // The free and its entries under the history's lock: another thread that takes the block at
    // once records its "alloc" after them, never before.
    auto& h = s->history[static_cast<std::size_t>(device)];
    const std::lock_guard lock{h.mutex};
    s->pools->deallocate(device, ptr, size, on);
    if (mgm::refused_deallocations() == refused) {
      state::append(h, "free_requested", ptr, size, on);
      state::append(h, "free_completed", ptr, size, on);
    }
  } else {
    s->pools->deallocate(device, ptr, size, on);
  }
  if (mgm::refused_deallocations() != refused) set_error("mgm_free_async: ", mgm::last_refused_deallocation());
}

MGM_C_API int mgm_record_memory_history(size_t max_entries) {
  state* s = running();
  if (s == nullptr) return -1;
  static std::mutex one_at_a_time;  // two calls at once end with one's setting on every device
  const std::lock_guard alone{one_at_a_time};
  s->recording.store(false, std::memory_order_relaxed);
  for (int d = 0; d < s->devices; ++d) {
    auto& h = s->history[static_cast<std::size_t>(d)];
    const std::lock_guard lock{h.mutex};
    std::vector<state::trace_entry>{}.swap(h.ring);
    h.next = 0;
    h.max = max_entries;
  }
  s->recording.store(max_entries > 0, std::memory_order_relaxed);
  return 0;
}

MGM_C_API int mgm_forget_stream(int device, void* stream) {
  state* s = running();
  if (s == nullptr || !valid_device(*s, device, "mgm_forget_stream")) return -1;
  return guarded(
      "mgm_forget_stream",
      [&] {
        s->pools->forget_stream(device, mgm::stream_ref{static_cast<cudaStream_t>(stream)});
        return 0;
      },
      -1);
}

MGM_C_API int mgm_record_stream(void* ptr, void* stream) {
  state* s = running();
  if (s == nullptr) return -1;
  return guarded(
      "mgm_record_stream",
      [&] {
        if (s->pools->record_stream(ptr, mgm::stream_ref{static_cast<cudaStream_t>(stream)})) return 0;
        set_error("mgm_record_stream: no pool holds ", mgm::detail::describe_address(ptr));
        return -1;
      },
      -1);
}

MGM_C_API size_t mgm_empty_cache(void) {
  state* s = running();
  if (s == nullptr) return 0;
  return guarded(
      "mgm_empty_cache",
      [&] {
        std::size_t n = 0;
        for (int d = 0; d < s->pools->device_count(); ++d) {
          if (s->pools->has_pool(d)) n += s->pools->release(d);
        }
        return n;
      },
      std::size_t{0});
}

MGM_C_API int mgm_set_memory_fraction(double fraction, int device) {
  state* s = running();
  if (s == nullptr || !valid_device(*s, device, "mgm_set_memory_fraction")) return -1;
  return guarded(
      "mgm_set_memory_fraction",
      [&] {
        if (!(fraction >= 0.0 && fraction <= 1.0)) throw mgm::logic_error{std::to_string(fraction) + " is not in [0, 1]"};
        auto& limit = s->limits[static_cast<std::size_t>(device)];
        const double total = static_cast<double>(s->pools->total_bytes(device));
        const std::lock_guard lock{limit.mutex};
        limit.fraction = fraction;
        limit.cap.store(fraction >= 1.0 ? unlimited : static_cast<std::size_t>(fraction * total));
        if (s->pools->has_pool(device)) s->pools->set_max_reserved(device, limit.cap.load());
        return 0;
      },
      -1);
}

MGM_C_API const char* mgm_stats_json(int device) {
  thread_local std::string out;
  state* s = running();
  if (s == nullptr || !valid_device(*s, device, "mgm_stats_json")) return nullptr;
  return guarded(
      "mgm_stats_json",
      [&]() -> const char* {
        out = stats_object(s->pools->statistics(device)).dump();
        return out.c_str();
      },
      static_cast<const char*>(nullptr));
}

MGM_C_API const char* mgm_snapshot_json(int device) {
  thread_local std::string out;
  state* s = running();
  if (s == nullptr || !valid_device(*s, device, "mgm_snapshot_json")) return nullptr;
  return guarded(
      "mgm_snapshot_json",
      [&]() -> const char* {
        out = snapshot_object(s->pools->snapshot(device), device_traces(*s)).dump();
        return out.c_str();
      },
      static_cast<const char*>(nullptr));
}

MGM_C_API void* mgm_sim_create_stream(int device) {
  state* s = running();
  if (s == nullptr || !valid_device(*s, device, "mgm_sim_create_stream")) return nullptr;
  return guarded("mgm_sim_create_stream", [&] { return s->pools->create_stream(device); }, static_cast<void*>(nullptr));
}

MGM_C_API int mgm_sim_begin_capture(void* stream) { return capture(stream, true); }

MGM_C_API int mgm_sim_end_capture(void* stream) { return capture(stream, false); }

MGM_C_API int mgm_sim_enqueue(void* stream, unsigned long long nanoseconds) {
  state* s = running();
  if (s == nullptr) return -1;
  return guarded("mgm_sim_enqueue", [&] { return s->pools->enqueue(stream, nanoseconds); }, -1);
}

// ---- PyTorch ----------------------------------------------------------------------------------

MGM_C_API void* mgm_torch_alloc(size_t size, int device, mgm_stream_t stream) {
  state* s = running();
  if (s == nullptr) throw mgm::logic_error{t_error};
  if (!valid_device(*s, device, "mgm_torch_alloc")) throw mgm::logic_error{t_error};
  if (size == 0) return nullptr;
  try {
    return allocate_recorded(*s, size, device, mgm::stream_ref{reinterpret_cast<cudaStream_t>(stream)});
  } catch (const mgm::out_of_memory& e) {
    // PyTorch's words first, so that the handlers and people who look for them find them.
    set_error("CUDA out of memory (MultiGpuMem's pool): ", e.what());
    throw mgm::out_of_memory{t_error, e.requested_bytes()};
  } catch (const std::exception& e) {
    set_error("mgm_torch_alloc: ", e.what());
    throw;
  }
}

MGM_C_API void mgm_torch_free(void* ptr, size_t size, int device, mgm_stream_t stream) {
  mgm_free_async(ptr, size, device, stream);
}

MGM_C_API void mgm_torch_init(int device_count) {
  (void)device_count;  // PyTorch may pass 0 before it knows; the pools start on their first use
  (void)running();
}

MGM_C_API void mgm_torch_empty_cache(void) { (void)mgm_empty_cache(); }

MGM_C_API void mgm_torch_set_memory_fraction(double fraction, int device) {
  if (mgm_set_memory_fraction(fraction, device) != 0) mgm::log(mgm::log_level::error, t_error);
}

MGM_C_API void mgm_torch_record_stream(void* ptr, mgm_stream_t stream) {
  if (mgm_record_stream(ptr, stream) != 0) mgm::log(mgm::log_level::error, t_error);
}

MGM_C_API void* mgm_torch_base_alloc(void* ptr, size_t* size) {
  state* s = running();
  void* base = ptr;
  std::size_t bytes = 0;
  try {
    if (s != nullptr && s->pools->segment_of(ptr, base, bytes)) {
      if (size != nullptr) *size = bytes;
      return base;
    }
  } catch (...) {
  }
  if (size != nullptr) *size = 0;
  return ptr;
}

MGM_C_API const char* mgm_ipc_export(void* ptr, int device) {
  thread_local std::string out;
  state* s = running();
  if (s == nullptr || !valid_device(*s, device, "mgm_ipc_export")) return nullptr;
  return guarded(
      "mgm_ipc_export",
      [&]() -> const char* {
        out = s->pools->export_token(ptr, device);
        return out.c_str();
      },
      static_cast<const char*>(nullptr));
}

MGM_C_API int mgm_ipc_unexport(void* ptr) {
  state* s = running();
  if (s == nullptr) return -1;
  return found_or_fail("mgm_ipc_unexport", ptr, "is not exported", [&] { return s->pools->unexport(ptr); });
}

MGM_C_API void* mgm_ipc_import(const char* token, int device) {
  state* s = running();
  if (s == nullptr || !valid_device(*s, device, "mgm_ipc_import")) return nullptr;
  if (token == nullptr) {
    set_error("mgm_ipc_import: no token");
    return nullptr;
  }
  return guarded("mgm_ipc_import", [&] { return s->pools->import_token(token, device); }, static_cast<void*>(nullptr));
}

MGM_C_API int mgm_ipc_close(void* ptr) {
  state* s = running();
  if (s == nullptr) return -1;
  return found_or_fail("mgm_ipc_close", ptr, "is not a block mgm_ipc_import mapped",
                       [&] { return s->pools->close_import(ptr); });
}

}  // extern "C"
