// The simulated machine's state. Private to src/sim: the public handles forward here.
//
// Locks: each device has its own mutex; the virtual-memory tables have `vmm_mutex`, the peer
// table `peer_mutex`, graphs and captures `capture_mutex`, the judge's tables `oracle_mutex`.
// Order: oracle_mutex, vmm_mutex, capture_mutex, then a device mutex; a device mutex is never
// held while taking another device's (cross-device calls take them one after the other);
// peer_mutex is taken before a device mutex and with no other lock held.
#pragma once

#include "address_space.hpp"

#include <mgm/sim/cost_model.hpp>
#include <mgm/sim/device_spec.hpp>
#include <mgm/sim/hazard.hpp>
#include <mgm/sim/machine.hpp>
#include <mgm/sim/oracle.hpp>
#include <mgm/stream.hpp>
#include <mgm/topology/topology.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <thread>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace mgm::sim::detail {

using mgm::detail::hex;  // "0x7f00..." for messages
// The calling thread's capture mode (seams.cpp).
[[nodiscard]] capture_mode current_capture_mode() noexcept;

// A stream as the judge names it: device, index and generation (a destroyed stream's index
// is reused with the next generation, so a new stream never passes for the old one).
using stream_id = std::uint64_t;
constexpr stream_id make_stream_id(std::uint32_t device, std::uint32_t index, std::uint32_t generation) noexcept {
  return (std::uint64_t{generation & 0xFFFFFFu} << 40) | (std::uint64_t{device & 0xFFu} << 32) | index;
}
constexpr std::uint32_t device_of_id(stream_id s) noexcept { return static_cast<std::uint32_t>((s >> 32) & 0xFFu); }
constexpr std::uint32_t index_of_id(stream_id s) noexcept { return static_cast<std::uint32_t>(s & 0xFFFFFFFFu); }

// The latest point of another stream's work that this stream's (or event's) later work is
// ordered after: a vector clock, kept only while the judge is on.
struct clock_entry {
  stream_id stream;
  std::int64_t ns;
};
using vector_clock = std::vector<clock_entry>;
void merge(vector_clock& into, const vector_clock& from);
void advance_to(vector_clock& c, stream_id s, std::int64_t ns);
[[nodiscard]] std::int64_t known(const vector_clock& c, stream_id s) noexcept;  // INT64_MIN: none

struct stream_state {
  std::int64_t tail_ns{0};
  bool alive{true};
  std::uint32_t generation{0};
  std::uint64_t graph{0};         // non-zero: capturing into this graph
  std::int64_t captured_ns{0};    // work enqueued during the capture (the graph's duration)
  vector_clock clock;
};

struct event_state {
  std::int64_t stamp_ns{0};
  bool recorded{false};
  bool live{false};
  stream_id source{0};
  vector_clock clock;
};

struct fault_state {
  std::uint64_t countdown{0};  // 0: none pending
  double probability{0.0};
  std::uint64_t rng{0};
  bool lost{false};
  std::uint64_t injected{0};

  // Advances the plan by one allocation; true when this one must fail.
  bool should_fail() noexcept;
};

struct device_state {
  device_spec spec;
  std::byte* base{nullptr};
  std::size_t capacity{0};  // bytes that can be allocated (charged) at once; also the main range's size

  mutable std::mutex mutex;
  std::size_t used{0};
  std::size_t peak_used{0};
  address_space space{0};
  std::unordered_map<std::uintptr_t, std::size_t> live;  // pointer -> charged bytes
  // Blocks placed outside the main range because no contiguous piece of it was free although
  // enough memory was (a GPU's driver remaps pages instead): pointer -> {mapping, length}.
  std::map<std::uintptr_t, std::pair<void*, std::size_t>> overflow;
  std::uint64_t invalid_frees{0};
  std::map<std::uint32_t, std::pair<std::string, std::size_t>> foreign;  // pid -> {name, bytes}
  std::int64_t now_ns{0};
  std::vector<stream_state> streams{1};  // [0] is the default stream
  std::vector<std::uint32_t> dead_streams;  // indices a new stream reuses, as CUDA reuses handles
  std::int64_t dead_tail_ns{0};             // the last work of destroyed streams (device syncs wait for it)
  std::vector<event_state> events;
  std::vector<std::uint32_t> free_events;
  fault_state faults;
  modelled_costs costs;
  std::atomic<std::int64_t> bookkeeping_ns{0};

