// A user's program that links one component alone, MultiGpuMem::telemetry (and what it links
// below it): leak analysis of a series, and the figures of a pool on a simulated GPU.
#include <mgm/pool/caching_pool.hpp>
#include <mgm/sim/machine.hpp>
#include <mgm/telemetry/leak_analysis.hpp>
#include <mgm/telemetry/pool_registry.hpp>

#include <cstdio>
#include <vector>

int main() {
  std::vector<mgm::telemetry::series_point> series;
  for (int i = 0; i < 120; ++i) series.push_back({60.0 * i, 4000.0 + 10.0 * i});  // 10 MiB/min
  const auto report = mgm::telemetry::analyse_series(series);
  std::printf("%s at %.1f MiB/min\n", mgm::telemetry::to_string(report.verdict), report.rate_mib_per_min);

  auto machine = mgm::sim::machine::from_string("1x8GiB");
  mgm::caching_pool<mgm::sim::device_allocator> pool{machine.allocator(mgm::device_id{0})};
  void* p = pool.allocate(std::size_t{64} << 20);
  const auto figures = mgm::telemetry::registered_pool_figures();
  const bool seen = figures.size() == 1 && figures[0].figures.allocated == std::uint64_t{64} << 20;
  std::printf("pool figures %s\n", seen ? "seen" : "MISSING");
  pool.deallocate(p, std::size_t{64} << 20);
  return report.verdict == mgm::telemetry::leak_verdict::leak && seen ? 0 : 1;
}
