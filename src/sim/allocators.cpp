// The simulated machine's allocators (device memory, pinned host memory) and its fault plan.
#include "machine_state.hpp"

#include <mgm/detail/checks.hpp>
#include <mgm/bytes.hpp>
#include <mgm/error.hpp>
#include <mgm/sim/machine.hpp>

#include <sys/mman.h>

#include <mutex>
#include <string>

namespace mgm::sim {

// ---- device_allocator ----------------------------------------------------------------------

void* device_allocator::allocate(std::size_t bytes, std::size_t alignment) {
  return machine_->allocate(device_, bytes, alignment, nullptr);
}
void device_allocator::deallocate(void* p, std::size_t bytes, std::size_t /*alignment*/) noexcept {
  machine_->deallocate(device_, p, bytes, nullptr);
}
void* device_allocator::allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) {
  return machine_->allocate(device_, bytes, alignment, &stream);
}
void device_allocator::deallocate_async(void* p, std::size_t bytes, std::size_t /*alignment*/,
                                        stream_ref stream) noexcept {
  machine_->deallocate(device_, p, bytes, &stream);
}

std::size_t device_allocator::free_bytes() const {
  const auto& dev = machine_->device(device_);
  const std::lock_guard lock{dev.mutex};
  return dev.capacity - dev.used;
}

std::size_t device_allocator::total_bytes() const { return machine_->device(device_).capacity; }

void* pinned_host_allocator::allocate(std::size_t bytes, std::size_t alignment) {
  mgm::detail::check_alignment(alignment, 4096, "sim::pinned_host_allocator");
  if (bytes == 0) return nullptr;
  void* p = bytes > (std::size_t{1} << 48) ? MAP_FAILED
                                           : ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                                                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    throw out_of_memory{"sim pinned host memory: out of memory allocating " + mgm::detail::describe_bytes(bytes), bytes};
  }
  return p;
}

void pinned_host_allocator::deallocate(void* p, std::size_t bytes, std::size_t /*alignment*/) noexcept {
  if (p != nullptr && bytes != 0) ::munmap(p, bytes);
}

// ---- fault_plan ----------------------------------------------------------------------------

void fault_plan::fail_nth(std::uint64_t n) {
  MGM_EXPECTS(n >= 1, "fail_nth counts from 1 (the next allocation)");
  auto& dev = machine_->device(device_);
  const std::lock_guard lock{dev.mutex};
  dev.faults.countdown = n;
}
void fault_plan::fail_with_probability(double p, std::uint64_t seed) {
  MGM_EXPECTS(p >= 0.0 && p <= 1.0, "a probability lies in [0, 1]");
  auto& dev = machine_->device(device_);
  const std::lock_guard lock{dev.mutex};
  dev.faults.probability = p;
  dev.faults.rng = seed;
}
void fault_plan::lose_device() {
  auto& dev = machine_->device(device_);
  const std::lock_guard lock{dev.mutex};
  dev.faults.lost = true;
}
void fault_plan::clear() {
  auto& dev = machine_->device(device_);
  const std::lock_guard lock{dev.mutex};
  const auto injected = dev.faults.injected;
  dev.faults = {};
  dev.faults.injected = injected;
}
std::uint64_t fault_plan::injected() const {
  auto& dev = machine_->device(device_);
  const std::lock_guard lock{dev.mutex};
  return dev.faults.injected;
}

}  // namespace mgm::sim