  // The host waits for all of the device's work, destroyed streams' included (cudaFree,
  // cuMemUnmap, cudaDeviceSynchronize). Call with the lock held.
  void wait_for_all_work() noexcept {
    for (const auto& s : streams) now_ns = std::max(now_ns, s.tail_ns);
    now_ns = std::max(now_ns, dead_tail_ns);
  }
};

// Measures the host time of one call whose time is modelled, into its device's bookkeeping.
class bookkeeping_timer {
 public:
  explicit bookkeeping_timer(device_state& dev) noexcept : dev_{dev}, start_{std::chrono::steady_clock::now()} {}
  ~bookkeeping_timer() {
    const auto dt = std::chrono::steady_clock::now() - start_;
    dev_.bookkeeping_ns.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(dt).count(),
                                  std::memory_order_relaxed);
  }
  bookkeeping_timer(const bookkeeping_timer&) = delete;
  bookkeeping_timer& operator=(const bookkeeping_timer&) = delete;

 private:
  device_state& dev_;
  std::chrono::steady_clock::time_point start_;
};

// ---- graphs and captures (capture_mutex) ----

struct graph_state {
  std::uint32_t device{0};
  stream_id stream{0};           // the capturing stream
  capture_mode mode{capture_mode::global};
  std::thread::id thread;
  bool capturing{true};
  bool invalidated{false};
  bool destroyed{false};
  std::int64_t duration_ns{0};
  bool launched{false};
  vector_clock launches;         // each stream it was launched on, and when its last launch there ends
  std::vector<std::pair<std::uintptr_t, std::size_t>> ranges;  // what the capture allocated or freed
};

// ---- the judge's tables (oracle_mutex) ----

// One use of a range that may not have ended: work on `stream` up to `until_ns` on its device's
// clock, or (`graph` != 0) a graph's, until it is destroyed and its last launch ends.
struct range_use {
  stream_id stream{0};
  std::int64_t until_ns{0};
  std::uint64_t graph{0};
};

// Who a range is handed to: the host, or work on a stream (inside a capture when graph != 0).
struct range_user {
  bool host{false};
  std::uint32_t device{0};
  stream_id stream{0};
  std::uint64_t graph{0};
  std::int64_t start_ns{0};  // when its work may start: the host's now, or the stream's tail
  vector_clock clock;        // the stream's clock (empty for the host)
};

struct tracked_range {
  std::size_t bytes{0};
  std::uint32_t device{0};
  bool live{false};
  range_user holder;              // live: to whom it was handed
  std::vector<stream_id> extra;   // live: streams named by record_stream
  std::vector<range_use> uses;    // freed: uses that may not have ended
};

struct physical_allocation {
  device_id device;
  std::size_t bytes;
  std::size_t mappings{0};
  bool released{false};
  int fd{-1};             // shareable memory: the memfd behind it (closed when it is freed)
  bool imported{false};   // another process's memory: charged to no device here
};

struct mapping {
  std::size_t bytes;
  std::uint64_t handle;
  std::vector<device_id> readers{};  // set by set_access
  bool shared{false};                // a memfd mapped over the reservation (restored on unmap)
};

struct stream_key {
  std::uint32_t device;
  std::uint32_t index;
};

class machine_state {
 public:
  machine_state(std::vector<device_spec> specs, topology links, std::string name, machine_options options);
  ~machine_state();
  machine_state(const machine_state&) = delete;
  machine_state& operator=(const machine_state&) = delete;

  std::string name;
  topology links;
  cost_model costs;
  std::uint16_t serial;
  std::vector<std::unique_ptr<device_state>> devices;

  mutable std::mutex vmm_mutex;
  std::map<std::uintptr_t, std::pair<std::size_t, device_id>> reservations;  // base -> bytes, device
  std::map<std::uintptr_t, mapping> mappings;          // va -> mapping
  std::unordered_map<std::uint64_t, physical_allocation> physical;
  std::uint64_t next_handle{1};

