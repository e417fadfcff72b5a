// The simulated machine's virtual-memory seam (cuMemAddressReserve, cuMemCreate, cuMemMap, ...).
#include "machine_state.hpp"

#include <mgm/bytes.hpp>
#include <mgm/detail/checks.hpp>
#include <mgm/error.hpp>
#include <mgm/log.hpp>
#include <mgm/sim/vmm_ops.hpp>
#include <mgm/unique_fd.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string_view>
#include <cstring>
#include <utility>
#include <string>

namespace mgm::sim {

// ---- virtual memory ------------------------------------------------------------------------
//
// Every rule the driver documents for these calls is checked; a breach is a `vmm_contract`
// hazard (machine_state::vmm_breach), reported with no lock of the seam held.

namespace {
constexpr std::size_t granule = vmm_ops::granule_bytes;

// Shareable memory is a memfd named after its device, so that an importer knows whose it is.
constexpr std::string_view memfd_prefix = "mgm-sim-device-";

std::string granular_problem(std::uintptr_t va, std::size_t bytes, const char* call) {
  if (bytes == 0 || bytes % granule != 0 || va % granule != 0) {
    return std::string{call} + "(" + detail::hex(va) + ", " + std::to_string(bytes) +
           "): address and size must be non-zero multiples of the 2 MiB granule";
  }
  return {};
}
}  // namespace

namespace {
// A shared mapping's range becomes reserved address space again (anonymous, inaccessible).
void restore_reservation(void* va, std::size_t bytes) noexcept {
  if (::mmap(va, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == MAP_FAILED) {
    std::abort();  // the range would be left to whatever the kernel puts there next
  }
}
}  // namespace

void detail::machine_state::free_physical(std::unordered_map<std::uint64_t, physical_allocation>::iterator it) {
  if (!it->second.imported) uncharge(it->second.device, it->second.bytes);
  if (it->second.fd >= 0) ::close(it->second.fd);
  physical.erase(it);
}

bool vmm_ops::supported(device_id d) {
  (void)machine_->device(d);
  return true;
}

std::size_t vmm_ops::granularity(device_id d) {
  (void)machine_->device(d);
  return granule;
}

void* vmm_ops::reserve(device_id d, std::size_t bytes) {
  auto& dev = machine_->device(d);
  if (auto problem = granular_problem(0, bytes, "reserve"); !problem.empty()) {
    machine_->vmm_breach(problem, d, 0, bytes, true);
  }
  MGM_EXPECTS(bytes <= (std::size_t{1} << 46), "sim vmm: reservation too large");
  const detail::bookkeeping_timer timer{dev};
  void* raw = ::mmap(nullptr, bytes + granule, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) {  // as cuMemAddressReserve's CUDA_ERROR_OUT_OF_MEMORY: the pool reports it as such
    throw out_of_memory{"sim vmm: cannot reserve " + format_bytes(bytes) + " of address space", bytes};
  }
  const auto begin = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (begin + granule - 1) & ~(granule - 1);
  if (aligned > begin) ::munmap(raw, aligned - begin);
  const std::uintptr_t end = begin + bytes + granule;
  if (end > aligned + bytes) ::munmap(reinterpret_cast<void*>(aligned + bytes), end - aligned - bytes);
  const std::lock_guard lock{machine_->vmm_mutex};
  try {  // a host bad_alloc leaves no reservation behind
    machine_->reservations.emplace(aligned, std::pair{bytes, d});
  } catch (...) {
    ::munmap(reinterpret_cast<void*>(aligned), bytes);
    throw;
  }
  const std::lock_guard dev_lock{dev.mutex};
  machine_->charge(dev, driver_call::reserve, machine_->costs.reserve_us);
  return reinterpret_cast<void*>(aligned);
}

void vmm_ops::unreserve(void* va, std::size_t bytes) noexcept {
  const auto base = reinterpret_cast<std::uintptr_t>(va);
  std::string problem;
  device_id owner{0};
  try {
    const std::lock_guard lock{machine_->vmm_mutex};
    const auto it = machine_->reservations.find(base);
    if (it == machine_->reservations.end() || it->second.first != bytes) {
      problem = "unreserve(" + detail::hex(base) + ", " + std::to_string(bytes) +
                ") does not match a reservation; nothing was freed";
    } else {
      owner = it->second.second;
      const auto m = machine_->mappings.lower_bound(base);
      if (m != machine_->mappings.end() && m->first < base + bytes) {
        problem = "unreserve(" + detail::hex(base) + ") of a range that is still mapped at " +
                  detail::hex(m->first) + "; nothing was freed";
      } else {
        auto& dev = machine_->device(owner);
        const detail::bookkeeping_timer timer{dev};
        machine_->reservations.erase(it);
        ::munmap(va, bytes);
        const std::lock_guard dev_lock{dev.mutex};
        machine_->charge(dev, driver_call::unreserve, machine_->costs.unreserve_us);
      }
    }
  } catch (const std::exception& e) {
    problem = e.what();
  }
  if (!problem.empty()) machine_->vmm_breach(problem, owner, base, bytes, false);
}

vmm_ops::physical_handle vmm_ops::create(device_id d, std::size_t bytes) {
  auto& dev = machine_->device(d);
  if (auto problem = granular_problem(0, bytes, "create"); !problem.empty()) {
    machine_->vmm_breach(problem, d, 0, bytes, true);
  }
  machine_->check_unsafe_call("cuMemCreate");
  const detail::bookkeeping_timer timer{dev};
  unique_fd memory;  // shareable: the pages, in a memfd another process can map
  if (sharing_ == vmm_sharing::shareable) {
    const std::string name = std::string{memfd_prefix} + std::to_string(d.value());
    memory.reset(::memfd_create(name.c_str(), MFD_CLOEXEC));
    if (!memory || ::ftruncate(memory.get(), static_cast<off_t>(bytes)) != 0) {
      throw bad_alloc{"sim vmm: cannot make " + format_bytes(bytes) + " of shareable memory (memfd: " +
                      std::strerror(errno) + ")"};
    }
  }
  const std::lock_guard vmm_lock{machine_->vmm_mutex};
  // A host bad_alloc leaves the device as it was: the table's node is made first.
  decltype(machine_->physical) staging;
  staging.emplace(0, detail::physical_allocation{d, bytes});
  auto node = staging.extract(staging.begin());
  machine_->physical.reserve(machine_->physical.size() + 1);
  {
    const std::lock_guard lock{dev.mutex};
    machine_->check_alive(dev, d);
    if (dev.faults.should_fail()) {
      machine_->charge(dev, driver_call::create, machine_->costs.create_us);
      machine_->throw_out_of_memory(dev, d, bytes, "creating physical memory of", true);
    }
    if (bytes > dev.capacity - dev.used) {
      machine_->charge(dev, driver_call::create, machine_->costs.create_us);
      machine_->throw_out_of_memory(dev, d, bytes, "creating physical memory of", false);
    }
    machine_->charge(dev, driver_call::create, machine_->costs.create_charge_us(bytes, dev.used, dev.peak_used));
    dev.used += bytes;
    dev.peak_used = std::max(dev.peak_used, dev.used);
  }
  const auto h = machine_->next_handle++;
  node.key() = h;
  node.mapped().fd = memory.release();
  machine_->physical.insert(std::move(node));
  return h;
}

void vmm_ops::release(physical_handle h) noexcept {
  std::string problem;
  device_id owner{0};
  try {
    const std::lock_guard lock{machine_->vmm_mutex};
    const auto it = machine_->physical.find(h);
    if (it == machine_->physical.end() || it->second.released) {
      problem = "release of unknown or already released handle " + std::to_string(h);
    } else {
      owner = it->second.device;
      auto& dev = machine_->device(owner);
      const detail::bookkeeping_timer timer{dev};
      {
        const std::lock_guard dev_lock{dev.mutex};
        machine_->charge(dev, driver_call::release, machine_->costs.release_charge_us(it->second.bytes));
      }
      it->second.released = true;
      if (it->second.mappings != 0) {
        // The memory is freed when its last mapping goes, as the driver does; but the pool
        // contract (and this seam's) is release after unmap.
        problem = "release of handle " + std::to_string(h) + " while " + std::to_string(it->second.mappings) +
                  " mapping(s) still use it; a handle is released only after it is unmapped";
      } else {
        machine_->free_physical(it);
      }
    }
  } catch (const std::exception& e) {
    problem = e.what();
  }
  if (!problem.empty()) machine_->vmm_breach(problem, owner, 0, 0, false);
}

void vmm_ops::map(void* va, std::size_t bytes, physical_handle h) {
  const auto base = reinterpret_cast<std::uintptr_t>(va);
  if (auto problem = granular_problem(base, bytes, "map"); !problem.empty()) {
    machine_->vmm_breach(problem, device_id{0}, base, bytes, true);
  }
  machine_->check_unsafe_call("cuMemMap");
  std::string problem;
  device_id owner{0};
  {
    const std::lock_guard lock{machine_->vmm_mutex};
    auto r = machine_->reservations.upper_bound(base);
    const auto next = machine_->mappings.lower_bound(base);
    const auto p = machine_->physical.find(h);
    if (p != machine_->physical.end()) owner = p->second.device;
    if (r == machine_->reservations.begin() || (--r, base + bytes > r->first + r->second.first)) {
      problem = "map(" + detail::hex(base) + ", " + format_bytes(bytes) + ") outside any reservation";
    } else if (next != machine_->mappings.end() && next->first < base + bytes) {
      problem = "map over a mapped range at " + detail::hex(next->first);
    } else if (next != machine_->mappings.begin() && std::prev(next)->first + std::prev(next)->second.bytes > base) {
      problem = "map over a mapped range at " + detail::hex(std::prev(next)->first);
    } else if (p == machine_->physical.end() || p->second.released) {
      problem = "map of unknown or released handle " + std::to_string(h);
    } else if (bytes > p->second.bytes) {
      problem = "map of " + format_bytes(bytes) + " from a handle of " + format_bytes(p->second.bytes);
    } else {
      auto& dev = machine_->device(owner);
      const detail::bookkeeping_timer timer{dev};
      // Mapped memory stays inaccessible (PROT_NONE) until set_access, as on a GPU. Shareable
      // memory's pages are its memfd's, mapped over the reservation.
      const bool shared = p->second.fd >= 0;
      if (shared && ::mmap(va, bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, p->second.fd, 0) == MAP_FAILED) {
        const std::string why = std::strerror(errno);
        restore_reservation(va, bytes);  // a failed MAP_FIXED may have unmapped the range already
        throw bad_alloc{"sim vmm: cannot map shareable memory (mmap: " + why + ")"};
      }
      try {
        machine_->mappings.emplace(base, detail::mapping{bytes, h, {}, shared});
      } catch (...) {
        if (shared) restore_reservation(va, bytes);
        throw;
      }
      ++p->second.mappings;
      const std::lock_guard dev_lock{dev.mutex};
      machine_->charge(dev, driver_call::map, machine_->costs.map_us);
    }
  }
  if (!problem.empty()) machine_->vmm_breach(problem, owner, base, bytes, true);
}

void vmm_ops::unmap(void* va, std::size_t bytes) noexcept {
  const auto base = reinterpret_cast<std::uintptr_t>(va);
  std::string problem;
  device_id owner{0};
  try {
    machine_->check_unsafe_call("cuMemUnmap");
    const std::lock_guard lock{machine_->vmm_mutex};
    // The range must consist of whole mappings (cuMemUnmap cannot split one).
    auto it = machine_->mappings.lower_bound(base);
    std::uintptr_t cursor = base;
    bool whole = it != machine_->mappings.end() && it->first == base;
    for (auto j = it; whole && cursor < base + bytes; ++j) {
      whole = j != machine_->mappings.end() && j->first == cursor && cursor + j->second.bytes <= base + bytes;
      if (whole) cursor += j->second.bytes;
    }
    if (!whole || cursor != base + bytes) {
      problem = "unmap(" + detail::hex(base) + ", " + std::to_string(bytes) +
                ") does not cover whole mappings; nothing unmapped";
      if (it != machine_->mappings.end()) {
        if (const auto p = machine_->physical.find(it->second.handle); p != machine_->physical.end()) {
          owner = p->second.device;
        }
      }
    } else {
      owner = machine_->physical.at(it->second.handle).device;
      auto& dev = machine_->device(owner);
      const detail::bookkeeping_timer timer{dev};
      while (it != machine_->mappings.end() && it->first < base + bytes) {
        void* at = reinterpret_cast<void*>(it->first);
        if (it->second.shared) {
          restore_reservation(at, it->second.bytes);
        } else {
          ::madvise(at, it->second.bytes, MADV_DONTNEED);
          ::mprotect(at, it->second.bytes, PROT_NONE);
        }
        auto p = machine_->physical.find(it->second.handle);
        if (p != machine_->physical.end() && --p->second.mappings == 0 && p->second.released) {
          machine_->free_physical(p);
        }
        it = machine_->mappings.erase(it);
      }
      const std::lock_guard dev_lock{dev.mutex};
      machine_->charge(dev, driver_call::unmap, machine_->costs.unmap_us);
      // cuMemUnmap synchronises the device: the host waits for all of its work.
      dev.wait_for_all_work();
    }
  } catch (const std::exception& e) {
    problem = e.what();
  }
  if (!problem.empty()) machine_->vmm_breach(problem, owner, base, bytes, false);
}

void vmm_ops::set_access(void* va, std::size_t bytes, std::span<const device_id> readers) {
  const auto base = reinterpret_cast<std::uintptr_t>(va);
  if (auto problem = granular_problem(base, bytes, "set_access"); !problem.empty()) {
    machine_->vmm_breach(problem, device_id{0}, base, bytes, true);
  }
  std::string problem;
  device_id owner{0};
  {
    const std::lock_guard lock{machine_->vmm_mutex};
    auto it = machine_->mappings.upper_bound(base);
    std::uintptr_t cursor = base;
    if (it == machine_->mappings.begin()) {
      problem = "set_access on an unmapped range at " + detail::hex(base);
    } else {
      --it;
      // Check every mapping of the range before changing any.
      for (auto j = it; problem.empty() && cursor < base + bytes; ++j) {
        if (j == machine_->mappings.end() || j->first > cursor || j->first + j->second.bytes <= cursor) {
          problem = "set_access on an unmapped range at " + detail::hex(cursor);
          break;
        }
        owner = machine_->physical.at(j->second.handle).device;
        for (const device_id r : readers) {
          if (!machine_->can_access(r, owner)) {
            throw cuda_error{cudaErrorPeerAccessUnsupported,
                             "sim vmm: set_access: " + machine_->describe(r) + " cannot access memory of " +
                                 machine_->describe(owner) + ": cudaErrorPeerAccessUnsupported"};
          }
        }
        cursor = j->first + j->second.bytes;
      }
    }
    if (problem.empty()) {
      auto& dev = machine_->device(owner);
      const detail::bookkeeping_timer timer{dev};
      for (cursor = base; cursor < base + bytes; ++it) {
        it->second.readers.assign(readers.begin(), readers.end());
        cursor = it->first + it->second.bytes;
      }
      ::mprotect(va, bytes, readers.empty() ? PROT_NONE : PROT_READ | PROT_WRITE);
      const std::lock_guard dev_lock{dev.mutex};
      machine_->charge(dev, driver_call::set_access, machine_->costs.set_access_charge_us(bytes, readers.size()));
    }
  }
  if (!problem.empty()) machine_->vmm_breach(problem, owner, base, bytes, true);
}

std::vector<device_id> vmm_ops::access(const void* va) {
  const auto addr = reinterpret_cast<std::uintptr_t>(va);
  const std::lock_guard lock{machine_->vmm_mutex};
  auto it = machine_->mappings.upper_bound(addr);
  if (it == machine_->mappings.begin()) return {};
  --it;
  if (addr >= it->first + it->second.bytes) return {};
  return it->second.readers;
}

std::size_t vmm_ops::mapped_bytes(device_id d) {
  (void)machine_->device(d);
  const std::lock_guard lock{machine_->vmm_mutex};
  std::size_t n = 0;
  for (const auto& [va, m] : machine_->mappings) {
    const auto p = machine_->physical.find(m.handle);
    if (p != machine_->physical.end() && p->second.device == d) n += m.bytes;
  }
  return n;
}

int vmm_ops::export_handle(physical_handle h) {
  const std::lock_guard lock{machine_->vmm_mutex};
  const auto it = machine_->physical.find(h);
  if (it == machine_->physical.end() || it->second.released) {
    throw cuda_error{cudaErrorInvalidValue, "sim vmm: export_handle of unknown or released handle " + std::to_string(h)};
  }
  if (it->second.fd < 0) {
    throw logic_error{"sim vmm: export_handle: this memory was created process-local (use vmm_sharing::shareable)"};
  }
  const int fd = ::fcntl(it->second.fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) throw bad_alloc{"sim vmm: export_handle: no descriptor left (" + std::string{std::strerror(errno)} + ")"};
  return fd;
}

vmm_ops::physical_handle vmm_ops::import_handle(int fd) {
  // The descriptor must be a sim memfd of whole granules; its name says whose device it is.
  const auto invalid = [fd](const std::string& why) {
    return cuda_error{cudaErrorInvalidValue, "sim vmm: import_handle(" + std::to_string(fd) + "): " + why};
  };
  struct ::stat st {};  // POSIX's: mgm::stat (pool_statistics.hpp) would hide it here
  if (fd < 0 || ::fstat(fd, &st) != 0) throw invalid("not an open descriptor");
  char target[256] = {};
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
  const std::string_view name{target, n > 0 ? static_cast<std::size_t>(n) : 0};
  const std::string_view memfd = "/memfd:";
  if (!name.starts_with(memfd) || !name.substr(memfd.size()).starts_with(memfd_prefix)) {
    throw invalid("not shareable simulated device memory (" + std::string{name} + ")");
  }
  int ordinal = -1;
  const std::string_view digits = name.substr(memfd.size() + memfd_prefix.size());
  if (std::from_chars(digits.data(), digits.data() + digits.size(), ordinal).ec != std::errc{} || ordinal < 0) {
    throw invalid("its name names no device (" + std::string{name} + ")");
  }
  const auto bytes = static_cast<std::size_t>(st.st_size);
  if (bytes == 0 || bytes % granule != 0) {
    throw invalid("its size, " + std::to_string(bytes) + " bytes, is not a non-zero multiple of the 2 MiB granule");
  }
  const device_id d{ordinal};
  if (ordinal >= static_cast<int>(machine_->devices.size())) {
    throw invalid("it is memory of device " + std::to_string(ordinal) + ", which this machine (" +
                  std::to_string(machine_->devices.size()) + " devices) does not have");
  }
  unique_fd own{::fcntl(fd, F_DUPFD_CLOEXEC, 0)};
  if (!own) throw bad_alloc{"sim vmm: import_handle: no descriptor left (" + std::string{std::strerror(errno)} + ")"};
  const std::lock_guard lock{machine_->vmm_mutex};
  detail::physical_allocation p{d, bytes};
  p.fd = own.get();
  p.imported = true;
  const auto h = machine_->next_handle;
  machine_->physical.emplace(h, p);
  ++machine_->next_handle;
  (void)own.release();
  return h;
}

}  // namespace mgm::sim
