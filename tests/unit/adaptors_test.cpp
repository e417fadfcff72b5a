// The adaptors: conformance over the simulated device, and what each one is for.
#include "conformance.hpp"
#include "sizes.hpp"

#include <mgm/adaptors/fault_injection_adaptor.hpp>
#include <mgm/adaptors/limiting_adaptor.hpp>
#include <mgm/adaptors/logging_adaptor.hpp>
#include <mgm/adaptors/statistics_adaptor.hpp>
#include <mgm/adaptors/tracking_adaptor.hpp>
#include <mgm/allocators/host_allocator.hpp>
#include <mgm/log.hpp>
#include <mgm/pool/caching_pool.hpp>
#include <mgm/sim/machine.hpp>
#include <mgm/tag.hpp>

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <tuple>

using mgm::device_id;

namespace {
using sim_alloc = mgm::sim::device_allocator;

std::ostringstream& log_sink() {
  static std::ostringstream s;
  return s;
}

template <class Make>
struct adaptor_fixture {
  std::unique_ptr<mgm::sim::machine> m = std::make_unique<mgm::sim::machine>(mgm::sim::parse_device_list("256MiB"));
  using allocator_type = decltype(Make{}(std::declval<sim_alloc>()));
  static constexpr bool exact_oom = true;
  static constexpr bool stream_ordered = true;  // adaptors and pools keep their upstream's stream calls
  allocator_type make() { return Make{}(m->allocator(device_id{0})); }
  mgm::stream_ref stream() { return m->create_stream(device_id{0}); }
  void touch(void* p, std::size_t n) { std::memset(p, 0x42, n); }
  ~adaptor_fixture() { CHECK(m->memory(device_id{0}).used_bytes == 0); }
};
struct make_statistics {
  auto operator()(sim_alloc a) const { return mgm::statistics_adaptor<sim_alloc>{a}; }
};
struct make_limiting {
  auto operator()(sim_alloc a) const { return mgm::limiting_adaptor<sim_alloc>{a, 128 * MiB}; }
};
struct make_tracking {
  auto operator()(sim_alloc a) const { return mgm::tracking_adaptor<sim_alloc>{a}; }
};
struct make_logging {
  auto operator()(sim_alloc a) const { return mgm::logging_adaptor<sim_alloc>{a, log_sink()}; }
};
struct make_faults {
  auto operator()(sim_alloc a) const { return mgm::fault_injection_adaptor<sim_alloc>{a, mgm::fault_injection_plan{}}; }
};
using adaptor_fixtures =
    std::tuple<adaptor_fixture<make_statistics>, adaptor_fixture<make_limiting>, adaptor_fixture<make_tracking>,
               adaptor_fixture<make_logging>, adaptor_fixture<make_faults>>;

static_assert(mgm::platform_allocator<mgm::statistics_adaptor<sim_alloc>>);
static_assert(mgm::platform_allocator<mgm::limiting_adaptor<sim_alloc>>);
static_assert(mgm::platform_allocator<mgm::tracking_adaptor<sim_alloc>>);
static_assert(mgm::platform_allocator<mgm::logging_adaptor<sim_alloc>>);
static_assert(mgm::platform_allocator<mgm::fault_injection_adaptor<sim_alloc>>);
static_assert(mgm::has_property_with_value<mgm::limiting_adaptor<sim_alloc>, mgm::device_affinity>);
static_assert(mgm::allocator<mgm::statistics_adaptor<mgm::host_allocator>>);
static_assert(!mgm::stream_allocator<mgm::statistics_adaptor<mgm::host_allocator>>);

}  // namespace

MGM_CONFORMANCE_SUITE("adaptor", adaptor_fixtures)

TEST_CASE("statistics_adaptor counts what passes through", "[adaptors]") {
  auto m = mgm::sim::machine::preset("dgx-a100");
  mgm::statistics_adaptor<sim_alloc> a{m.allocator(device_id{0})};
  auto copy = a;
  void* p = a.allocate(1000);
  void* q = copy.allocate(3000);
  REQUIRE(a.statistics().bytes.current == 4000);
  REQUIRE(a.statistics().allocations.peak == 2);
  a.deallocate(p, 1000);
  REQUIRE_THROWS_AS(a.allocate(std::size_t{1} << 50), mgm::out_of_memory);
  REQUIRE(a.statistics().allocations.total == 2);  // the failure is not counted
  copy.deallocate(q, 3000);
  REQUIRE(a.statistics().bytes == mgm::stat{0, 4000, 4000});
}

