// The caching pool's words: statistics as text, snapshots as JSON and trace events, and the
// out-of-memory message.
#include <mgm/bytes.hpp>
#include <mgm/pool/caching_pool.hpp>
#include <mgm/pool/pool_snapshot.hpp>
#include <mgm/pool/pool_statistics.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <string>

namespace mgm {

namespace {
void add(stat& a, const stat& b) {
  a.current += b.current;
  a.peak += b.peak;
  a.total += b.total;
}
std::string hex(std::uintptr_t v) {
  return fmt::format("\"0x{:x}\"", v);
}
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
    } else {
      out += c;
    }
  }
  return out + "\"";
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
  std::string out = "{\"device\":" + std::to_string(device) + ",\"segments\":[";
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const auto& seg = segments[i];
    out += std::string{i ? "," : ""} + "{\"address\":" + hex(seg.address) + ",\"size\":" + std::to_string(seg.size) +
           ",\"pool\":\"" + (seg.small ? "small" : "large") + "\",\"expandable\":" + (seg.expandable ? "true" : "false") +
           ",\"blocks\":[";
    for (std::size_t j = 0; j < seg.blocks.size(); ++j) {
      const auto& b = seg.blocks[j];
      out += std::string{j ? "," : ""} + "{\"address\":" + hex(b.address) + ",\"size\":" + std::to_string(b.size) +
             ",\"requested\":" + std::to_string(b.requested) + ",\"state\":\"" + state_name(b.state) +
             "\",\"stream\":" + hex(b.stream) + ",\"tag\":" + json_string(b.tag) + "}";
    }
    out += "]}";
  }
  return out + "]}";
}

std::string pool_snapshot::to_chrome_trace() const {
  std::string out = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[";
  bool first = true;
  const auto emit = [&](const std::string& e) {
    out += (first ? "" : ",") + e;
    first = false;
  };
  emit("{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + std::to_string(device) +
       ",\"args\":{\"name\":\"device " + std::to_string(device) + " pool (time axis: offset in KiB)\"}}");
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const auto& seg = segments[i];
    const std::string tid = std::to_string(i);
    const std::string name = fmt::format("segment 0x{:x} ({})", seg.address, format_bytes(seg.size));
    emit("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + std::to_string(device) + ",\"tid\":" + tid +
         ",\"args\":{\"name\":" + json_string(name) + "}}");
    for (const auto& b : seg.blocks) {
      const std::string ts = fmt::format("{:.3f}", static_cast<double>(b.address - seg.address) / 1024.0);
      const std::string dur = fmt::format("{:.3f}", static_cast<double>(b.size) / 1024.0);
      const std::string label = std::string{state_name(b.state)} + (b.tag.empty() ? "" : " " + b.tag);
      emit("{\"ph\":\"X\",\"pid\":" + std::to_string(device) + ",\"tid\":" + tid + ",\"ts\":" + ts +
           ",\"dur\":" + dur + ",\"name\":" + json_string(label) + ",\"cat\":\"" + state_name(b.state) +
           "\",\"args\":{\"address\":" + hex(b.address) + ",\"size\":" + std::to_string(b.size) +
           ",\"requested\":" + std::to_string(b.requested) + ",\"stream\":" + hex(b.stream) + "}}");
    }
  }
  return out + "]}";
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
  if (i.capturing) {
    msg += " The request came from a stream capturing a CUDA graph: during a capture the pool gives "
           "nothing back to retry (that would synchronise the device); free memory before capturing.";
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
