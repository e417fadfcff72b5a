// Replays RMM-format traces through every allocator on the simulator and prints one
// replay_result per line as JSON (the record `mgm replay --json` prints).
//   mgm_replay_traces [--iterations N] [--fit] [--judge] [--allocators pool,cub,...] [--capacity-over-live F] TRACE.csv...
// --capacity-over-live F runs each trace on a device of F x its peak live bytes; --judge wraps
// each allocator in the simulator's judge (host time then includes it).
#include <mgm/error.hpp>
#include <mgm/trace/replay.hpp>
#include <mgm/trace/trace.hpp>

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
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--iterations" && i + 1 < argc) {
      options.iterations = std::atoi(argv[++i]);
    } else if (a == "--capacity-over-live" && i + 1 < argc) {
      capacity_over_live = std::atof(argv[++i]);
    } else if (a == "--fit") {
      options.fit = true;
    } else if (a == "--judge") {
      options.judge = true;
    } else if (a == "--allocators" && i + 1 < argc) {
      allocators.clear();
      std::string list = argv[++i];
      for (std::size_t s = 0, c; s <= list.size(); s = c + 1) {
        c = std::min(list.find(',', s), list.size());
        allocators.push_back(list.substr(s, c - s));
      }
    } else {
      files.push_back(a);
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: mgm_replay_traces [--iterations N] [--fit] [--judge] [--allocators a,b] TRACE.csv...\n");
    return 1;
  }
  for (const auto& f : files) {
    const auto compiled = mgm::read_rmm_csv_file(f).compile();
    if (capacity_over_live > 0.0) {
      options.capacity_bytes = static_cast<std::size_t>(static_cast<double>(compiled.peak_live_bytes) * capacity_over_live);
    }
    for (const auto& a : allocators) {
      try {
        std::printf("%s\n", mgm::replay_on_sim(compiled, a, options).to_json().c_str());
      } catch (const mgm::out_of_memory& e) {
        std::printf("{\"trace\":\"%s\",\"allocator\":\"%s\",\"error\":\"out of memory\"}\n", compiled.name.c_str(), a.c_str());
      }
      std::fflush(stdout);
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "mgm_replay_traces: %s\n", e.what());
  return 2;
}
