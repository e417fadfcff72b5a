// Traces: RMM's CSV read and written, compiled, and replayed through every allocator on the sim.
#include <mgm/adaptors/logging_adaptor.hpp>
#include <mgm/error.hpp>
#include <mgm/sim/machine.hpp>
#include <mgm/trace/replay.hpp>
#include <mgm/trace/trace.hpp>

#include "shared_data.hpp"
#include "sizes.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>

namespace {

// Six events with known answers: live peaks at 5 MiB (B + C).
constexpr const char* six_events =
    "Thread,Time,Action,Pointer,Size,Stream\n"
    "1,00:00:00.000000,allocate,0x1000,3145728,0\n"   // A 3 MiB
    "1,00:00:00.000001,allocate,0x2000,1048576,0\n"   // B 1 MiB
    "1,00:00:00.000002,free,0x1000,3145728,0\n"
    "1,00:00:00.000003,allocate,0x3000,4194304,0\n"   // C 4 MiB
    "1,00:00:00.000004,free,0x2000,1048576,0\n"
    "1,00:00:00.000005,free,0x3000,4194304,0\n";

mgm::compiled_trace six() {
  std::istringstream in{six_events};
  return mgm::read_rmm_csv(in, "six").compile();
}

std::size_t line_of(const std::string& text) {
  std::istringstream in{text};
  try {
    (void)mgm::read_rmm_csv(in, "t").compile();
  } catch (const mgm::parse_error& e) {
    return e.line();
  }
  return 0;
}

}  // namespace

TEST_CASE("trace: RMM's CSV is read, compiled and written back", "[trace]") {
  std::istringstream in{six_events};
  const auto t = mgm::read_rmm_csv(in, "six");
  REQUIRE(t.events.size() == 6);
  REQUIRE(t.events[1].pointer == 0x2000);
  REQUIRE(t.events[3].bytes == 4 * MiB);
  REQUIRE(t.events[5].seconds == Approx(0.000005));
  const auto c = t.compile();
  REQUIRE(c.allocations == 3);
  REQUIRE(c.slots == 3);
  REQUIRE(c.peak_live_bytes == 5 * MiB);
  REQUIRE(c.total_bytes == 8 * MiB);
  REQUIRE(c.ops.size() == 6);
  std::ostringstream out;
  mgm::write_rmm_csv(out, t);
  std::istringstream again{out.str()};
  const auto t2 = mgm::read_rmm_csv(again, "six");
  REQUIRE(t2.events.size() == 6);
  REQUIRE(t2.events[3].pointer == t.events[3].pointer);
  REQUIRE(t2.events[5].seconds == Approx(t.events[5].seconds));
}

TEST_CASE("trace: a bad line gives an error naming it", "[trace]") {
  const std::string head = "Thread,Time,Action,Pointer,Size,Stream\n";
  REQUIRE(line_of("") == 1);
  REQUIRE(line_of("Thread,Time\n") == 1);
  REQUIRE(line_of(head + "1,00:00:00.000000,allocate,0x10,256,0\n1,00:00:00,grab,0x20,256,0\n") == 3);
  REQUIRE(line_of(head + "1,00:00:00.000000,allocate,0x10,256\n") == 2);
  REQUIRE(line_of(head + "1,00:00:00.000000,allocate,0xZZ,256,0\n") == 2);
  REQUIRE(line_of(head + "1,0:0:0,allocate,0x10,256,0\n") == 2);
  REQUIRE(line_of(head + "1,00:00:00.0,allocate,0x10,-5,0\n") == 2);
  REQUIRE(line_of(head + "1,00:00:00.0,free,0x10,256,0\n") == 2);  // never allocated
  REQUIRE(line_of(head + "1,00:00:00.0,allocate,0x10,256,0\n\n1,00:00:00.1,allocate,0x10,256,0\n") == 4);  // still live
  REQUIRE_THROWS_WITH([&] {
    std::istringstream in{head + "7,00:00:01.5,allocate,0x10,256,0x0,extra\n"};
    (void)mgm::read_rmm_csv(in, "mine.csv");
  }(), Catch::Contains("trace 'mine.csv', line 2"));
  // CRLF, decimal pointers, "allocate failure" rows and blank lines are fine.
  std::istringstream crlf{head + "1,00:00:00.000000,allocate,4096,512,0\r\n1,00:00:00.1,allocate failure,0x0,99,0\r\n\r\n"};
  const auto c = mgm::read_rmm_csv(crlf, "crlf").compile();
  REQUIRE(c.allocations == 1);
  REQUIRE(c.failures_skipped == 1);
  REQUIRE(c.leftovers_freed == 1);  // never freed in the log: freed at the end of each iteration
}

