// The caching pool's words: statistics as text, snapshots as JSON and trace events (nlohmann-json), and the
// out-of-memory message.
#include <mgm/bytes.hpp>
#include <mgm/pool/caching_pool.hpp>
#include <mgm/pool/pool_snapshot.hpp>
#include <mgm/pool/pool_statistics.hpp>

#include "../detail/fmt.hpp"
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>

namespace mgm {

namespace {
void add(stat& a, const stat& b) {
  a.current += b.current;
  a.peak += b.peak;
  a.total += b.total;
}
using detail::hex;
// Tags are the user's bytes: anything not UTF-8 is written as U+FFFD rather than refused.
std::string dump(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}
const char* state_name(block_snapshot::state_type s) {
  switch (s) {
    case block_snapshot::state_type::free: return "free";
    case block_snapshot::state_type::allocated: return "allocated";
    case block_snapshot::state_type::pending: return "pending";
    case block_snapshot::state_type::unmapped: return "unmapped";
  }
  return "?";
}
}  // namespace

pool_statistics& pool_statistics::operator+=(const pool_statistics& o) noexcept {
  add(allocated_bytes, o.allocated_bytes);
  add(requested_bytes, o.requested_bytes);
  add(reserved_bytes, o.reserved_bytes);
  add(active_bytes, o.active_bytes);
  add(inactive_split_bytes, o.inactive_split_bytes);
  add(allocations, o.allocations);
  add(segments, o.segments);
  upstream_allocations += o.upstream_allocations;
  upstream_frees += o.upstream_frees;
  cache_hits += o.cache_hits;
  cache_misses += o.cache_misses;
  stream_steals += o.stream_steals;
  oom_retries += o.oom_retries;
  ooms += o.ooms;
  return *this;
}

std::string pool_statistics::to_string() const {
  std::string out;
  const auto bytes_line = [&](const char* name, const stat& s) {
    out += std::string{name} + ": " + format_bytes(static_cast<std::size_t>(s.current)) + " (peak " +
           format_bytes(static_cast<std::size_t>(s.peak)) + ", total " + format_bytes(s.total) + ")\n";
  };
  bytes_line("allocated", allocated_bytes);
  bytes_line("requested", requested_bytes);
  bytes_line("reserved", reserved_bytes);
  bytes_line("active", active_bytes);
  bytes_line("inactive split", inactive_split_bytes);
  out += "allocations: " + std::to_string(allocations.current) + " (peak " + std::to_string(allocations.peak) +
         ", total " + std::to_string(allocations.total) + ")\n";
  out += "segments: " + std::to_string(segments.current) + " (peak " + std::to_string(segments.peak) + ")\n";
  out += "upstream allocations / frees: " + std::to_string(upstream_allocations) + " / " +
         std::to_string(upstream_frees) + "\n";
  out += "cache hits / misses: " + std::to_string(cache_hits) + " / " + std::to_string(cache_misses) +
         ", stream steals: " + std::to_string(stream_steals) + "\n";
  out += "out-of-memory retries / failures: " + std::to_string(oom_retries) + " / " + std::to_string(ooms) + "\n";
  return out + fmt::format("fragmentation: {:.4f}\n", fragmentation());
}

std::size_t pool_snapshot::bytes_in(block_snapshot::state_type s) const noexcept {
  std::size_t n = 0;
  for (const auto& seg : segments) {
    for (const auto& b : seg.blocks) n += b.state == s ? b.size : 0;
  }
  return n;
}

std::string pool_snapshot::to_json() const {
  using json = nlohmann::ordered_json;
  json segs = json::array();
  for (const auto& seg : segments) {
    json blocks = json::array();
    for (const auto& b : seg.blocks) {
      blocks.push_back({{"address", hex(b.address)}, {"size", b.size}, {"requested", b.requested},
                        {"state", state_name(b.state)}, {"stream", hex(b.stream)}, {"tag", b.tag}});
    }
    segs.push_back({{"address", hex(seg.address)}, {"size", seg.size}, {"pool", seg.small ? "small" : "large"},
                    {"expandable", seg.expandable}, {"blocks", std::move(blocks)}});
  }
  return dump(json{{"device", device}, {"segments", std::move(segs)}});
}

std::string pool_snapshot::to_chrome_trace() const {
  using json = nlohmann::ordered_json;
  json events = json::array();
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", device},
                    {"args", {{"name", fmt::format("device {} pool (time axis: offset in KiB)", device)}}}});
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const auto& seg = segments[i];
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", device}, {"tid", i},
                      {"args", {{"name", fmt::format("segment 0x{:x} ({})", seg.address, format_bytes(seg.size))}}}});
    for (const auto& b : seg.blocks) {
      events.push_back({{"ph", "X"}, {"pid", device}, {"tid", i},
                        {"ts", static_cast<double>(b.address - seg.address) / 1024.0},  // offset in KiB
                        {"dur", static_cast<double>(b.size) / 1024.0},
                        {"name", std::string{state_name(b.state)} + (b.tag.empty() ? "" : " " + b.tag)},
                        {"cat", state_name(b.state)},
                        {"args", {{"address", hex(b.address)}, {"size", b.size}, {"requested", b.requested},
                                  {"stream", hex(b.stream)}}}});
    }
  }
  return dump(json{{"displayTimeUnit", "ns"}, {"traceEvents", std::move(events)}});
}

