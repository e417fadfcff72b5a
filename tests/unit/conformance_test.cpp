#include "conformance.hpp"

#include <mgm/allocators/host_allocator.hpp>
#include <mgm/sim/machine.hpp>

#include <cstring>
#include <memory>
#include <tuple>

namespace {

void touch_host(void* p, std::size_t bytes) {
  std::memset(p, 0xA5, bytes);
  const auto* b = static_cast<const unsigned char*>(p);
  REQUIRE(b[0] == 0xA5);
  REQUIRE(b[bytes - 1] == 0xA5);
}

struct host_fixture {
  using allocator_type = mgm::host_allocator;
  static constexpr bool exact_oom = true;
  static constexpr bool stream_ordered = false;
  allocator_type make() { return {}; }
  void touch(void* p, std::size_t n) { touch_host(p, n); }
};

struct sim_fixture {
  using allocator_type = mgm::sim::device_allocator;
  static constexpr bool exact_oom = true;
  static constexpr bool stream_ordered = true;
  std::unique_ptr<mgm::sim::machine> m = std::make_unique<mgm::sim::machine>(mgm::sim::parse_device_list("2x64MiB"));
  allocator_type make() { return m->allocator(mgm::device_id{1}); }
  mgm::stream_ref stream() { return m->create_stream(mgm::device_id{1}); }
  void touch(void* p, std::size_t n) {
    REQUIRE(m->owner_of(p) == mgm::device_id{1});
    touch_host(p, n);
  }
  ~sim_fixture() {
    // Every conformance check returns what it allocated: nothing may be left on the device.
    CHECK(m->memory(mgm::device_id{1}).used_bytes == 0);
    CHECK(m->invalid_frees(mgm::device_id{1}) == 0);
  }
};

using cpu_fixtures = std::tuple<host_fixture, sim_fixture>;

}  // namespace

MGM_CONFORMANCE_SUITE("cpu", cpu_fixtures)
