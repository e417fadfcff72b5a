// The `nvidia-smi topo -m` parser on arbitrary text: a topology whose matrix prints and reads
// back the same, or parse_error naming a line of the text.
#include <mgm/error.hpp>
#include <mgm/topology/topology.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text{reinterpret_cast<const char*>(data), size};
  std::size_t lines = 1;
  for (const char c : text) lines += c == '\n' ? 1 : 0;
  try {
    const auto t = mgm::parse_smi_topology(text);
    if (t.gpu_count() == 0) std::abort();
    if (!(mgm::parse_smi_topology(t.to_smi_matrix()) == t)) std::abort();
  } catch (const mgm::parse_error& e) {
    if (e.line() < 1 || e.line() > lines) std::abort();
  }
  return 0;
}
