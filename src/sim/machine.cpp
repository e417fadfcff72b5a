#include "machine_state.hpp"

#include <mgm/bytes.hpp>
#include <mgm/concepts.hpp>
#include <mgm/detail/checks.hpp>
#include <mgm/error.hpp>
#include <mgm/log.hpp>
#include <mgm/sim/machine.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace mgm::sim {
namespace detail {
namespace {

constexpr std::size_t allocation_granule = 256;         // every allocation is charged in these
constexpr std::size_t max_alignment = std::size_t{2} << 20;
constexpr std::uint64_t stream_tag = 0x5EULL << 56;      // never a canonical x86-64/arm64 user address

std::atomic<std::uint16_t> next_serial{1};

std::int64_t to_ns(std::chrono::nanoseconds d) noexcept { return static_cast<std::int64_t>(d.count()); }

std::byte* map_device_memory(std::size_t bytes, const std::string& who) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    throw bad_alloc{who + ": cannot reserve " + format_bytes(bytes) +
                    " of host address space for the simulated device memory (mmap: " + std::strerror(errno) +
                    "); is vm.overcommit_memory 2?"};
  }
  return static_cast<std::byte*>(p);
}

}  // namespace

bool fault_state::should_fail() noexcept {
  if (countdown != 0 && --countdown == 0) {
    ++injected;
    return true;
  }
  if (probability > 0.0) {
    // splitmix64: small, fast and fully determined by the seed.
    std::uint64_t z = (rng += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    const double draw = static_cast<double>(z >> 11) * 0x1.0p-53;
    if (draw < probability) {
      ++injected;
      return true;
    }
  }
  return false;
}

machine_state::machine_state(std::vector<device_spec> specs, topology topo, std::string machine_name,
                             machine_options options)
    : name{std::move(machine_name)},
      links{std::move(topo)},
      costs{options.costs},
      serial{next_serial.fetch_add(1)},
      judging{options.oracle} {
  MGM_EXPECTS(!specs.empty(), "a simulated machine needs at least one device");
  MGM_EXPECTS(specs.size() <= max_devices,
              "a simulated machine holds at most " + std::to_string(max_devices) + " devices, not " +
                  std::to_string(specs.size()));
  MGM_EXPECTS(links.gpu_count() == specs.size(),
              "the topology describes " + std::to_string(links.gpu_count()) + " GPUs but the machine has " +
                  std::to_string(specs.size()) + " devices");
  devices.reserve(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    MGM_EXPECTS(specs[i].memory_bytes >= allocation_granule,
                "device " + std::to_string(i) + " (" + specs[i].name + ") has no memory");
    auto dev = std::make_unique<device_state>();
    dev->spec = std::move(specs[i]);
    dev->capacity = dev->spec.memory_bytes & ~(allocation_granule - 1);
    dev->space = address_space{dev->capacity};
    try {
      dev->base = map_device_memory(dev->capacity, "sim device " + std::to_string(i));
    } catch (...) {
      for (auto& d : devices) ::munmap(d->base, d->capacity);
      throw;
    }
    devices.push_back(std::move(dev));
  }
  peer_enabled.assign(devices.size() * devices.size(), 0);
  peer_ever.assign(devices.size() * devices.size(), 0);
}

machine_state::~machine_state() {
  for (auto& [va, r] : reservations) ::munmap(reinterpret_cast<void*>(va), r.first);
  for (auto& [h, p] : physical) {
    if (p.fd >= 0) ::close(p.fd);
  }
  for (auto& dev : devices) {
    ::munmap(dev->base, dev->capacity);
    for (auto& [p, mapping] : dev->overflow) ::munmap(mapping.first, mapping.second);
  }
}

device_state& machine_state::device(device_id d) const {
  if (d.is_host() || d.value() < 0 || d.index() >= devices.size()) [[unlikely]] {
    MGM_FAIL("device " + std::to_string(d.value()) + " is out of range: the simulated machine '" + name + "' has " +
             std::to_string(devices.size()) + " devices (0-" + std::to_string(devices.size() - 1) + ")");
  }
  return *devices[d.index()];
}

std::string machine_state::describe(device_id d) const {
  return "sim device " + std::to_string(d.value()) + " (" + devices[d.index()]->spec.name + ")";
}

void machine_state::check_alive(const device_state& dev, device_id d) const {
  if (dev.faults.lost) [[unlikely]] {
    throw cuda_error{cudaErrorDevicesUnavailable, describe(d) + " is lost (fault injection): cudaErrorDevicesUnavailable"};
  }
}

stream_ref machine_state::encode(std::uint32_t device_index, std::uint32_t index) const noexcept {
  const std::uint64_t v =
      stream_tag | (std::uint64_t{serial} << 40) | (std::uint64_t{device_index} << 32) | std::uint64_t{index};
  return stream_ref{reinterpret_cast<cudaStream_t>(static_cast<std::uintptr_t>(v))};
}

stream_key machine_state::decode_strict(stream_ref s) const {
  const auto v = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(s.get()));
  const auto dev = static_cast<std::uint32_t>((v >> 32) & 0xFF);
  if ((v & (0xFFULL << 56)) != stream_tag || ((v >> 40) & 0xFFFF) != serial || dev >= devices.size()) [[unlikely]] {
    MGM_FAIL("stream " + std::to_string(v) + " does not belong to the simulated machine '" + name +
             "' (a null stream needs a device: use machine::default_stream)");
  }
  return {dev, static_cast<std::uint32_t>(v & 0xFFFFFFFFULL)};
}

