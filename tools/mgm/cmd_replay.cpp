// mgm replay: allocation traces through each allocator, on K data-parallel devices in K threads.
#include "mgm_tool.hpp"

#include <mgm/bytes.hpp>
#include <mgm/device.hpp>
#include <mgm/error.hpp>
#include <mgm/trace/replay.hpp>
#include <mgm/trace/trace.hpp>

#include <nlohmann/json.hpp>
#include <sys/resource.h>

#include <cstdio>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <thread>

namespace mgm_tool {

namespace {

double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

std::string fixed(double v, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// One trace through one allocator on K devices at once: the results and the run's clocks.
struct parallel_run {
  std::string trace;
  std::string allocator;
  int devices{1};
  double wall_seconds{0};
  double cpu_seconds{0};
  double events_per_second{0};  ///< all devices' events (every iteration) over the wall time
  std::vector<mgm::replay_result> results;
};

}  // namespace

void add_replay(CLI::App& app, context& ctx) {
  auto* cmd = app.add_subcommand("replay", "Replay allocation traces (RMM CSV) through allocators on K data-parallel "
                                           "devices: host time, memory, fit, driver calls");
  struct options {
    std::vector<std::string> traces;
    std::vector<std::string> allocators{"pool"};
    int devices{1};
    int iterations{3};
    std::string capacity;
    bool fit{false};
    std::string cost_model{"default"};
  };
  auto o = std::make_shared<options>();
  cmd->add_option("traces", o->traces, "RMM-format CSV traces (logging_resource_adaptor)")->required();
  cmd->add_option("--allocator", o->allocators, "pool, direct, cub, pmr (simulator or GPU), async (GPU only); a list compares them")
      ->delimiter(',')
      ->check(CLI::IsMember({"pool", "direct", "cub", "pmr", "async"}))
      ->capture_default_str();
  cmd->add_option("--devices", o->devices, "Devices replaying the trace at once, one thread each")->check(CLI::PositiveNumber);
  cmd->add_option("--iterations", o->iterations, "Times each trace is replayed")->check(CLI::PositiveNumber)->capture_default_str();
  auto* cap = cmd->add_option("--capacity", o->capacity, "Simulated device memory (default: the --sim machine's, else 80GiB)");
  cmd->add_flag("--fit", o->fit, "Search the smallest capacity (2 MiB steps) that runs the trace")->excludes(cap);
  cmd->add_option("--cost-model", o->cost_model, "default (66 us per cudaMalloc, 42 us per cudaFree, modelled) or none")
      ->check(CLI::IsMember({"default", "none"}))
      ->capture_default_str();
  cmd->footer("Example: mgm --sim dgx-h100 replay resnet50.rmm_log.csv --allocator pool,cub,direct --devices 4 --iterations 6");
  cmd->callback([&ctx, o] {
    // Where: the simulator unless a GPU is present and --sim is absent.
    const bool on_gpu = !ctx.simulated() && mgm::device_count() > 0;
    std::optional<mgm::sim::machine> machine;
    if (ctx.simulated()) machine.emplace(make_sim_machine(ctx.sim));
    const int available = on_gpu ? mgm::device_count() : machine ? machine->device_count() : o->devices;
    if (o->devices > available) {
      throw tool_error{exit_bad_input, "--devices " + std::to_string(o->devices) + " but the machine has " +
                                           std::to_string(available) + " GPU" + (available == 1 ? "" : "s")};
    }
    for (const auto& a : o->allocators) {
      if (!on_gpu && a == "async") {
        throw tool_error{exit_bad_input, "--allocator async is cudaMallocAsync: it needs a GPU (the simulator has pool, "
                                         "direct, cub and pmr)"};
      }
      if (on_gpu && (a == "cub" || a == "pmr")) {
        throw tool_error{exit_bad_input, "--allocator " + a + " replays on the simulator only (use --sim)"};
      }
    }
    if (on_gpu && o->fit) throw tool_error{exit_bad_input, "--fit searches capacities on the simulator only (use --sim)"};

    std::vector<mgm::compiled_trace> traces;
    for (const auto& path : o->traces) {
      try {
        auto t = mgm::read_rmm_csv_file(path);
        t.name = std::filesystem::path{path}.filename().string();
        traces.push_back(t.compile());
      } catch (const mgm::parse_error& e) {
        throw tool_error{exit_bad_input, path + ":" + std::to_string(e.line()) + ": " + e.what()};
      } catch (const std::exception& e) {
        throw tool_error{exit_bad_input, path + ": " + e.what()};
      }
    }

    std::vector<parallel_run> runs;
    for (const auto& t : traces) {
      for (const auto& a : o->allocators) {
        parallel_run run;
        run.trace = t.name;
        run.allocator = a;
        run.devices = o->devices;
        run.results.resize(static_cast<std::size_t>(o->devices));
        std::vector<std::string> errors(static_cast<std::size_t>(o->devices));
        const double cpu0 = cpu_seconds();
        const auto wall0 = std::chrono::steady_clock::now();
        std::vector<std::thread> threads;
        for (int d = 0; d < o->devices; ++d) {
          threads.emplace_back([&, d] {
            const auto i = static_cast<std::size_t>(d);
            try {
              mgm::replay_options ro;
              ro.iterations = o->iterations;
              ro.fit = o->fit;
              if (o->cost_model == "none") {
                ro.costs.malloc = ro.costs.free = ro.costs.vmm_create = ro.costs.vmm_map = std::chrono::nanoseconds{0};
              }
              if (!o->capacity.empty()) {
                ro.capacity_bytes = mgm::parse_bytes(o->capacity);
              } else if (machine) {
                ro.capacity_bytes = machine->memory(mgm::device_id{d}).total_bytes;
              }
              run.results[i] = on_gpu ? mgm::replay_on_device(t, a, ro, mgm::device_id{d}) : mgm::replay_on_sim(t, a, ro);
              run.results[i].device = d;
            } catch (const std::exception& e) {
              errors[i] = e.what();
            }
          });
        }
        for (auto& th : threads) th.join();
        run.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
        run.cpu_seconds = cpu_seconds() - cpu0;
        for (std::size_t i = 0; i < errors.size(); ++i) {
          if (!errors[i].empty()) {
            throw tool_error{exit_bad_input, t.name + " through " + a + " on device " + std::to_string(i) + ": " + errors[i]};
          }
        }
        double events = 0;
        for (const auto& r : run.results) events += static_cast<double>(r.events) * r.iterations;
        run.events_per_second = run.wall_seconds > 0 ? events / run.wall_seconds : 0;
        runs.push_back(std::move(run));
      }
    }

    if (ctx.json) {
      std::string out = "{\"on\": \"" + std::string{on_gpu ? "gpu" : "sim"} + "\", \"results\": [";
      bool first = true;
      for (const auto& run : runs) {
        for (const auto& r : run.results) {
          out += (first ? "\n  " : ",\n  ") + r.to_json();
          first = false;
        }
      }
      out += "\n], \"data_parallel\": [";
      first = true;
      for (const auto& run : runs) {
        nlohmann::json j{{"trace", run.trace}, {"allocator", run.allocator}, {"devices", run.devices},
                         {"wall_seconds", run.wall_seconds}, {"cpu_seconds", run.cpu_seconds},
                         {"events_per_second", run.events_per_second}};
        out += (first ? "\n  " : ",\n  ") + j.dump();
        first = false;
      }
      out += "\n]}\n";
      std::printf("%s", out.c_str());
      return;
    }
    std::printf("Replays on %s, %d iteration%s, %d device%s in parallel%s\n\n",
                on_gpu ? "this GPU machine" : (machine ? ("the simulated machine " + machine->name()).c_str() : "simulated devices"),
                o->iterations, o->iterations == 1 ? "" : "s", o->devices, o->devices == 1 ? "" : "s",
                o->cost_model == "none" ? ", no modelled driver cost" : "");
    std::printf("%-28s %-7s %3s %9s %12s %10s %9s %8s %8s %10s %14s\n", "TRACE", "ALLOC", "DEV", "EVENTS", "HOST ns/EVENT",
                "PEAK LIVE", "RES/LIVE", "FIT", "MALLOCS", "AFTER 1ST", on_gpu ? "DRIVER s" : "MODELLED s");
    for (const auto& run : runs) {
      for (const auto& r : run.results) {
        const std::string fit = r.fit ? fixed(r.fit->over_peak_live, 3) : "--";
        const auto upstream = r.modelled_upstream_seconds ? r.modelled_upstream_seconds : r.measured_upstream_seconds;
        std::printf("%-28.28s %-7s %3d %9zu %12.1f %10s %9.3f %8s %8llu %10llu %14s\n", r.trace.c_str(), r.allocator.c_str(),
                    r.device, r.events, r.host_ns_per_event, mgm::format_bytes(r.peak_live_bytes).c_str(),
                    r.reserved_over_live, fit.c_str(), static_cast<unsigned long long>(r.upstream_allocations),
                    static_cast<unsigned long long>(r.upstream_calls_after_first_iteration),
                    upstream ? fixed(*upstream, 4).c_str() : "--");
      }
    }
    if (o->devices > 1) {
      std::printf("\nData-parallel runs (all devices at once, one thread each):\n");
      for (const auto& run : runs) {
        std::printf("  %-28.28s %-7s %d devices: %.2f M events/s, wall %.2f s, CPU %.2f s (%.2f cores busy)\n",
                    run.trace.c_str(), run.allocator.c_str(), run.devices, run.events_per_second / 1e6, run.wall_seconds,
                    run.cpu_seconds, run.wall_seconds > 0 ? run.cpu_seconds / run.wall_seconds : 0.0);
      }
    }
    std::printf("\nHOST ns/EVENT: host time per allocation or free, less a do-nothing replay. RES/LIVE: peak device use "
                "over peak requested bytes. FIT: smallest capacity that runs it, over peak live. AFTER 1ST: driver calls "
                "after the first iteration.\n");
  });
}

}  // namespace mgm_tool