TEST_CASE("limiting_adaptor caps bytes and rolls back when the upstream throws", "[adaptors]") {
  mgm::sim::machine m{mgm::sim::parse_device_list("64MiB")};
  mgm::limiting_adaptor<sim_alloc> a{m.allocator(device_id{0}), 100 * MiB};  // above the device
  void* p = a.allocate(60 * MiB);
  REQUIRE(a.allocated_bytes() == 60 * MiB);
  REQUIRE(a.free_bytes() == 4 * MiB);  // the device's own limit is lower
  REQUIRE_THROWS_AS(a.allocate(10 * MiB), mgm::out_of_memory);  // the device throws...
  REQUIRE(a.allocated_bytes() == 60 * MiB);                     // ...and the count rolls back
  a.deallocate(p, 60 * MiB);
  REQUIRE(a.allocated_bytes() == 0);

  mgm::limiting_adaptor<sim_alloc> capped{m.allocator(device_id{0}), 10 * MiB};
  void* x = capped.allocate(6 * MiB);
  REQUIRE_THROWS_WITH(capped.allocate(5 * MiB), Catch::Contains("exceed the limit of 10.00 MiB") &&
                                                    Catch::Contains("6.00 MiB already allocated"));
  REQUIRE(capped.allocated_bytes() == 6 * MiB);
  void* y = capped.allocate(100);  // charged as 256
  REQUIRE(capped.allocated_bytes() == 6 * MiB + 256);
  capped.deallocate(y, 100);
  capped.deallocate(x, 6 * MiB);
  REQUIRE(capped.allocated_bytes() == 0);
}

TEST_CASE("a pool over a limiting adaptor runs out of memory at the cap", "[adaptors][pool]") {
  mgm::sim::machine m{mgm::sim::parse_device_list("1GiB")};
  mgm::caching_pool pool{mgm::limiting_adaptor<sim_alloc>{m.allocator(device_id{0}), 64 * MiB}, mgm::pool_options{}};
  void* p = pool.allocate(40 * MiB);
  REQUIRE_THROWS_WITH(pool.allocate(30 * MiB), Catch::Contains("the device has 24.00 MiB free"));
  pool.deallocate(p, 40 * MiB);
  void* q = pool.allocate(30 * MiB);  // the cached 40 MiB segment serves it
  pool.deallocate(q, 30 * MiB);
}

TEST_CASE("tracking_adaptor: live allocations by tag, checkpoints and their difference", "[adaptors]") {
  auto m = mgm::sim::machine::preset("dgx-h100");
  mgm::tracking_adaptor<sim_alloc> a{m.allocator(device_id{1})};
  void* weights = nullptr;
  {
    mgm::tag_scope t{"weights"};
    weights = a.allocate(8 * MiB);
  }
  const auto baseline = a.checkpoint();
  void* act1 = nullptr;
  void* act2 = nullptr;
  void* tmp = nullptr;
  {
    mgm::tag_scope t{"layer3.fc"};
    act1 = a.allocate(4 * MiB);
    act2 = a.allocate(2 * MiB);
    {
      mgm::tag_scope inner{"workspace"};
      tmp = a.allocate(1 * MiB);
    }
  }
  a.deallocate(tmp, 1 * MiB);
  void* untagged = a.allocate(512);

  const auto report = a.report();
  REQUIRE(report.size() == 3);
  REQUIRE(report[0].tag == "weights");
  REQUIRE(report[1].tag == "layer3.fc");
  REQUIRE(report[1].allocations == 2);
  REQUIRE(report[1].bytes == 6 * MiB);
  REQUIRE(report[2].tag.empty());
  REQUIRE(a.report_text().find("(untagged)") != std::string::npos);
  REQUIRE(a.live_bytes() == 14 * MiB + 512);

  const auto grew = a.growth_since(baseline);
  REQUIRE(grew.bytes == static_cast<std::int64_t>(6 * MiB + 512));
  REQUIRE(grew.appeared.size() == 3);  // act1, act2, untagged; tmp came and went
  REQUIRE(grew.by_tag.at(0).tag == "layer3.fc");
  REQUIRE(grew.by_tag.at(0).bytes == static_cast<std::int64_t>(6 * MiB));
  REQUIRE(grew.to_string().find("layer3.fc +6.00 MiB (+2)") != std::string::npos);

  a.deallocate(weights, 8 * MiB);
  const auto shrank = a.diff(baseline, a.checkpoint());
  REQUIRE(shrank.disappeared.size() == 1);
  REQUIRE(shrank.disappeared[0].tag == "weights");
  for (void* p : {act1, act2}) a.deallocate(p, p == act1 ? 4 * MiB : 2 * MiB);
  a.deallocate(untagged, 512);
  REQUIRE(a.live().empty());
  REQUIRE(m.memory(device_id{1}).used_bytes == 0);
}

