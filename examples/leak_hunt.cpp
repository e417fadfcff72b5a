// Leak hunt on a simulated GPU: a fake training loop of five layers, one of which
// ("layer3.attention") keeps its intermediate buffers every iteration. A tracking adaptor over a
// caching pool tags every allocation with its layer; a checkpoint after a warm-up iteration and
// one after N more iterations say which tag grew, by how much per iteration, and what is still
// live. The live bytes per iteration also go through the log-level leak analysis.
// Exits 0 only when the culprit found is layer3.attention (the CTest test checks this).
// Usage: mgm_example_leak_hunt [ITERATIONS]   (default 20)
#include <mgm/mgm.hpp>
#include <mgm/telemetry/leak_analysis.hpp>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

struct layer {
  const char* tag;
  std::size_t activation_bytes;
  bool keeps_buffers;  // the bug: intermediates appended to a list that is never cleared
};

constexpr layer layers[] = {
    {"layer1.embedding", 6 * MiB, false}, {"layer2.mlp", 12 * MiB, false}, {"layer3.attention", 3 * MiB, true},
    {"layer4.mlp", 12 * MiB, false},      {"layer5.head", 2 * MiB, false},
};

}  // namespace

int main(int argc, char** argv) try {
  int iterations = 20;
  CLI::App app{"A layer that keeps its buffers every iteration, found by the tracking adaptor and the leak analysis",
               "mgm_example_leak_hunt"};
  app.add_option("iterations", iterations, "Training iterations to simulate")->check(CLI::Range(2, 100000))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  auto m = mgm::sim::machine::preset("dgx-h100");
  using pool_type = mgm::caching_pool<mgm::sim::device_allocator>;
  pool_type pool{m.allocator(mgm::device_id{0}), mgm::pool_options{}};
  // Tracking above the pool sees the user's allocations (the pool's segments are its business).
  mgm::tracking_adaptor<mgm::allocator_ref<pool_type>> tracked{mgm::allocator_ref<pool_type>{pool}};

  struct block {
    void* p;
    std::size_t bytes;
  };
  std::vector<block> weights;
  std::vector<block> kept;  // what layer3.attention forgets to free
  for (const auto& l : layers) {
    const mgm::tag_scope tag{l.tag};
    weights.push_back({tracked.allocate(4 * l.activation_bytes), 4 * l.activation_bytes});
  }

  std::vector<mgm::telemetry::series_point> live;  // one point per iteration, a second apart
  const auto step = [&] {
    std::vector<block> activations;
    for (const auto& l : layers) {
      const mgm::tag_scope tag{l.tag};
      activations.push_back({tracked.allocate(l.activation_bytes), l.activation_bytes});
      void* scratch = tracked.allocate(l.activation_bytes / 2);  // a temporary inside the layer
      if (l.keeps_buffers) {
        kept.push_back({scratch, l.activation_bytes / 2});
      } else {
        tracked.deallocate(scratch, l.activation_bytes / 2);
      }
    }
    for (auto it = activations.rbegin(); it != activations.rend(); ++it) tracked.deallocate(it->p, it->bytes);
    live.push_back({static_cast<double>(live.size()), static_cast<double>(tracked.live_bytes()) / MiB});
  };

  step();  // warm-up: the pool fills its cache
  const auto baseline = tracked.checkpoint();
  for (int i = 0; i < iterations; ++i) step();
  const auto diff = tracked.growth_since(baseline);

  std::printf("Leak hunt: %d iterations after a warm-up on a simulated %s\n", iterations,
              m.spec(mgm::device_id{0}).name.c_str());
  std::size_t baseline_bytes = 0;
  for (const auto& rec : baseline.live) baseline_bytes += rec.bytes;
  std::printf("  live %s at the baseline, %s now; the pool reserves %s\n", mgm::format_bytes(baseline_bytes).c_str(),
              mgm::format_bytes(tracked.live_bytes()).c_str(),
              mgm::format_bytes(static_cast<std::size_t>(pool.statistics().reserved_bytes.current)).c_str());
  std::string culprit;
  if (!diff.by_tag.empty() && diff.by_tag.front().bytes > 0) {
    const auto& top = diff.by_tag.front();
    culprit = top.tag;
    std::size_t live_allocations = 0;
    for (const auto& rec : diff.appeared) live_allocations += rec.tag == top.tag ? 1 : 0;
    std::printf("  grew: %s by %s (%s per iteration), %zu allocations still live since the baseline\n",
                top.tag.c_str(), mgm::format_bytes(static_cast<std::size_t>(top.bytes)).c_str(),
                mgm::format_bytes(static_cast<std::size_t>(top.bytes / iterations)).c_str(), live_allocations);
    std::size_t shown = 0;
    for (const auto& rec : diff.appeared) {
      if (rec.tag != top.tag) continue;
      if (shown++ == 3) {
        std::printf("    ... (%zu more)\n", live_allocations - 3);
        break;
      }
      std::printf("    allocation #%llu: %s\n", static_cast<unsigned long long>(rec.sequence),
                  mgm::format_bytes(rec.bytes).c_str());
    }
    for (std::size_t k = 1; k < diff.by_tag.size(); ++k) {
      std::printf("  also changed: %s %+lld bytes\n", diff.by_tag[k].tag.c_str(), static_cast<long long>(diff.by_tag[k].bytes));
    }
  } else {
    std::printf("  nothing grew\n");
  }
  // Iterations are taken as one second apart: the rate per minute / 60 is the rate per iteration.
  const auto trend = mgm::telemetry::analyse_series(live);
  std::printf("  trend of the live bytes: %s, %.2f MiB per iteration (confidence %.2f)\n",
              mgm::telemetry::to_string(trend.verdict), trend.rate_mib_per_min / 60.0, trend.confidence);

  for (const auto& b : kept) tracked.deallocate(b.p, b.bytes);
  for (const auto& b : weights) tracked.deallocate(b.p, b.bytes);

  const bool found = culprit == "layer3.attention" && trend.verdict == mgm::telemetry::leak_verdict::leak;
  std::printf("%s: the culprit is %s\n", found ? "OK" : "FAILED", culprit.empty() ? "(none)" : culprit.c_str());
  return found ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "leak_hunt: %s\n", e.what());
  return 2;
}