TEST_CASE("trace: the logging adaptor's output replays", "[trace][adaptors]") {
  auto m = mgm::sim::machine::preset("dgx-h100");
  std::ostringstream log;
  {
    mgm::logging_adaptor<mgm::sim::device_allocator> a{m.allocator(mgm::device_id{0}), log};
    void* p = a.allocate(1000);
    void* q = a.allocate(5 * MiB);
    a.deallocate(p, 1000);
    a.deallocate(q, 5 * MiB);
  }
  std::istringstream in{log.str()};
  const auto c = mgm::read_rmm_csv(in, "logged").compile();
  REQUIRE(c.allocations == 2);
  REQUIRE(c.peak_live_bytes == 5 * MiB + 1000);
}

TEST_CASE("replay: the six-event trace has the answers worked out by hand", "[trace][replay]") {
  const auto t = six();
  mgm::replay_options o;
  o.iterations = 2;
  o.fit = true;
  o.capacity_bytes = std::size_t{1} << 30;

  const auto direct = mgm::replay_on_sim(t, "direct", o);
  REQUIRE(direct.events == 6);
  REQUIRE(direct.iterations == 2);
  REQUIRE(direct.upstream_allocations == 6);  // every block, both iterations
  REQUIRE(direct.upstream_frees == 6);
  REQUIRE(direct.upstream_calls_after_first_iteration == 6);
  REQUIRE(direct.peak_live_bytes == 5 * MiB);
  REQUIRE(direct.peak_reserved_bytes == 5 * MiB);
  REQUIRE(direct.reserved_over_live == Approx(1.0));
  REQUIRE(direct.fit.has_value());
  REQUIRE(direct.fit->capacity_bytes == 6 * MiB);  // 5 MiB, in 2 MiB steps
  REQUIRE(direct.fit->confirmed);
  REQUIRE(direct.fit->non_monotone.empty());
  // Priced call by call (driver-costs.md §3; slope 25 us/MiB below the device's high-water
  // mark, 1 above; cudaMalloc's first 2 MiB and cudaFree's first 2 MiB are in the fixed charge):
  //   1st: A 66 + 1 (fresh) = 67; B 66; free A 42 + 2.5 = 44.5; C [1, 5) MiB, [3, 4) recycled:
  //        66 + 25 + 1 = 92; free B 42; free C 42 + 5 = 47
  //   2nd: A 66 + 25 = 91; B 66; free A 44.5; C 66 + 50 = 116; free B 42; free C 47
  using mgm::sim::driver_call;
  REQUIRE(direct.driver_calls.has_value());
  REQUIRE((*direct.driver_calls)[static_cast<int>(driver_call::malloc)] == 6);
  REQUIRE((*direct.driver_calls)[static_cast<int>(driver_call::free)] == 6);
  REQUIRE(direct.modelled_driver_seconds->by_kind[static_cast<int>(driver_call::malloc)] ==
          Approx((67 + 66 + 92 + 91 + 66 + 116) * 1e-6));
  REQUIRE(direct.modelled_driver_seconds->by_kind[static_cast<int>(driver_call::free)] == Approx(2 * 133.5e-6));
  REQUIRE(direct.modelled_driver_seconds->total == Approx(765e-6));
  REQUIRE(direct.modelled_driver_seconds->after_first_iteration == Approx(406.5e-6));
  REQUIRE(direct.modelled_driver_seconds->floor == Approx(69e-6));  // one fresh cudaMalloc of 5 MiB
  REQUIRE(direct.modelled_upstream_seconds == direct.modelled_driver_seconds->total);  // deprecated copy
  REQUIRE(direct.hazards == 0u);  // replays are judged by default

  // The pool: A takes a 20 MiB segment, B a 2 MiB one, C reuses A's block; nothing after that.
  const auto pool = mgm::replay_on_sim(t, "pool", o);
  REQUIRE(pool.upstream_allocations == 2);
  REQUIRE(pool.upstream_calls_after_first_iteration == 0);
  REQUIRE(pool.peak_reserved_bytes == 22 * MiB);
  REQUIRE(pool.fit->capacity_bytes == 6 * MiB);  // segments shrink to the request when memory is short
  REQUIRE(pool.modelled_driver_seconds->total == Approx((66 + 18 + 66) * 1e-6));  // 20 MiB fresh, then 2 MiB
  REQUIRE(pool.modelled_driver_seconds->after_first_iteration == 0.0);
  REQUIRE(pool.modelled_driver_seconds->floor == Approx((66 + 20) * 1e-6));  // 22 MiB in one fresh cudaMalloc
  REQUIRE(pool.hazards == 0u);

  // CUB: power-of-two bins; A's 4 MiB bin serves C.
  const auto cub = mgm::replay_on_sim(t, "cub", o);
  REQUIRE(cub.hazards == 0u);
  REQUIRE(cub.upstream_allocations == 2);
  REQUIRE(cub.upstream_calls_after_first_iteration == 0);
  REQUIRE(cub.peak_reserved_bytes == 5 * MiB);
  REQUIRE(cub.fit->capacity_bytes == 6 * MiB);

  const auto pmr = mgm::replay_on_sim(t, "pmr", o);
  REQUIRE(pmr.hazards == 0u);
  REQUIRE(pmr.peak_live_bytes == 5 * MiB);
  REQUIRE(pmr.fit->capacity_bytes >= 6 * MiB);

  // bump: one arena (the whole device) taken once, nothing after it, and never judged.
  o.fit = false;
  const auto bump = mgm::replay_on_sim(t, "bump", o);
  REQUIRE(bump.upstream_allocations == 1);
  REQUIRE(bump.upstream_frees == 0);  // the arena goes back at the teardown, which is not counted
  REQUIRE(bump.upstream_calls_after_first_iteration == 0);
  REQUIRE(bump.peak_reserved_bytes == o.capacity_bytes);
  REQUIRE(bump.hazards == 0u);
  o.fit = true;

  const std::string json = pool.to_json();
  for (const char* key : {"\"trace\":\"six\"", "\"allocator\":\"pool\"", "\"device\":0", "\"iterations\":2", "\"events\":6",
                          "\"host_ns_per_event\":", "\"events_per_second\":", "\"upstream_allocations\":2",
                          "\"upstream_frees\":", "\"upstream_calls_after_first_iteration\":0",
                          "\"peak_live_bytes\":5242880", "\"peak_reserved_bytes\":23068672", "\"reserved_over_live\":",
                          "\"fit\":{\"capacity_bytes\":6291456", "\"modelled_upstream_seconds\":",
                          "\"driver_calls\":{", "\"malloc\":2", "\"peer_enable\":0", "\"modelled_driver_seconds\":{",
                          "\"by_kind\":{", "\"after_first_iteration\":0", "\"floor\":", "\"hazards\":0"}) {
    INFO(key);
    REQUIRE(json.find(key) != std::string::npos);
  }
  REQUIRE_THROWS_AS(mgm::replay_on_sim(t, "malloc", o), mgm::logic_error);
  o.costs = mgm::sim::cost_model::none();
  REQUIRE(mgm::replay_on_sim(t, "direct", o).modelled_driver_seconds->total == 0.0);
  o.capacity_bytes = 4 * MiB;
  o.fit = false;
  REQUIRE_THROWS_AS(mgm::replay_on_sim(t, "direct", o), mgm::out_of_memory);
}

