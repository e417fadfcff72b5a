// Elastic placement on a simulated machine: a job holds its items on every GPU, a rebalancer
// watches the GPUs' free memory through the simulator's telemetry, and its moves run through a
// placed_allocator (peer copies on the simulator). A competing tenant takes 60 % of one GPU,
// the GPUs' memory jitters, the tenant leaves, and then a GPU falls off the bus.
//
// Each step is checked, so the demo is also a test (CTest example.elastic):
// - the items leave the crowded GPU within two periods;
// - nothing moves while the jitter (2 % of each GPU's free memory) stays within the hysteresis,
//   and each such reading stays for the hysteresis' sake, never because no plan fits;
// - the items come back once the cooldown has passed, not before;
// - the lost GPU's items are re-placed at once;
// - no GPU ever goes below its reserve, so never over its memory: every move's memory is taken
//   above the reserve, while the sender still holds its copy, on GPUs whose other processes leave
//   them little more room than the moves need (a plan that overfilled one would fail);
// - on an NVLink machine every copy goes peer to peer, on GeForce boards (no peer access) through
//   host memory.
// Usage: mgm_elastic_demo [PRESET...]   (default: pcie-4gpu-mixed dgx-h100). Exit 1 when a check fails.
// MGM_DEMO=elastic scripts/demo runs it.
#include <mgm/mgm.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t GiB = std::size_t{1} << 30;

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("  [%s] %s\n", ok ? "ok" : "FAILED", what.c_str());
  if (!ok) ++failures;
}

std::string counts_of(const std::vector<std::size_t>& c) {
  std::string s;
  for (std::size_t i = 0; i < c.size(); ++i) s += (i == 0 ? "" : " ") + std::to_string(c[i]);
  return s;
}