stream_key machine_state::decode(stream_ref s, device_id fallback) const {
  if (s.get() == nullptr) return {static_cast<std::uint32_t>(fallback.index()), 0};
  return decode_strict(s);
}

void machine_state::throw_out_of_memory(const device_state& dev, device_id d, std::size_t bytes, const char* what,
                                        bool injected) const {
  std::string msg = describe(d) + ": out of memory " + what + " " + mgm::detail::describe_bytes(bytes);
  if (injected) {
    msg += " (injected fault)";
  } else {
    msg += ": " + format_bytes(dev.used) + " in use, " + format_bytes(dev.capacity - dev.used) + " free of " +
           format_bytes(dev.capacity) + " capacity";

  }
  throw out_of_memory{msg, bytes};
}

void* machine_state::allocate(device_id d, std::size_t bytes, std::size_t alignment, const stream_ref* stream) {
  mgm::detail::check_alignment(alignment, max_alignment, "sim::device_allocator");
  device_state& dev = device(d);
  if (bytes == 0) return nullptr;
  if (stream != nullptr) {
    const stream_key key = decode(*stream, d);
    bool alive = false;
    std::uint32_t generation = 0;
    {
      const std::lock_guard lock{dev.mutex};
      MGM_EXPECTS(key.device == d.index() && key.index < dev.streams.size(),
                  "allocate_async on " + describe(d) + " was given a stream of another device");
      alive = dev.streams[key.index].alive;
      generation = dev.streams[key.index].generation;
    }
    if (!alive) [[unlikely]] {
      report_dead_stream(d, make_stream_id(key.device, key.index, generation), "cudaMallocAsync");
    }
  }
  check_unsafe_call("cudaMalloc");
  const std::size_t peers = peers_of(d);
  const bookkeeping_timer timer{dev};
  const std::lock_guard lock{dev.mutex};
  check_alive(dev, d);
  std::size_t charged = 0;
  if (dev.faults.should_fail()) {
    charge(dev, driver_call::malloc, costs.malloc_us);
    throw_out_of_memory(dev, d, bytes, "allocating", true);
  }
  if (bytes > dev.capacity || !mgm::detail::round_up(bytes, allocation_granule, charged) ||
      charged > dev.capacity - dev.used) {
    charge(dev, driver_call::malloc, costs.malloc_us);
    throw_out_of_memory(dev, d, bytes, "allocating", false);
  }
  charge(dev, driver_call::malloc, costs.malloc_charge_us(charged, dev.used, dev.peak_used, peers));
  // A host bad_alloc leaves the device as it was: the table's node and buckets are made first.
  std::unordered_map<std::uintptr_t, std::size_t> staging;
  staging.emplace(0, charged);
  auto live_node = staging.extract(staging.begin());
  dev.live.reserve(dev.live.size() + 1);  // the insert below cannot rehash
  std::byte* p = nullptr;
  if (const auto offset = dev.space.allocate(charged, std::max(alignment, allocation_granule))) {
    p = dev.base + *offset;
  } else {
    // Enough memory is free but not in one piece of the main range. A GPU's driver maps pages
    // into a fresh virtual range then; the simulator maps a range of its own for the block.
    const std::size_t align = std::max(alignment, std::size_t{4096});
    void* raw = ::mmap(nullptr, charged + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
    if (raw == MAP_FAILED) throw_out_of_memory(dev, d, bytes, "allocating", false);
    const auto aligned = (reinterpret_cast<std::uintptr_t>(raw) + align - 1) & ~(align - 1);
    p = reinterpret_cast<std::byte*>(aligned);
    try {
      dev.overflow.emplace(aligned, std::pair{raw, charged + align});
    } catch (...) {
      ::munmap(raw, charged + align);
      throw;
    }
  }
  dev.used += charged;
  dev.peak_used = std::max(dev.peak_used, dev.used);
  live_node.key() = reinterpret_cast<std::uintptr_t>(p);
  dev.live.insert(std::move(live_node));
  return p;
}

void machine_state::deallocate(device_id d, void* p, std::size_t bytes, const stream_ref* stream) noexcept {
  if (p == nullptr) return;
  std::string report;
  try {
    device_state& dev = device(d);
    check_unsafe_call("cudaFree");
    const bookkeeping_timer timer{dev};
    const std::lock_guard lock{dev.mutex};
    if (stream != nullptr && stream->get() != nullptr) {
      const stream_key key = decode_strict(*stream);
      if (key.device != d.index()) {
        report += describe(d) + ": deallocate_async was given a stream of sim device " + std::to_string(key.device) +
                  "; freed anyway. ";
      }
    }
    const auto it = dev.live.find(reinterpret_cast<std::uintptr_t>(p));
    if (it == dev.live.end()) {
      ++dev.invalid_frees;
      const auto owner = [&]() -> std::string {
        const auto* b = static_cast<const std::byte*>(p);
        for (std::size_t i = 0; i < devices.size(); ++i) {
          if (b >= devices[i]->base && b < devices[i]->base + devices[i]->capacity) {
            return i == d.index() ? std::string{"it lies in this device's memory but is not a live allocation "
                                                "(already freed, or not the start of a block)"}
                                  : "it belongs to sim device " + std::to_string(i);
          }
        }
        return "it is not simulated device memory";
      }();
      report += describe(d) + ": deallocate(" + mgm::detail::describe_address(p) + ", " + std::to_string(bytes) +
                ") of a pointer the device does not hold: " + owner + "; nothing was freed";
    } else {
      const std::size_t charged = it->second;
      std::size_t expected = 0;
      if (bytes != 0 && (!mgm::detail::round_up(bytes, allocation_granule, expected) || expected != charged)) {
        report += describe(d) + ": deallocate of " + std::to_string(bytes) + " bytes for a block of " +
                  std::to_string(charged) + " bytes; freed the block. ";
      }
      dev.live.erase(it);
      dev.used -= charged;
      if (const auto o = dev.overflow.find(reinterpret_cast<std::uintptr_t>(p)); o != dev.overflow.end()) {
        ::munmap(o->second.first, o->second.second);
        dev.overflow.erase(o);
      } else {
        const std::size_t offset = static_cast<std::size_t>(static_cast<std::byte*>(p) - dev.base);
        dev.space.free(offset, charged);
        // Give the host its pages back (freed device memory need not keep its contents).
        constexpr std::size_t page = 4096;
        const std::size_t first = (offset + page - 1) & ~(page - 1);
        const std::size_t last = (offset + charged) & ~(page - 1);
        if (last > first && last - first >= (std::size_t{1} << 20)) {
          ::madvise(dev.base + first, last - first, MADV_DONTNEED);
        }
      }
      charge(dev, driver_call::free, costs.free_charge_us(charged));
      // cudaFree synchronises the device: the host waits for all of its work.
      dev.wait_for_all_work();
    }
  } catch (const std::exception& e) {
    report += e.what();
  }
  if (!report.empty()) log(log_level::error, report);
}

void machine_state::uncharge(device_id d, std::size_t bytes) {
  device_state& dev = device(d);
  const std::lock_guard lock{dev.mutex};
  dev.used -= bytes;
}

bool machine_state::can_access(device_id accessor, device_id owner) const {
  const device_state& a = device(accessor);
  const device_state& o = device(owner);
  if (accessor == owner) return true;
  const gpu_path& p = links.path(accessor, owner);
  switch (p.type) {
    case path_type::loc:
    case path_type::nvl:
    case path_type::nvb:
    case path_type::c2c: return true;
    case path_type::pix:
    case path_type::pxb:
    case path_type::p2c:
    case path_type::pxn:
    case path_type::phb: return a.spec.pcie_p2p && o.spec.pcie_p2p;
    case path_type::sys:
    case path_type::net:
    case path_type::dis: return false;
  }
  return false;
}

}  // namespace detail

