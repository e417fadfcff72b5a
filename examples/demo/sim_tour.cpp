// A tour of a simulated machine: its links, an allocation on every device, a per-device memory
// table with the modelled cost of the driver calls, and what an out-of-memory error says.
// Usage: mgm_demo [PRESET|DEVICE_LIST]   (default: pcie-4gpu-mixed)
#include <mgm/mgm.hpp>

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

void print_links(const mgm::sim::machine& m) {
  std::printf("Links (as nvidia-smi topo -m prints them):\n      ");
  for (int b = 0; b < m.device_count(); ++b) std::printf("%-6s", ("GPU" + std::to_string(b)).c_str());
  std::printf("\n");
  for (int a = 0; a < m.device_count(); ++a) {
    std::printf("GPU%-3d", a);
    for (int b = 0; b < m.device_count(); ++b) {
      std::printf("%-6s", m.links().path(mgm::device_id{a}, mgm::device_id{b}).label().c_str());
    }
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string which = argc > 1 ? argv[1] : "pcie-4gpu-mixed";
  auto m = mgm::sim::machine::from_string(which);
  std::printf("MultiGpuMem tour of the simulated machine '%s' (%d GPUs; no GPU needed)\n\n", m.name().c_str(),
              m.device_count());
  print_links(m);

  // On every device: weights (a fifth of the memory), activations on a stream, a workspace.
  struct block {
    mgm::device_id device;
    void* p;
    std::size_t bytes;
  };
  std::vector<block> blocks;
  auto ops = m.streams();
  for (int d = 0; d < m.device_count(); ++d) {
    const mgm::device_id gpu{d};
    auto alloc = m.allocator(gpu);
    const std::size_t total = m.memory(gpu).total_bytes;
    const auto s = m.create_stream(gpu);
    blocks.push_back({gpu, alloc.allocate(total / 5), total / 5});
    for (int layer = 0; layer < 50; ++layer) {
      const std::size_t bytes = (std::size_t{8} + static_cast<std::size_t>(layer % 7) * 8) * MiB;
      blocks.push_back({gpu, alloc.allocate_async(bytes, 256, s), bytes});
      m.enqueue(s, std::chrono::microseconds{200});  // the layer's kernel
    }
    blocks.push_back({gpu, alloc.allocate(512 * MiB), 512 * MiB});
    auto done = ops.create_event(gpu);
    ops.record(done, s);
    ops.synchronize(done);
    ops.destroy_event(done);
  }

  std::printf("\nPer-device memory after allocating on every device:\n");
  std::printf("%-4s %-26s %12s %12s %12s %7s %12s %14s\n", "GPU", "name", "total", "used", "free", "allocs",
              "clock", "driver calls");
  for (int d = 0; d < m.device_count(); ++d) {
    const mgm::device_id gpu{d};
    const auto mem = m.memory(gpu);
    const auto cost = m.modelled(gpu);
    std::printf("%-4d %-26s %12s %12s %12s %7zu %9.1f ms %11.2f ms\n", d, m.spec(gpu).name.c_str(),
                mgm::format_bytes(mem.total_bytes).c_str(), mgm::format_bytes(mem.used_bytes).c_str(),
                mgm::format_bytes(mem.free_bytes).c_str(), mem.live_allocations,
                std::chrono::duration<double, std::milli>(m.now(gpu)).count(), cost.total_seconds() * 1e3);
  }
  std::printf("(clock: the device's virtual time; driver calls: every call priced by the typical cost model of research/driver-costs.md §3, modelled)\n");

  std::printf("\nPeer access, row -> column (CUDA's rules: NVLink, or PCIe below the CPU on boards that allow it):\n      ");
  auto peers = m.peers();
  for (int b = 0; b < m.device_count(); ++b) std::printf("%-6s", ("GPU" + std::to_string(b)).c_str());
  std::printf("\n");
  for (int a = 0; a < m.device_count(); ++a) {
    std::printf("GPU%-3d", a);
    for (int b = 0; b < m.device_count(); ++b) {
      std::printf("%-6s", a == b ? "-" : peers.can_access(mgm::device_id{a}, mgm::device_id{b}) ? "yes" : "no");
    }
    std::printf("\n");
  }

  // Split a model's 81 layers of 512 MiB over what is free now, in proportion (largest remainder).
  mgm::partition_request work;
  work.items = 81;
  work.bytes_per_item = 512 * MiB;
  for (int d = 0; d < m.device_count(); ++d) {
    mgm::partition_device pd;
    pd.free_bytes = m.memory(mgm::device_id{d}).free_bytes;
    pd.reserve_bytes = 256 * MiB;
    work.devices.push_back(pd);
  }
  try {
    const auto plan = mgm::partition(work, &m.links());
    std::printf("\n81 layers of 512 MiB split by free memory (contiguous ranges, best-linked devices adjacent):\n");
    for (int d = 0; d < m.device_count(); ++d) {
      const auto [begin, end] = plan.ranges[static_cast<std::size_t>(d)];
      std::printf("  GPU%d: %2zu layers [%zu, %zu)\n", d, plan.counts[static_cast<std::size_t>(d)], begin, end);
    }
  } catch (const mgm::partition_error& e) {
    std::printf("\n81 layers of 512 MiB do not fit: %s\n", e.what());
  }

  const mgm::device_id smallest{m.device_count() - 1};
  std::printf("\nAsking GPU%d for more than it has left:\n", smallest.value());
  try {
    (void)m.allocator(smallest).allocate(m.memory(smallest).free_bytes + MiB);
  } catch (const mgm::out_of_memory& e) {
    std::printf("  mgm::out_of_memory: %s\n", e.what());
  }

  for (const auto& b : blocks) m.allocator(b.device).deallocate(b.p, b.bytes);
  std::size_t left = 0;
  for (int d = 0; d < m.device_count(); ++d) left += m.memory(mgm::device_id{d}).used_bytes;
  std::printf("\nEverything freed: %s in use on the machine.\n", mgm::format_bytes(left).c_str());
  return left == 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "mgm_demo: %s\n", e.what());
  return 2;
}