void run(const std::string& preset) {
  auto m = mgm::sim::machine::preset(preset);
  const int n = m.device_count();
  const auto gpus = static_cast<std::size_t>(n);
  const std::size_t reserve = GiB;
  const std::size_t bytes_per_item = 4 * MiB;
  const std::size_t items = 64 * gpus;
  std::printf("== %s: %d GPUs, %zu items of %s, %s kept free per GPU ==\n", m.name().c_str(), n, items,
              mgm::format_bytes(bytes_per_item).c_str(), mgm::format_bytes(reserve).c_str());

  // The GPUs are shared, so memory is tight: other processes ("residents") hold all but a little
  // of each GPU. The crowded GPU keeps room for the tenant that comes later (60 % of it) and, once
  // it is there, for a few of the items (its memory then reaches into the reserve, which the
  // tenant does not respect: the items must leave). With the tenant, all the GPUs together have
  // room for the items and 20 % more. A plan that sent a GPU more than its room would fail its move
  // (no memory above the reserve) or cut into the reserve: the memory check can fail.
  const mgm::device_id crowded{1};
  const std::size_t job_bytes = items * bytes_per_item;
  const std::size_t tenant = m.memory(crowded).total_bytes / 10 * 6;
  // After the tenant: room for half a GPU's share, or for what the reserve cannot absorb of the
  // items it then holds (nearly all), and 64 MiB, so that the tenant fits.
  const std::size_t after_tenant = std::max(job_bytes / gpus / 2, (job_bytes > reserve ? job_bytes - reserve : 0) + 64 * MiB);
  const std::size_t crowded_room = tenant + after_tenant;
  const std::size_t other_room = (job_bytes / 100 * 120 - after_tenant) / (gpus - 1);
  for (int d = 0; d < n; ++d) {
    const mgm::device_id gpu{d};
    const std::size_t room = gpu == crowded ? crowded_room : other_room;
    m.hold_foreign(gpu, 100 + static_cast<std::uint32_t>(d), "resident", m.memory(gpu).free_bytes - reserve - room);
  }
  std::printf("  other processes leave %s free above the reserve on GPU1, %s on each other GPU\n",
              mgm::format_bytes(crowded_room).c_str(), mgm::format_bytes(other_room).c_str());

  mgm::pool_options plain;
  plain.expandable_segments = false;
  mgm::placed_allocator placed{m.links(),
                               [&](mgm::device_id d) { return m.allocator(d); },
                               [&](std::optional<int> numa) { return m.host_allocator(numa); },
                               m.peers(),
                               std::vector<std::size_t>(gpus, reserve),
                               mgm::placement_options{},
                               plain};

  // The job: items placed by the first plan.
  mgm::partition_request job;
  job.items = items;
  job.bytes_per_item = bytes_per_item;
  for (int d = 0; d < n; ++d) {
    mgm::partition_device pd;
    pd.free_bytes = m.memory(mgm::device_id{d}).free_bytes;
    pd.reserve_bytes = reserve;
    job.devices.push_back(pd);
  }
  mgm::rebalancer_options options;  // hold 2 readings, 5 % of the items, cooldown 6
  mgm::rebalancer start{job, options, m.links()};
  std::vector<std::vector<void*>> held(gpus);
  for (std::size_t d = 0; d < gpus; ++d) {
    for (std::size_t k = 0; k < start.plan().counts[d]; ++k) {
      held[d].push_back(placed.allocate(mgm::device_id{static_cast<int>(d)}, bytes_per_item));
    }
  }
  std::printf("  start: items per GPU %s\n", counts_of(start.plan().counts).c_str());

  // The moves, carried out as the rebalancer decides them, by the allocator that placed the items
  // (a lost GPU's items are rebuilt on their receiver: nothing is left to copy).
  bool move_failed = false;
  bool reserve_kept = true;
  std::size_t via_host = 0;
  std::size_t peer_routes = 0;
  std::size_t lowest_above_reserve = ~std::size_t{0};  // the least free memory a receiver kept above its reserve
  const auto carry_out = [&](const mgm::rebalance_decision& d) {
    for (const auto& mv : d.plan.moves) (mv.via_host ? via_host : peer_routes) += 1;
    try {
      (void)placed.apply_moves(d.plan.moves, held, bytes_per_item);
    } catch (const std::exception& e) {
      std::printf("  a move failed: %s\n", e.what());
      move_failed = true;
      throw;
    }
    // Every receiver, with the senders' copies still cached (before they are given back).
    for (const auto& mv : d.plan.moves) {
      const std::size_t free = m.memory(mgm::device_id{static_cast<int>(mv.to)}).free_bytes;
      if (free < reserve) reserve_kept = false;
      lowest_above_reserve = std::min(lowest_above_reserve, free > reserve ? free - reserve : 0);
    }
    try {
      (void)placed.release_all();  // the senders' cached blocks go back: their free memory shows it
    } catch (const std::exception&) {
      // a lost GPU's pool cannot give back: its memory is gone with it
    }
  };
  std::shared_ptr<mgm::telemetry::source> src = mgm::telemetry::make_sim_source(m);
  mgm::rebalance_driver driver{start, mgm::rebalance_driver::from_source(src, gpus), std::chrono::seconds{5}, carry_out,
                               {}, false};

  int period = 0;
  const auto tick = [&](const char* what) {
    ++period;
    const auto e = driver.turn();
    std::printf("  t=%-2d %-26s %s\n", period, what, e.message.c_str());
    if (e.what == mgm::rebalance_event::kind::moved) {
      for (const auto& mv : e.decision.plan.moves) {
        if (mv.from_lost) {
          std::printf("        GPU%zu -> GPU%zu  %3zu items rebuilt (nothing to copy from a lost GPU)\n", mv.from, mv.to, mv.items);
        } else {
          std::printf("        GPU%zu -> GPU%zu  %3zu items over %s%s\n", mv.from, mv.to, mv.items, mv.path.c_str(),
                      mv.via_host ? ", through host memory (no peer path)" : ", peer to peer");
        }
      }
      std::printf("        items per GPU %s\n", counts_of(driver.plan().counts).c_str());
    }
    return e;
  };

  for (int i = 0; i < 2; ++i) check(tick("steady").what == mgm::rebalance_event::kind::stayed, "steady: nothing moves");
  const std::size_t before = driver.plan().counts[1];
  m.hold_foreign(crowded, 4242, "tenant", tenant);
  int moved_at = 0;
  for (int i = 1; i <= 2 && moved_at == 0; ++i) {
    if (tick(i == 1 ? "tenant takes 60 % of GPU1" : "tenant stays").what == mgm::rebalance_event::kind::moved) moved_at = period;
  }
  check(moved_at != 0 && driver.plan().counts[1] < before && held[1].size() == driver.plan().counts[1],
        "the items leave the crowded GPU within two periods (" + std::to_string(before) + " -> " +
            std::to_string(driver.plan().counts[1]) + ")");

  // Jitter: another process's memory wanders by up to 2 % of each GPU's free memory above the
  // reserve (as it is when the jitter begins). Each reading must stay for the hysteresis' sake: a
  // plan within `min_change`, or a change not yet held; never because no plan fits (jitter that
  // large is no longer noise).
  const auto jitter = [&](int turns, const char* what) {
    std::vector<std::size_t> amplitude(gpus);
    for (int d = 0; d < n; ++d) {
      const std::size_t free = m.memory(mgm::device_id{d}).free_bytes;
      amplitude[static_cast<std::size_t>(d)] = (free > reserve ? free - reserve : 0) / 50;
    }
    bool still = true;
    for (int i = 0; i < turns; ++i) {
      for (int d = 0; d < n; ++d) {
        const mgm::device_id gpu{d};
        (void)m.release_foreign(gpu, 7);
        m.hold_foreign(gpu, 7, "jitter", amplitude[static_cast<std::size_t>(d)] * static_cast<std::size_t>((period + d) % 2));
      }
      const auto e = tick(what);
      // Staying for the hysteresis, not because nothing fits or the cooldown holds items back.
      still = e.what == mgm::rebalance_event::kind::stayed && e.message.find("no plan fits") == std::string::npos &&
              e.message.find("cooldown") == std::string::npos && still;
    }
    for (int d = 0; d < n; ++d) (void)m.release_foreign(mgm::device_id{d}, 7);
    return still;
  };
  check(jitter(3, "jitter within 2 % of free"), "nothing moves while the jitter stays within the hysteresis");

  // The tenant leaves before the cooldown ends: the items wait for it, then come back.
  (void)m.release_foreign(crowded, 4242);
  int returned_at = 0;
  bool waited = false;
  for (int i = 0; i < 12 && returned_at == 0; ++i) {
    const auto e = tick(i == 0 ? "the tenant leaves" : "waiting");
    if (e.what == mgm::rebalance_event::kind::moved) returned_at = period;
    if (e.message.find("cooldown") != std::string::npos) waited = true;
  }
  check(waited && returned_at == moved_at + static_cast<int>(options.cooldown_steps) && held[1].size() + 1 >= before,
        "the items return when the cooldown ends (moved at t=" + std::to_string(moved_at) + ", back at t=" +
            std::to_string(returned_at) + ", cooldown " + std::to_string(options.cooldown_steps) + " periods)");
  check(jitter(3, "jitter within 2 % of free"), "and stay put in the jitter after");

  const mgm::device_id gone{n - 1};
  m.faults(gone).lose_device();
  const auto lost = tick("GPU falls off the bus");
  check(lost.what == mgm::rebalance_event::kind::moved && driver.plan().counts[gone.index()] == 0 &&
            held[gone.index()].empty(),
        "the lost GPU's items are re-placed at once");
  std::size_t total = 0;
  for (const auto& h : held) total += h.size();
  check(total == items, "every item is held somewhere (" + std::to_string(total) + " of " + std::to_string(items) + ")");
  check(!move_failed && reserve_kept,
        "no move failed and no receiving GPU went below its reserve (the least free above it: " +
            mgm::format_bytes(lowest_above_reserve) + ")");
  const auto copies = m.peers().copies();
  const bool nvlink = m.links().path(mgm::device_id{0}, mgm::device_id{1}).is_nvlink();
  if (nvlink) {
    check(copies.staged == 0 && copies.peer > 0 && via_host == 0,
          "NVLink: every copy peer to peer (" + std::to_string(copies.peer) + " copies, none through host memory)");
  } else {
    check(peer_routes == 0 && copies.peer == 0 && copies.staged > 0,
          "no peer access on these boards: every copy through host memory (" + std::to_string(copies.staged) + ")");
  }
  check(m.hazards().empty(), "the simulator's judge saw no hazard");
  driver.stop();
  for (std::size_t d = 0; d + 1 < gpus; ++d) {
    for (void* p : held[d]) placed.deallocate(p, bytes_per_item);
  }
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) try {
  std::vector<std::string> presets;
  for (int i = 1; i < argc; ++i) presets.emplace_back(argv[i]);
  if (presets.empty()) presets = {"pcie-4gpu-mixed", "dgx-h100"};
  for (const auto& p : presets) run(p);
  std::printf("%s\n", failures == 0 ? "All checks passed." : (std::to_string(failures) + " checks FAILED.").c_str());
  return failures == 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "mgm_elastic_demo: %s\n", e.what());
  return 1;
}