// ---- machine -------------------------------------------------------------------------------

namespace {
topology default_links(const std::vector<device_spec>& specs) {
  std::vector<gpu_info> gpus;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    gpu_info g;
    g.ordinal = static_cast<int>(i);
    g.name = specs[i].name;
    g.memory_bytes = specs[i].memory_bytes;
    g.compute_capability = specs[i].compute_capability;
    g.numa_node = specs[i].numa_node;
    g.pcie_p2p = specs[i].pcie_p2p;
    gpus.push_back(std::move(g));
  }
  topology t{std::move(gpus)};
  for (std::size_t a = 0; a < specs.size(); ++a) {
    for (std::size_t b = a + 1; b < specs.size(); ++b) {
      const bool same_node =
          !specs[a].numa_node || !specs[b].numa_node || *specs[a].numa_node == *specs[b].numa_node;
      t.set_path(device_id{static_cast<int>(a)}, device_id{static_cast<int>(b)},
                 same_node ? gpu_path{path_type::phb, smi_label::phb, 0} : gpu_path{path_type::sys, smi_label::sys, 0});
    }
  }
  return t;
}
}  // namespace

machine::machine(std::vector<device_spec> devices, machine_options options) {
  topology links = default_links(devices);
  state_ = std::make_unique<detail::machine_state>(std::move(devices), std::move(links), "custom", options);
}
machine::machine(std::vector<device_spec> devices, topology links, std::string name, machine_options options)
    : state_{std::make_unique<detail::machine_state>(std::move(devices), std::move(links), std::move(name), options)} {}