TEST_CASE("replay: expandable segments priced call by call", "[trace][replay][costs]") {
  // One 12 MiB block (a segment of its own size, from 10 MiB up), freed, twice.
  std::istringstream in{"Thread,Time,Action,Pointer,Size,Stream\n"
                        "1,00:00:00.000000,allocate,0x1000,12582912,0\n"
                        "1,00:00:00.000001,free,0x1000,12582912,0\n"};
  const auto t = mgm::read_rmm_csv(in, "twelve").compile();
  mgm::replay_options o;
  o.iterations = 2;
  o.capacity_bytes = std::size_t{8} << 30;  // chunks of at most 1/512 of it: 16 MiB
  const auto r = mgm::replay_on_sim(t, "pool", o);
  using mgm::sim::driver_call;
  const auto calls = [&](driver_call k) { return (*r.driver_calls)[static_cast<int>(k)]; };
  const auto secs = [&](driver_call k) { return r.modelled_driver_seconds->by_kind[static_cast<int>(k)]; };
  // First iteration: one reservation (19 us), one chunk of six granules (nothing mapped ahead: at
  // most 12 x 32 / 31 MiB, six granules): one fresh handle (143 + 12 x 1 = 155 us), one map (1.5 us), one set_access over six
  // granules for the owner (36 + 5 x 9.4 = 83 us). The second reuses the mapped block: nothing more.
  REQUIRE(calls(driver_call::reserve) == 1);
  REQUIRE(calls(driver_call::create) == 1);
  REQUIRE(calls(driver_call::map) == 1);
  REQUIRE(calls(driver_call::set_access) == 1);
  REQUIRE(calls(driver_call::malloc) == 0);
  REQUIRE(secs(driver_call::reserve) == Approx(19e-6));
  REQUIRE(secs(driver_call::create) == Approx(155e-6));
  REQUIRE(secs(driver_call::map) == Approx(1.5e-6));
  REQUIRE(secs(driver_call::set_access) == Approx(83e-6));
  REQUIRE(r.modelled_driver_seconds->total == Approx((19 + 155 + 1.5 + 83) * 1e-6));
  REQUIRE(r.modelled_driver_seconds->after_first_iteration == 0.0);
  REQUIRE(r.upstream_calls_after_first_iteration == 0);
  // The floor: one handle of the peak: reserve 19 + create 143 + 12 + map 1.5 + set_access 83.
  REQUIRE(r.modelled_driver_seconds->floor == Approx((19 + 155 + 1.5 + 83) * 1e-6));
  REQUIRE(r.hazards == 0u);

  // The high profile prices the same calls higher, the low one lower; none prices nothing.
  o.costs = mgm::sim::cost_model::high();
  const auto high = mgm::replay_on_sim(t, "pool", o);
  o.costs = mgm::sim::cost_model::low();
  const auto low = mgm::replay_on_sim(t, "pool", o);
  REQUIRE(high.modelled_driver_seconds->total > r.modelled_driver_seconds->total);
  REQUIRE(low.modelled_driver_seconds->total < r.modelled_driver_seconds->total);
  // high: create 320 + 12 x 1 for the one chunk; set_access 54 + 5 x 9.4.
  REQUIRE(high.modelled_driver_seconds->by_kind[static_cast<int>(driver_call::create)] == Approx(332e-6));
  REQUIRE(high.modelled_driver_seconds->by_kind[static_cast<int>(driver_call::set_access)] == Approx(101e-6));
}

