#include <mgm/mgm.hpp>

#include <cstdio>

int main() {
  // A simulated workstation: 2x RTX 4090 + 2x RTX 4080 (no GPU needed).
  auto machine = mgm::sim::machine::preset("pcie-4gpu-mixed");
  for (int d = 0; d < machine.device_count(); ++d) {
    const mgm::device_id gpu{d};
    auto alloc = machine.allocator(gpu);  // satisfies mgm::stream_allocator
    void* p = alloc.allocate(std::size_t{256} << 20);
    const auto mem = machine.memory(gpu);
    std::printf("GPU%d %-24s %10s used of %s\n", d, machine.spec(gpu).name.c_str(),
                mgm::format_bytes(mem.used_bytes).c_str(), mgm::format_bytes(mem.total_bytes).c_str());
    alloc.deallocate(p, std::size_t{256} << 20);
  }
}
