// Replays RMM-format traces through every allocator on the simulator and prints one
// replay_result per line as JSON (the record `mgm replay --json` prints).
//   mgm_replay_traces [--iterations N] [--fit] [--judge] [--allocators pool,cub,...] [--capacity-over-live F] TRACE.csv...
// --capacity-over-live F runs each trace on a device of F x its peak live bytes; --judge wraps
// each allocator in the simulator's judge (host time then includes it).
#include <mgm/error.hpp>
#include <mgm/trace/replay.hpp>
#include <mgm/trace/trace.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

int main(int argc, char** argv) try {
  mgm::replay_options options;
  options.judge = false;  // host time is the allocator's own unless --judge
  std::vector<std::string> allocators{"pool", "direct", "cub", "pmr"};
  std::vector<std::string> files;
  double capacity_over_live = 0.0;  // 0: the default capacity
  CLI::App app{"Replays RMM-format traces through every allocator on the simulator; one replay_result per line as JSON",
               "mgm_replay_traces"};
  app.add_option("--iterations", options.iterations, "Passes over each trace")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--capacity-over-live", capacity_over_live, "Run each trace on a device of F x its peak live bytes")
      ->check(CLI::PositiveNumber);
  app.add_flag("--fit", options.fit, "Search the smallest capacity that runs each trace");
  app.add_flag("--judge", options.judge, "Judge every hand-out on the simulator (host time then includes it)");
  app.add_option("--allocators", allocators, "pool, direct, cub, pmr, bump")->delimiter(',')->capture_default_str();
  app.add_option("traces", files, "RMM-format trace files")->required()->check(CLI::ExistingFile);
  CLI11_PARSE(app, argc, argv);
  for (const auto& f : files) {
    const auto compiled = mgm::read_rmm_csv_file(f).compile();
    if (capacity_over_live > 0.0) {
      options.capacity_bytes = static_cast<std::size_t>(static_cast<double>(compiled.peak_live_bytes) * capacity_over_live);
    }
    for (const auto& a : allocators) {
      try {
        std::printf("%s\n", mgm::replay_on_sim(compiled, a, options).to_json().c_str());
      } catch (const mgm::out_of_memory& e) {
        const nlohmann::ordered_json j{{"trace", compiled.name}, {"allocator", a}, {"error", "out of memory"}};
        std::printf("%s\n", j.dump().c_str());
      }
      std::fflush(stdout);
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "mgm_replay_traces: %s\n", e.what());
  return 2;
}
