// mgm replay: allocation traces through each allocator, on K data-parallel devices in K threads.
#include "mgm_tool.hpp"
#include "number_text.hpp"

#include <mgm/bytes.hpp>
#include <mgm/device.hpp>
#include <mgm/error.hpp>
#include <mgm/trace/replay.hpp>
#include <mgm/trace/trace.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <sstream>

namespace mgm_tool {

namespace {

// {"k": v, "list": [\n  element,\n  element\n]}: the top-level object of a document on one line,
// each element of its arrays on a line of its own, compact within.
std::string json_one_element_per_line(const nlohmann::ordered_json& doc) {
  std::string out = "{";
  bool first_key = true;
  for (const auto& [key, value] : doc.items()) {
    out += (first_key ? "" : ", ") + nlohmann::ordered_json(key).dump() + ": ";
    first_key = false;
    if (!value.is_array()) {
      out += value.dump();
      continue;
    }
    out += "[";
    for (std::size_t i = 0; i < value.size(); ++i) out += (i ? ",\n  " : "\n  ") + value[i].dump();
    out += "\n]";
  }
  return out + "}\n";
}

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
    std::string cost_model{"typical"};
    bool judge{false};
    double memory_limit{1.05};
  };
  auto o = std::make_shared<options>();
  cmd->add_option("traces", o->traces, "RMM-format CSV traces (logging_resource_adaptor)")->required();
  cmd->add_option("--allocator", o->allocators, "pool, direct, cub (simulator or GPU), pmr and bump (simulator), async (GPU only); a list compares them")
      ->delimiter(',')
      ->check(CLI::IsMember({"pool", "direct", "cub", "pmr", "bump", "async"}))
      ->capture_default_str();
  cmd->add_option("--devices", o->devices, "Devices replaying the trace at once, one thread each")->check(count_at_least(1));
  cmd->add_option("--iterations", o->iterations, "Times each trace is replayed")->check(count_at_least(1))->capture_default_str();
  auto* cap = cmd->add_option("--capacity", o->capacity, "Simulated device memory (default: the --sim machine's, else 80GiB)");
  cmd->add_flag("--fit", o->fit, "Search the smallest capacity (2 MiB steps) that runs the trace")->excludes(cap);
  cmd->add_option("--cost-model", o->cost_model,
                  "Modelled driver costs (research/driver-costs.md §3): typical (also 'default'), low, high, or none")
      ->check(CLI::IsMember({"typical", "default", "low", "high", "none"}))
      ->capture_default_str();
  cmd->add_option("--memory-limit", o->memory_limit,
                  "The reserved / live limit of the least driver time a growing allocator could take (LEAST s)")
      ->check(CLI::Range(1.0, 100.0))
      ->capture_default_str();
  cmd->add_flag("--judge", o->judge,
                "Judge every hand-out on the simulator (stream safety, graphs, virtual memory); counts hazards. "
                "Host time then includes the judge");
  cmd->footer("The pool takes its options from MGM_ALLOC_CONF, as in a program.\n"
              "Example: mgm --sim dgx-h100 replay resnet50.rmm_log.csv --allocator pool,cub,direct --devices 4 --iterations 6");
  cmd->callback([&ctx, o] {
    // Where: the simulator unless a GPU is present and --sim is absent.
    const bool on_gpu = !ctx.simulated() && mgm::device_count() > 0;
    // The simulated machine, unless --capacity gives every device's memory and --sim is a topology
    // file: then only its GPU count matters, and no --sim-devices is needed.
    std::optional<mgm::sim::machine> machine;
    std::string machine_name;
    std::string capacity_source = o->capacity.empty() ? "80 GiB each, the default" : "--capacity";
    int sim_gpus = o->devices;
    if (ctx.simulated()) {
      const bool links_only = !o->capacity.empty() && ctx.sim_devices.empty() && std::filesystem::is_regular_file(ctx.sim);
      if (links_only) {
        const auto links = make_sim_links(ctx);
        machine_name = links.name.substr(4);
        sim_gpus = static_cast<int>(links.gpu_names.size());
      } else {
        auto choice = make_sim_machine(ctx);
        machine.emplace(std::move(choice.machine));
        machine_name = machine->name();
        sim_gpus = machine->device_count();
        if (o->capacity.empty()) capacity_source = choice.capacity_source;
      }
    }
    const int available = on_gpu ? mgm::device_count() : sim_gpus;
    if (o->devices > available) {
      throw tool_error{exit_bad_input, "--devices " + std::to_string(o->devices) + " but the machine has " +
                                           std::to_string(available) + " GPU" + (available == 1 ? "" : "s")};
    }
    for (const auto& a : o->allocators) {
      if (!on_gpu && a == "async" && !ctx.simulated()) {
        no_gpu("--allocator async is cudaMallocAsync: it needs a GPU; the simulator (--sim) has pool, direct, cub, pmr and bump");
      }
      if (!on_gpu && a == "async") {
        throw tool_error{exit_bad_input, "--allocator async is cudaMallocAsync: it needs a GPU (the simulator has pool, "
                                         "direct, cub, pmr and bump)"};
      }
      if (on_gpu && (a == "pmr" || a == "bump")) {
        throw tool_error{exit_bad_input, "--allocator " + a + " replays on the simulator only (use --sim)"};
      }
    }
    if (on_gpu && o->fit) throw tool_error{exit_bad_input, "--fit searches capacities on the simulator only (use --sim)"};
    if (on_gpu && !o->capacity.empty()) {
      throw tool_error{exit_bad_input, "--capacity sets a simulated device's memory: on a GPU it is the GPU's (use --sim)"};
    }

    std::vector<mgm::compiled_trace> traces;
    for (const auto& path : o->traces) {
      require_file(path);
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

    mgm::replay_options ro;
    ro.iterations = o->iterations;
    ro.fit = o->fit;
    ro.judge = o->judge;
    ro.memory_limit = o->memory_limit;
    try {
      ro.pool = mgm::pool_options::from_env();  // MGM_ALLOC_CONF, as the pool reads it in a program
    } catch (const std::exception& e) {
      throw tool_error{exit_bad_input, e.what()};
    }
    if (on_gpu && o->judge) throw tool_error{exit_bad_input, "--judge judges replays on the simulator only (use --sim)"};
    ro.costs = o->cost_model == "low"    ? mgm::sim::cost_model::low()
               : o->cost_model == "high" ? mgm::sim::cost_model::high()
               : o->cost_model == "none" ? mgm::sim::cost_model::none()
                                         : mgm::sim::cost_model::typical();
    std::vector<std::size_t> capacities;
    for (int d = 0; d < o->devices; ++d) {
      if (!o->capacity.empty()) {
        try {
          capacities.push_back(mgm::parse_bytes(o->capacity));
        } catch (const std::exception& e) {
          throw tool_error{exit_bad_input, "--capacity: " + std::string{e.what()}};
        }
      } else {
        capacities.push_back(machine ? machine->memory(mgm::device_id{d}).total_bytes : ro.capacity_bytes);
      }
    }
    std::vector<mgm::data_parallel_result> runs;
    for (const auto& t : traces) {
      for (const auto& a : o->allocators) {
        try {
          runs.push_back(mgm::replay_data_parallel(t, a, ro, capacities, on_gpu));
        } catch (const std::exception& e) {
          throw tool_error{exit_bad_input, t.name + " through " + a + ": " + e.what()};
        }
      }
    }

    if (ctx.json) {
      // Built with nlohmann-json; laid out one result per line, so that runs diff line by line.
      using json = nlohmann::ordered_json;
      json results = json::array();
      json parallel = json::array();
      for (const auto& run : runs) {
        for (const auto& r : run.per_device) results.push_back(json::parse(r.to_json()));
        parallel.push_back(json::parse(run.to_json()));
      }
      const json doc{{"on", on_gpu ? "gpu" : "sim"}, {"results", std::move(results)}, {"data_parallel", std::move(parallel)}};
      std::printf("%s", json_one_element_per_line(doc).c_str());
      return;
    }
    std::printf("Replays on %s, %d iteration%s, %d device%s in parallel%s\n\n",
                on_gpu ? "this GPU machine"
                       : (ctx.simulated() ? "the simulated machine " + machine_name + " (memory: " + capacity_source + ")"
                                          : "simulated devices (memory: " + capacity_source + ")")
                             .c_str(),
                o->iterations, o->iterations == 1 ? "" : "s", o->devices, o->devices == 1 ? "" : "s",
                (", driver costs modelled '" + (o->cost_model == "default" ? std::string{"typical"} : o->cost_model) + "'" +
                 (o->judge ? ", judged" : "")).c_str());
    std::printf("%-28s %-7s %3s %9s %12s %10s %9s %8s %8s %10s %14s %10s %16s%s\n", "TRACE", "ALLOC", "DEV", "EVENTS",
                "HOST ns/EVENT", "PEAK LIVE", "RES/LIVE", "FIT", "ALLOCS", "AFTER 1ST", on_gpu ? "DRIVER s" : "MODELLED s",
                "FLOOR s", "LEAST s (xFLOOR)", o->judge ? "  HAZARDS" : "");
    for (const auto& run : runs) {
      for (const auto& r : run.per_device) {
        const std::string fit = r.fit ? fixed(r.fit->over_peak_live, 3) : "--";
        const auto upstream = r.modelled_driver_seconds ? std::optional{r.modelled_driver_seconds->total}
                                                        : r.measured_upstream_seconds;
        const std::string floor = r.modelled_driver_seconds ? fixed(r.modelled_driver_seconds->floor, 4) : "--";
        const std::string hazards = r.hazards ? "  " + std::to_string(*r.hazards) : "";
        std::string least = "--";
        if (r.modelled_driver_seconds && r.modelled_driver_seconds->least_under_memory_limit) {
          const auto& b = *r.modelled_driver_seconds->least_under_memory_limit;
          least = fixed(b.least_seconds.seconds, 4) + " (" + fixed(b.least_over_floor.over_floor(), 3) + ")";
        }
        std::printf("%-28.28s %-7s %3d %9zu %12.1f %10s %9.3f %8s %8llu %10llu %14s %10s %16s%s\n", r.trace.c_str(),
                    r.allocator.c_str(), r.device, r.events, r.host_ns_per_event,
                    mgm::format_bytes(r.peak_live_bytes).c_str(), r.reserved_over_live, fit.c_str(),
                    static_cast<unsigned long long>(r.upstream_allocations),
                    static_cast<unsigned long long>(r.upstream_calls_after_first_iteration),
                    upstream ? fixed(*upstream, 4).c_str() : "--", floor.c_str(), least.c_str(), hazards.c_str());
      }
    }
    if (o->devices > 1) {
      std::printf("\nData-parallel runs (all devices at once, one thread each):\n");
      for (const auto& run : runs) {
        std::printf("  %-28.28s %-7s %zu devices: %.2f M events/s, wall %.2f s, CPU %.2f s (%.2f cores busy)\n",
                    run.per_device.front().trace.c_str(), run.per_device.front().allocator.c_str(), run.per_device.size(),
                    run.events_per_second / 1e6, run.wall_seconds,
                    run.cpu_seconds, run.wall_seconds > 0 ? run.cpu_seconds / run.wall_seconds : 0.0);
      }
    }
    std::printf("\nHOST ns/EVENT: host time per allocation or free, less a do-nothing replay and the simulator's own "
                "bookkeeping inside the calls it models (measured). RES/LIVE: peak device use "
                "over peak requested bytes. FIT: smallest capacity that runs it, over peak live. ALLOCS: cudaMalloc + "
                "cuMemCreate calls. AFTER 1ST: driver calls that obtain, map or free memory after the first iteration. "
                "MODELLED s: every driver call priced by the cost model (events and virtual-memory calls included). "
                "FLOOR s: the model's price of obtaining the peak reserved bytes once. LEAST s: for an allocator that "
                "grew virtual ranges, the least any such allocator could take while reserved stays within --memory-limit "
                "x peak live after each growth (perfect packing; include/mgm/trace/growth_bound.hpp), and in brackets "
                "the least any such allocator could take over its own floor.\n");
  });
}

}  // namespace mgm_tool
