// Placement across the GPUs of a simulated DGX-1 (8x V100 16 GB, NVLink hybrid cube-mesh):
// split work by free memory, rank where a buffer should live, and let a placed_allocator fill
// GPU0, spill to its NVLink peers, and only then to pinned host memory. No GPU needed.
// Usage: mgm_example_multi_gpu_placement
#include <mgm/mgm.hpp>

#include <cstdio>
#include <exception>
#include <map>
#include <string>
#include <vector>

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t GiB = std::size_t{1} << 30;

}  // namespace

int main() try {
  auto m = mgm::sim::machine::preset("dgx1-v100");
  const int n = m.device_count();
  std::printf("Simulated %s: %d x %s, %s each\n\n", m.name().c_str(), n, m.spec(mgm::device_id{0}).name.c_str(),
              mgm::format_bytes(m.memory(mgm::device_id{0}).total_bytes).c_str());
  std::printf("%s\n", m.links().to_smi_matrix().c_str());

  // 1. Another job holds memory on GPUs 4-7: split 1000 samples of 40 MiB by what is free.
  std::vector<std::pair<mgm::device_id, void*>> other_job;
  for (int d = 4; d < n; ++d) {
    const mgm::device_id gpu{d};
    other_job.emplace_back(gpu, m.allocator(gpu).allocate(static_cast<std::size_t>(d - 2) * 2 * GiB));
  }
  mgm::partition_request work;
  work.items = 1000;
  work.bytes_per_item = 40 * MiB;
  for (int d = 0; d < n; ++d) {
    mgm::partition_device pd;
    pd.free_bytes = m.memory(mgm::device_id{d}).free_bytes;
    pd.reserve_bytes = 512 * MiB;
    work.devices.push_back(pd);
  }
  const mgm::partition_plan plan = mgm::partition(work, &m.links());
  std::printf("1000 samples of 40 MiB split by free memory (512 MiB kept free per GPU):\n");
  for (int d = 0; d < n; ++d) {
    const auto i = static_cast<std::size_t>(d);
    std::printf("  GPU%d  free %10s  -> %4zu samples [%zu, %zu)\n", d,
                mgm::format_bytes(work.devices[i].free_bytes).c_str(), plan.counts[i], plan.ranges[i].first,
                plan.ranges[i].second);
  }
  for (const auto& [gpu, p] : other_job) {
    m.allocator(gpu).deallocate(p, static_cast<std::size_t>(gpu.value() - 2) * 2 * GiB);
  }

  // 2. A placed_allocator: a caching pool per GPU, 256 MiB kept free on each.
  std::size_t copied = 0;
  mgm::pool_options plain;
  plain.expandable_segments = false;
  mgm::placed_allocator placed{m.links(),
                               [&](mgm::device_id d) { return m.allocator(d); },
                               [&](std::optional<int> numa) { return m.host_allocator(numa); },
                               m.peers(),
                               std::vector<std::size_t>(static_cast<std::size_t>(n), 256 * MiB),
                               mgm::placement_options{},
                               plain,
                               // rebalance() moves buffers with this (cudaMemcpy on real GPUs). These
                               // simulated buffers were never written: count the bytes, skip the copy
                               // (a memcpy would touch gigabytes of host memory).
                               [&](void*, const void*, std::size_t bytes) { copied += bytes; }};
  struct buffer {
    void* p;
    std::size_t bytes;
  };
  std::vector<buffer> buffers;
  const mgm::device_id reader{0};
  while (true) {  // 1 GiB buffers for GPU0 until one no longer fits on it
    void* p = placed.allocate(reader, GiB);
    buffers.push_back({p, GiB});
    if (placed.location_of(p)->device != reader) break;
  }
  std::printf("\nGPU0 took %zu buffers of 1 GiB; the next went to %s over %s.\n", buffers.size() - 1,
              placed.location_of(buffers.back().p)->to_string().c_str(), placed.spills().back().path.c_str());

  // 3. Where would a 2 GiB buffer for GPU0 go now? The ranking the allocator follows.
  mgm::placement_request request;
  request.reader = reader;
  request.bytes = 2 * GiB;
  for (int d = 0; d < n; ++d) {
    const mgm::device_id gpu{d};
    const auto st = placed.pools().pool(gpu).statistics();
    request.free_bytes.push_back(m.memory(gpu).free_bytes +
                                 static_cast<std::size_t>(st.reserved_bytes.current - st.allocated_bytes.current));
  }
  request.reserve_bytes.assign(static_cast<std::size_t>(n), 256 * MiB);
  std::printf("\nCandidates for a 2 GiB buffer read by GPU0, best first:\n");
  for (const auto& c : mgm::rank_placements(m.links(), request)) {
    std::printf("  %-14s %-13s %5.1f GB/s  %s\n", c.where.to_string().c_str(), c.path.c_str(), c.gbps, c.why.c_str());
  }

  // 4. Keep asking for 4 GiB for GPU0: the NVLink peers fill up before host memory is used.
  std::printf("\n4 GiB buffers for GPU0 until one lands in host memory:\n");
  for (int i = 0; i < 64; ++i) {
    void* p = placed.allocate(reader, 4 * GiB);
    buffers.push_back({p, 4 * GiB});
    const auto where = *placed.location_of(p);
    std::printf("  #%-2d -> %-14s via %s\n", i + 1, where.to_string().c_str(), placed.spills().back().path.c_str());
    if (where.is_host()) break;
  }
  const mgm::placement_statistics st = placed.statistics();
  std::printf("\n%zu allocations: %zu on GPU0, %zu spilled to NVLink/PCIe peers, %zu to host memory; %s live "
              "away from their reader; peer access enabled for %zu pairs\n",
              st.allocations, st.local, st.to_peers, st.to_host, mgm::format_bytes(st.spilled_bytes).c_str(),
              placed.peers().enables());

  // 5. GPU0 frees half of its own buffers; rebalance() brings spilled buffers home.
  std::size_t freed = 0;
  for (auto& b : buffers) {
    if (b.p != nullptr && placed.location_of(b.p)->device == reader && freed < 8) {
      placed.deallocate(b.p, b.bytes);
      b.p = nullptr;
      ++freed;
    }
  }
  placed.release_all();
  const auto moved = placed.rebalance();
  for (const auto& mv : moved) {
    for (auto& b : buffers) {
      if (b.p == mv.from_ptr) b.p = mv.to_ptr;
    }
  }
  std::printf("After GPU0 freed %zu GiB, rebalance() moved %zu spilled buffers (%s) back to GPU0.\n", freed,
              moved.size(), mgm::format_bytes(copied).c_str());

  for (const auto& b : buffers) placed.deallocate(b.p, b.bytes);
  placed.release_all();
  std::size_t used = 0;
  for (int d = 0; d < n; ++d) used += m.memory(mgm::device_id{d}).used_bytes;
  std::printf("Everything freed: %s in use on the GPUs.\n", mgm::format_bytes(used).c_str());
  return used == 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "mgm_example_multi_gpu_placement: %s\n", e.what());
  return 1;
}