  std::mutex peer_mutex;
  std::vector<std::uint8_t> peer_enabled;  // [accessor * n + owner]
  std::vector<std::uint8_t> peer_ever;     // [accessor * n + owner]: enabled once (priced as a repeat after)
  std::uint64_t peer_copies{0};            // peer_ops::copy, GPU to GPU over a peer path (peer_mutex)
  std::uint64_t staged_copies{0};          // peer_ops::copy through host memory (peer_mutex)
  std::uint64_t copied_bytes{0};

  std::mutex capture_mutex;
  std::vector<graph_state> graphs;          // graph id = index + 1
  std::vector<std::uint64_t> capturing;     // graphs being captured now
  std::atomic<int> active_captures{0};      // capturing.size(), read without the lock

  std::atomic<oracle_mode> judging{oracle_mode::enforce};
  mutable std::mutex oracle_mutex;
  std::map<std::uintptr_t, tracked_range> ranges;  // by first byte; no two overlap
  std::uintptr_t prune_cursor{0};
  std::vector<hazard> found;
  // Graphs whose captures shared memory (a shared private pool): their launches must not overlap.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> graph_sharing;

  [[nodiscard]] bool judge_on() const noexcept { return judging.load(std::memory_order_relaxed) != oracle_mode::off; }
  // Lists `h`; throws it when enforcing and `may_throw`. Takes oracle_mutex: never call with it held.
  void report(hazard h, bool may_throw);
  // The same, with oracle_mutex held by the caller (nothing is thrown).
  void report_locked(const hazard& h);
  // A virtual-memory rule broken: listed; thrown as stream_hazard when enforcing, else as the
  // driver's cuda_error (`cudaErrorInvalidValue`) when `may_throw`.
  void vmm_breach(const std::string& what, device_id d, std::uintptr_t va, std::size_t bytes, bool may_throw);
  // Frees a physical allocation no mapping uses: its device's charge (unless imported), its memfd.
  // Call with vmm_mutex held.
  void free_physical(std::unordered_map<std::uint64_t, physical_allocation>::iterator it);

  // Captures: may the calling thread make a potentially unsafe call now? When not, the
  // captures it interferes with are invalidated and cuda_error is thrown.
  void check_unsafe_call(const char* call);
  [[nodiscard]] std::string describe_stream(stream_id s) const;
  // Work, an event or an allocation on a destroyed stream: a hazard (thrown when enforcing).
  void report_dead_stream(device_id d, stream_id s, const char* call);

  // The device, or mgm::logic_error naming the valid range.
  device_state& device(device_id d) const;
  std::string describe(device_id d) const;  // "sim device 2 (NVIDIA GeForce RTX 4080)"
  // Throws cuda_error when the device was lost. Call with its lock held.
  void check_alive(const device_state& dev, device_id d) const;

  stream_ref encode(std::uint32_t device, std::uint32_t index) const noexcept;
  // The stream's device and index; a null stream means `fallback`'s default stream. Validates
  // the index under the device's lock (the caller holds it).
  stream_key decode(stream_ref s, device_id fallback) const;
  stream_key decode_strict(stream_ref s) const;  // null is an error

  // Adds a call's modelled cost to `dev` (its lock held).
  void charge(device_state& dev, driver_call k, double us) noexcept { dev.costs.add(k, us); }
  // The device whose memory holds `addr` (the VMM mappings, then each device's ranges).
  [[nodiscard]] std::optional<device_id> owner_of(std::uintptr_t addr) const noexcept;
  // The peers that may access `d`'s cudaMalloc memory (peer_mutex taken).
  std::size_t peers_of(device_id d);

  void* allocate(device_id d, std::size_t bytes, std::size_t alignment, const stream_ref* stream);
  void deallocate(device_id d, void* p, std::size_t bytes, const stream_ref* stream) noexcept;

  [[noreturn]] void throw_out_of_memory(const device_state& dev, device_id d, std::size_t bytes,
                                        const char* what, bool injected) const;
  void uncharge(device_id d, std::size_t bytes);
  bool can_access(device_id accessor, device_id owner) const;
};

}  // namespace mgm::sim::detail
