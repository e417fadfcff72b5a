// The simulator's device-list parser on arbitrary text: a list within the limits, or parse_error.
#include <mgm/error.hpp>
#include <mgm/sim/device_spec.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text{reinterpret_cast<const char*>(data), size};
  try {
    const auto devices = mgm::sim::parse_device_list(text);
    if (devices.empty() || devices.size() > mgm::sim::max_devices) std::abort();
    for (const auto& d : devices) {
      if (d.memory_bytes < 256 || d.name.empty()) std::abort();
    }
  } catch (const mgm::parse_error& e) {
    if (e.column() < 1 || e.column() > size + 1) std::abort();
  }
  return 0;
}