// ---- real traces (label realdata; skipped when ../shared/data is absent) ------------------------

TEST_CASE("realdata: every real trace replays at least as well as the calibration", "[realdata]") {
  const auto dir = mgm_test::shared_data("traces");
  if (dir.empty()) return;
  // A model of PyTorch's caching allocator: reserved / live without a limit, and the fit; and
  // CUB's reserved / live (the calibration of ../shared issue 4).
  struct calibration {
    double torch_reserved;
    double torch_fit;
    double cub_reserved;
  };
  const std::map<std::string, calibration> known{
      {"resnet50_bs32_w0.rmm_log.csv", {1.197, 1.028, 1.55}},  {"inceptionv4.rmm_log.csv", {1.224, 1.028, 1.52}},
      {"tv_densenet121.rmm_log.csv", {1.122, 1.030, 1.70}},    {"unet.rmm_log.csv", {1.124, 1.032, 1.26}},
      {"lstm.rmm_log.csv", {1.019, 1.012, 1.33}},              {"resnet32.rmm_log.csv", {1.060, 1.007, 1.58}},
      {"transformer.rmm_log.csv", {1.019, 1.002, 1.62}},
  };
  std::size_t replayed = 0;
  std::size_t targeted = 0;  // traces above 1 GiB live
  for (const auto& entry : std::filesystem::recursive_directory_iterator{dir}) {
    const std::string name = entry.path().filename().string();
    if (!name.ends_with(".rmm_log.csv")) continue;
    INFO(name);
    const auto t = mgm::read_rmm_csv_file(entry.path().string()).compile();
    REQUIRE(t.allocations > 0);
    // Issue 17's hard memory targets hold on every trace above 1 GiB live: reserved / live at most
    // 1.05 and fit at most 1.01 (U-Net's fit was 1.0127 when chunks shared by idle and live blocks
    // kept its idle memory mapped).
    const bool big = t.peak_live_bytes > (std::size_t{1} << 30);
    mgm::replay_options o;
    o.fit = big || known.contains(name);
    const auto pool = mgm::replay_on_sim(t, "pool", o);
    REQUIRE(pool.upstream_calls_after_first_iteration == 0);
    REQUIRE(pool.hazards == 0u);  // every real trace, judged
    REQUIRE(pool.reserved_over_live >= 1.0);
    if (big) {
      REQUIRE(pool.peak_live_bytes == t.peak_live_bytes);
      REQUIRE(pool.reserved_over_live <= 1.05);
      REQUIRE(pool.fit->confirmed);
      REQUIRE(pool.fit->over_peak_live <= 1.01);
      ++targeted;
    }
    if (const auto k = known.find(name); k != known.end()) {
      // Half a unit of the calibration's last digit: its figures are rounded to three decimals.
      REQUIRE(pool.reserved_over_live <= k->second.torch_reserved + 0.0005);
      REQUIRE(pool.fit->over_peak_live <= k->second.torch_fit + 0.0005);
      REQUIRE(pool.fit->confirmed);
      REQUIRE(big);  // every calibrated trace is under issue 17's targets
      o.fit = false;
      const auto cub = mgm::replay_on_sim(t, "cub", o);
      REQUIRE(cub.reserved_over_live == Approx(k->second.cub_reserved).margin(0.01));  // the replay is faithful
      REQUIRE(cub.hazards == 0u);
    }
    ++replayed;
  }
  REQUIRE(replayed >= 10);
  REQUIRE(targeted >= 8);  // the six DTR traces above 1 GiB and both ResNet-50 workers
}