TEST_CASE("fault_injection_adaptor fails the planned allocations, reproducibly", "[adaptors]") {
  auto m = mgm::sim::machine::preset("dgx-h100");
  mgm::fault_injection_plan plan;
  plan.fail_every_nth = 3;
  plan.fail_above_bytes = 64 * MiB;
  mgm::fault_injection_adaptor<sim_alloc> a{m.allocator(device_id{0}), plan};
  std::string pattern;
  for (int i = 0; i < 7; ++i) {
    try {
      a.deallocate(a.allocate(4096), 4096);
      pattern += '.';
    } catch (const mgm::out_of_memory& e) {
      pattern += 'X';
      REQUIRE(std::string{e.what()}.find("injected") != std::string::npos);
    }
  }
  REQUIRE(pattern == "..X..X.");
  REQUIRE_THROWS_AS(a.allocate(65 * MiB), mgm::out_of_memory);
  REQUIRE(a.injected() == 3);
  REQUIRE(m.modelled(device_id{0}).count(mgm::sim::driver_call::malloc) == 5);  // failures never reach the upstream

  const auto run = [&](std::uint64_t seed) {
    mgm::fault_injection_plan p;
    p.probability = 0.25;
    p.seed = seed;
    mgm::fault_injection_adaptor<sim_alloc> f{m.allocator(device_id{1}), p};
    std::string s;
    for (int i = 0; i < 64; ++i) {
      try {
        f.deallocate(f.allocate(256), 256);
        s += '.';
      } catch (const mgm::out_of_memory&) {
        s += 'X';
      }
    }
    return s;
  };
  REQUIRE(run(7) == run(7));
  REQUIRE(run(7) != run(8));
}

TEST_CASE("logging_adaptor writes RMM's CSV", "[adaptors]") {
  auto m = mgm::sim::machine::preset("dgx-h100");
  std::ostringstream out;
  mgm::logging_adaptor<sim_alloc> a{m.allocator(device_id{0}), out};
  const auto s = m.create_stream(device_id{0});
  void* p = a.allocate_async(1024, 256, s);
  a.deallocate_async(p, 1024, 256, s);
  REQUIRE_THROWS(a.allocate(std::size_t{1} << 50));
  std::istringstream lines{out.str()};
  std::string line;
  std::getline(lines, line);
  REQUIRE(line == "Thread,Time,Action,Pointer,Size,Stream");
  std::vector<std::string> rows;
  while (std::getline(lines, line)) rows.push_back(line);
  REQUIRE(rows.size() == 3);
  char addr[32];
  std::snprintf(addr, sizeof addr, "0x%llx", static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(p)));
  char stream[32];
  std::snprintf(stream, sizeof stream, "0x%llx", static_cast<unsigned long long>(s.id()));
  REQUIRE(rows[0].find(std::string{",allocate,"} + addr + ",1024," + stream) != std::string::npos);
  REQUIRE(rows[1].find(std::string{",free,"} + addr + ",1024," + stream) != std::string::npos);
  REQUIRE(rows[2].find(",allocate failure,0x0,1125899906842624,0x0") != std::string::npos);
  // Thread id, then HH:MM:SS.ffffff.
  const auto first_comma = rows[0].find(',');
  REQUIRE(first_comma > 0);
  REQUIRE(rows[0].substr(first_comma + 1, 16).size() == 15 + 1);
  REQUIRE(rows[0][first_comma + 3] == ':');
  REQUIRE(rows[0][first_comma + 9] == '.');
}
