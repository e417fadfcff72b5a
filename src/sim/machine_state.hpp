// The simulated machine's state. Private to src/sim: the public handles forward here.
//
// Locks: each device has its own mutex; the virtual-memory tables have `vmm_mutex`, the peer
// table `peer_mutex`. Order: vmm_mutex, then a device mutex; a device mutex is never held
// while taking another device's (cross-device calls take them one after the other).
#pragma once

#include "address_space.hpp"

#include <mgm/sim/cost_model.hpp>
#include <mgm/sim/device_spec.hpp>
#include <mgm/sim/machine.hpp>
#include <mgm/stream.hpp>
#include <mgm/topology/topology.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace mgm::sim::detail {

struct stream_state {
  std::int64_t tail_ns{0};
  bool capturing{false};
};

struct event_state {
  std::int64_t stamp_ns{0};
  bool recorded{false};
  bool live{false};
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
  std::int64_t now_ns{0};
  std::vector<stream_state> streams{1};  // [0] is the default stream
  std::size_t capturing{0};
  std::vector<event_state> events;
  std::vector<std::uint32_t> free_events;
  fault_state faults;
  modelled_costs costs;
};

struct physical_allocation {
  device_id device;
  std::size_t bytes;
  std::size_t mappings{0};
  bool released{false};
};

struct mapping {
  std::size_t bytes;
  std::uint64_t handle;
  std::vector<device_id> readers{};  // set by set_access
};

struct stream_key {
  std::uint32_t device;
  std::uint32_t index;
};

class machine_state {
 public:
  machine_state(std::vector<device_spec> specs, topology links, std::string name);
  ~machine_state();
  machine_state(const machine_state&) = delete;
  machine_state& operator=(const machine_state&) = delete;

  std::string name;
  topology links;
  cost_model costs;
  std::uint16_t serial;
  std::vector<std::unique_ptr<device_state>> devices;

  std::mutex vmm_mutex;
  std::map<std::uintptr_t, std::size_t> reservations;  // base -> bytes
  std::map<std::uintptr_t, mapping> mappings;          // va -> mapping
  std::unordered_map<std::uint64_t, physical_allocation> physical;
  std::uint64_t next_handle{1};

  std::mutex peer_mutex;
  std::vector<std::uint8_t> peer_enabled;  // [accessor * n + owner]

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

  void* allocate(device_id d, std::size_t bytes, std::size_t alignment, const stream_ref* stream);
  void deallocate(device_id d, void* p, std::size_t bytes, const stream_ref* stream) noexcept;

  [[noreturn]] void throw_out_of_memory(const device_state& dev, device_id d, std::size_t bytes,
                                        const char* what, bool injected) const;
  void uncharge(device_id d, std::size_t bytes);
  bool can_access(device_id accessor, device_id owner) const;
};

}  // namespace mgm::sim::detail
