// The NCCL topology XML reader on arbitrary text: a topology that writes and reads back to the
// same paths, or parse_error.
#include <mgm/error.hpp>
#include <mgm/topology/topology.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text{reinterpret_cast<const char*>(data), size};
  try {
    const auto t = mgm::parse_nccl_topology_xml(text);
    if (t.gpu_count() == 0) std::abort();
    // The round trip is promised for well-formed machines: distinct, non-empty bus ids.
    std::set<std::string> ids;
    bool distinct = true;
    for (const auto& g : t.gpus()) distinct = distinct && !g.pci_bus_id.empty() && ids.insert(g.pci_bus_id).second;
    bool has_node = !distinct;
    for (std::size_t a = 0; a < t.gpu_count(); ++a) {
      for (std::size_t b = 0; b < t.gpu_count(); ++b) {
        has_node = has_node || t.path(mgm::device_id{static_cast<int>(a)}, mgm::device_id{static_cast<int>(b)}).smi ==
                                   mgm::smi_label::node;
      }
    }
    if (!has_node && !(mgm::parse_nccl_topology_xml(mgm::to_nccl_xml(t)) == t)) std::abort();
  } catch (const mgm::parse_error&) {
  } catch (const mgm::logic_error&) {  // e.g. a NIC's paths that do not fit; still an error, not a crash
  }
  return 0;
}