machine::~machine() = default;
machine::machine(machine&&) noexcept = default;
machine& machine::operator=(machine&&) noexcept = default;

machine machine::from_string(std::string_view text, machine_options options) {
  for (const auto name : preset_names()) {
    if (text == name) return preset(name, options);
  }
  try {
    return machine{parse_device_list(text), options};
  } catch (const parse_error& e) {
    std::string names;
    for (const auto n : preset_names()) names += (names.empty() ? "" : ", ") + std::string{n};
    throw parse_error{std::string{e.what()} + " (not a preset either: " + names + ")", e.line(), e.column()};
  }
}

int machine::device_count() const noexcept { return static_cast<int>(state_->devices.size()); }
const std::string& machine::name() const noexcept { return state_->name; }
const device_spec& machine::spec(device_id d) const { return state_->device(d).spec; }
const topology& machine::links() const noexcept { return state_->links; }

device_allocator machine::allocator(device_id d) const {
  (void)state_->device(d);
  return device_allocator{state_.get(), d};
}

device_allocator machine::allocator(device_id d, vmm_sharing sharing) const {
  (void)state_->device(d);
  return device_allocator{state_.get(), d, sharing};
}

memory_info machine::memory(device_id d) const {
  const auto& dev = state_->device(d);
  const std::lock_guard lock{dev.mutex};
  return {dev.capacity, dev.used, dev.capacity - dev.used, dev.peak_used, dev.capacity - dev.used, dev.live.size()};
}

std::optional<device_id> machine::owner_of(const void* p) const noexcept {
  return state_->owner_of(reinterpret_cast<std::uintptr_t>(p));
}

void machine::hold_foreign(device_id d, std::uint32_t pid, std::string name, std::size_t bytes) {
  auto& dev = state_->device(d);
  const std::lock_guard lock{dev.mutex};
  std::size_t charged = 0;
  if (!mgm::detail::round_up(bytes, detail::allocation_granule, charged) || charged > dev.capacity - dev.used) {
    throw out_of_memory{state_->describe(d) + ": process " + std::to_string(pid) + " cannot hold " +
                            mgm::detail::describe_bytes(bytes) + ", " + mgm::detail::describe_bytes(dev.capacity - dev.used) +
                            " are free",
                        bytes};
  }
  auto& held = dev.foreign[pid];
  held.first = std::move(name);
  held.second += charged;
  dev.used += charged;
  dev.peak_used = std::max(dev.peak_used, dev.used);
}

std::size_t machine::release_foreign(device_id d, std::uint32_t pid) {
  auto& dev = state_->device(d);
  const std::lock_guard lock{dev.mutex};
  const auto it = dev.foreign.find(pid);
  if (it == dev.foreign.end()) return 0;
  const std::size_t bytes = it->second.second;
  dev.used -= bytes;
  dev.foreign.erase(it);
  return bytes;
}

std::vector<machine::foreign_process> machine::foreign_processes(device_id d) const {
  const auto& dev = state_->device(d);
  const std::lock_guard lock{dev.mutex};
  std::vector<foreign_process> out;
  for (const auto& [pid, held] : dev.foreign) out.push_back({pid, held.first, held.second});
  return out;
}