namespace detail {

std::string describe_device(device_id d) { return "device " + std::to_string(d.value()); }

std::string describe_pool_oom(const oom_info& i) {
  std::string msg = "caching_pool on " + describe_device(i.device) + ": out of memory allocating " +
                    mgm::detail::describe_bytes(i.requested_bytes) + ". The pool holds " +
                    format_bytes(i.allocated_bytes) + " allocated and " + format_bytes(i.reserved_bytes) +
                    " reserved, of which " + format_bytes(i.idle_cached_bytes) +
                    " is cached but idle (largest free block " + format_bytes(i.largest_free_bytes) + ")";
  msg += i.device_free_bytes ? "; the device has " + format_bytes(*i.device_free_bytes) + " free."
                             : "; the device's free memory is unknown.";
  if (i.limits.max_reserved_bytes != pool_options::unlimited) {
    msg += " Its limit (pool_limits::max_reserved_bytes) lets it reserve at most " +
           format_bytes(i.limits.max_reserved_bytes) + ".";
  }
  if (i.limits.keep_free_bytes != 0) {
    msg += " It keeps " + format_bytes(i.limits.keep_free_bytes) + " of the device free (pool_limits::keep_free_bytes).";
  }
  if (i.address_space_exhausted) {
    msg += " The driver refused a new virtual address range (cuMemAddressReserve): the process's address space "
           "is exhausted, not the device's memory.";
  }
  if (i.capturing) {
    msg += " The request came from a stream capturing a CUDA graph: during a capture the pool gives "
           "nothing back to retry (that would synchronise the device); free memory before capturing.";
  } else if (i.idle_cached_bytes >= i.requested_bytes && i.largest_free_bytes < i.requested_bytes && i.expandable) {
    // max_split_bytes does not hold back blocks of expandable segments: what keeps the idle
    // memory is the physical chunks that its free blocks share with live ones.
    msg += " The cached memory would suffice but is fragmented: its free blocks share physical chunks with live "
           "blocks, so it cannot be given back; set a smaller map_chunk (for example MGM_ALLOC_CONF=map_chunk:2MiB) "
           "so that idle memory goes back granule by granule, or free the blocks that pin it.";
  } else if (i.idle_cached_bytes >= i.requested_bytes && i.largest_free_bytes < i.requested_bytes) {
    const std::size_t mib = std::max<std::size_t>(1, (i.requested_bytes / 2) >> 20);
    msg += " The cached memory would suffice but is fragmented: set max_split_bytes (for example "
           "MGM_ALLOC_CONF=max_split_size_mb:" +
           std::to_string(mib) + ") so that large blocks are not split for small requests, or call release().";
  }
  return msg;
}

}  // namespace detail
}  // namespace mgm
