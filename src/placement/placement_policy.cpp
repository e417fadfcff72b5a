#include <mgm/error.hpp>
#include <mgm/placement/placement_policy.hpp>

#include <algorithm>
#include <string>

namespace mgm {

std::string memory_location::to_string() const {
  if (!is_host()) return "GPU" + std::to_string(device.value());
  return numa_node ? "host (NUMA " + std::to_string(*numa_node) + ")" : std::string{"host"};
}

std::vector<placement_candidate> rank_placements(const topology& links, const placement_request& r,
                                                 const placement_options& o) {
  const std::size_t n = links.gpu_count();
  MGM_EXPECTS(!r.reader.is_host() && r.reader.value() >= 0 && r.reader.index() < n,
              "rank_placements: reader " + std::to_string(r.reader.value()) + " is not one of the " + std::to_string(n) + " GPUs");
  MGM_EXPECTS(r.free_bytes.size() == n, "rank_placements: free bytes for " + std::to_string(r.free_bytes.size()) +
                                            " GPUs, the topology has " + std::to_string(n));
  MGM_EXPECTS(r.reserve_bytes.empty() || r.reserve_bytes.size() == n, "rank_placements: reserves for another GPU count");
  const auto headroom = [&](std::size_t d) -> std::optional<std::size_t> {
    const std::size_t reserve = r.reserve_bytes.empty() ? 0 : r.reserve_bytes[d];
    if (r.free_bytes[d] < reserve || r.free_bytes[d] - reserve < r.bytes) return std::nullopt;
    return r.free_bytes[d] - reserve - r.bytes;
  };
  const gpu_info& reader = links.gpu(r.reader);
  // Host memory near the reader runs at the reader's PCIe speed (NCCL's figure for its link).
  const double host_gbps = pcie_gbps(reader);

  std::vector<placement_candidate> out;
  if (const auto h = headroom(r.reader.index())) out.push_back({{r.reader, reader.numa_node}, 5000.0, "X", *h, "the reader itself"});

  std::vector<placement_candidate> nvlink;
  std::vector<placement_candidate> pcie;
  for (std::size_t d = 0; d < n; ++d) {
    if (d == r.reader.index()) continue;
    const device_id peer{static_cast<int>(d)};
    const auto h = headroom(d);
    if (!h) continue;
    const gpu_path& p = links.path(r.reader, peer);
    const double gbps = links.bandwidth(peer, r.reader).gbps;  // the reader pulls from the peer
    if (p.is_nvlink()) {
      nvlink.push_back({{peer, links.gpu(peer).numa_node}, gbps, p.label(), *h, "an NVLink peer"});
    } else if (p.type <= o.p2p_level && reader.pcie_p2p && links.gpu(peer).pcie_p2p && gbps > host_gbps) {
      pcie.push_back({{peer, links.gpu(peer).numa_node}, gbps, p.label(), *h, "a PCIe peer faster than host memory"});
    }
  }
  const auto faster_then_roomier = [](const placement_candidate& a, const placement_candidate& b) {
    if (a.gbps != b.gbps) return a.gbps > b.gbps;
    if (a.headroom_bytes != b.headroom_bytes) return a.headroom_bytes > b.headroom_bytes;
    return a.where.device < b.where.device;
  };
  std::stable_sort(nvlink.begin(), nvlink.end(), faster_then_roomier);
  std::stable_sort(pcie.begin(), pcie.end(), faster_then_roomier);
  out.insert(out.end(), nvlink.begin(), nvlink.end());
  out.insert(out.end(), pcie.begin(), pcie.end());
  if (o.host) {
    out.push_back({{device_id::host(), reader.numa_node}, host_gbps, "host", 0, "pinned host memory on the reader's NUMA node"});
    // Other NUMA nodes, each once, through the CPUs' interconnect.
    std::vector<int> nodes;
    for (const auto& g : links.gpus()) {
      if (g.numa_node && g.numa_node != reader.numa_node && std::find(nodes.begin(), nodes.end(), *g.numa_node) == nodes.end()) {
        nodes.push_back(*g.numa_node);
      }
    }
    std::sort(nodes.begin(), nodes.end());
    for (const int node : nodes) {
      out.push_back({{device_id::host(), node}, std::min(host_gbps, links.inter_socket()), "host (remote)", 0,
                     "host memory on another NUMA node"});
    }
  }
  return out;
}

}  // namespace mgm