bool machine::lost(device_id d) const {
  const auto& dev = state_->device(d);
  const std::lock_guard lock{dev.mutex};
  return dev.faults.lost;
}

std::uint64_t machine::invalid_frees(device_id d) const {
  const auto& dev = state_->device(d);
  const std::lock_guard lock{dev.mutex};
  return dev.invalid_frees;
}

stream_ref machine::create_stream(device_id d) {
  auto& dev = state_->device(d);
  const std::lock_guard lock{dev.mutex};
  state_->check_alive(dev, d);
  std::uint32_t index = 0;
  if (!dev.dead_streams.empty()) {  // CUDA may give a new stream a destroyed one's handle
    index = dev.dead_streams.back();
    dev.dead_streams.pop_back();
    auto& st = dev.streams[index];
    const std::uint32_t generation = st.generation + 1;
    st = detail::stream_state{};
    st.tail_ns = dev.now_ns;
    st.generation = generation;
  } else {
    MGM_EXPECTS(dev.streams.size() < 0xFFFFFFFFULL, "too many simulated streams");
    detail::stream_state st;
    st.tail_ns = dev.now_ns;
    dev.streams.push_back(std::move(st));
    index = static_cast<std::uint32_t>(dev.streams.size() - 1);
  }
  return state_->encode(static_cast<std::uint32_t>(d.index()), index);
}

stream_ref machine::default_stream(device_id d) const {
  (void)state_->device(d);
  return state_->encode(static_cast<std::uint32_t>(d.index()), 0);
}

device_id machine::device_of(stream_ref s) const {
  return device_id{static_cast<int>(state_->decode_strict(s).device)};
}

void machine::enqueue(stream_ref s, std::chrono::nanoseconds work) {
  MGM_EXPECTS(work.count() >= 0, "work must take non-negative time");
  const auto key = state_->decode_strict(s);
  const device_id d{static_cast<int>(key.device)};
  auto& dev = state_->device(d);
  detail::stream_id dead = 0;
  {
    const std::lock_guard lock{dev.mutex};
    state_->check_alive(dev, d);
    MGM_EXPECTS(key.index < dev.streams.size(), "unknown simulated stream");
    auto& st = dev.streams[key.index];
    if (!st.alive) [[unlikely]] {
      dead = detail::make_stream_id(key.device, key.index, st.generation);
    } else if (st.graph != 0) {
      st.captured_ns += detail::to_ns(work);  // recorded into the graph: it runs when launched
    } else {
      st.tail_ns = std::max(st.tail_ns, dev.now_ns) + detail::to_ns(work);
    }
  }
  if (dead != 0) [[unlikely]] state_->report_dead_stream(d, dead, "a kernel launch");
}

void machine::advance(device_id d, std::chrono::nanoseconds dt) {
  MGM_EXPECTS(dt.count() >= 0, "a clock only moves forward");
  auto& dev = state_->device(d);
  const std::lock_guard lock{dev.mutex};
  dev.now_ns += detail::to_ns(dt);
}

std::chrono::nanoseconds machine::now(device_id d) const {
  const auto& dev = state_->device(d);
  const std::lock_guard lock{dev.mutex};
  return std::chrono::nanoseconds{dev.now_ns};
}

void machine::synchronize(device_id d) {
  auto& dev = state_->device(d);
  state_->check_unsafe_call("cudaDeviceSynchronize");
  const std::lock_guard lock{dev.mutex};
  dev.wait_for_all_work();
}

sim::stream_ops machine::streams() const noexcept { return sim::stream_ops{state_.get()}; }
sim::vmm_ops machine::vmm(vmm_sharing sharing) const noexcept { return sim::vmm_ops{state_.get(), sharing}; }
sim::peer_ops machine::peers() const noexcept { return sim::peer_ops{state_.get()}; }
fault_plan machine::faults(device_id d) const {
  (void)state_->device(d);
  return fault_plan{state_.get(), d};
}
cost_model& machine::costs() noexcept { return state_->costs; }
modelled_costs machine::modelled(device_id d) const {
  const auto& dev = state_->device(d);
  const std::lock_guard lock{dev.mutex};
  return dev.costs;
}
std::chrono::nanoseconds machine::bookkeeping(device_id d) const {
  return std::chrono::nanoseconds{state_->device(d).bookkeeping_ns.load(std::memory_order_relaxed)};
}

}  // namespace mgm::sim
