#include <mgm/bytes.hpp>
#include <mgm/error.hpp>
#include <mgm/pool/pool_options.hpp>

#include <array>
#include <cstdlib>
#include <string>

namespace mgm {
namespace {

struct key {
  std::string_view name;
  std::size_t pool_options::*field;
  std::size_t scale;  // max_split_size_mb takes MiB
};
constexpr std::array<key, 11> keys{{
    {"round", &pool_options::round_bytes, 1},
    {"small_request", &pool_options::small_request_bytes, 1},
    {"small_segment", &pool_options::small_segment_bytes, 1},
    {"large_segment", &pool_options::large_segment_bytes, 1},
    {"large_direct", &pool_options::large_direct_bytes, 1},
    {"segment_round", &pool_options::segment_round_bytes, 1},
    {"max_split_size", &pool_options::max_split_bytes, 1},
    {"max_split_size_mb", &pool_options::max_split_bytes, std::size_t{1} << 20},
    {"release_threshold", &pool_options::release_threshold_bytes, 1},
    {"map_chunk", &pool_options::map_chunk_bytes, 1},
    {"huge_request", &pool_options::huge_request_bytes, 1},
}};

[[noreturn]] void fail(std::string_view conf, std::size_t column, const std::string& why) {
  throw parse_error{"MGM_ALLOC_CONF '" + std::string{conf} + "', column " + std::to_string(column) + ": " + why, 1,
                    column};
}

bool multiple(std::size_t v, std::size_t of) { return of != 0 && v % of == 0; }

// PYTORCH_CUDA_ALLOC_CONF's keys this pool does not honour, each with the reason (a pasted
// configuration is refused by name, never half-applied). It honours max_split_size_mb and
// expandable_segments.
struct refused_key {
  std::string_view name;
  std::string_view why;
};
constexpr std::array<refused_key, 13> pytorch_only{{
    {"garbage_collection_threshold", "the pool gives idle memory back above release_threshold after each free; set release_threshold"},
    {"roundup_power2_divisions", "blocks are rounded to round (256 B) and large segments to segment_round; set those"},
    {"roundup_bypass_threshold_mb", "there are no power-of-two divisions to bypass; set round and segment_round"},
    {"max_non_split_rounding_mb", "blocks larger than max_split_size are never split and are handed out as requested"},
    {"release_lock_on_cudamalloc", "the pool's locking is its own: each device's pool has its lock, no global one"},
    {"release_lock_on_hipmalloc", "ROCm's name for release_lock_on_cudamalloc: the pool's locking is its own, one lock per device"},
    {"pinned_use_cuda_host_register", "an option of PyTorch's pinned host allocator, which this pool does not replace"},
    {"pinned_num_register_threads", "an option of PyTorch's pinned host allocator, which this pool does not replace"},
    {"pinned_use_background_threads", "an option of PyTorch's pinned host allocator, which this pool does not replace"},
    {"pinned_reserve_segment_size_mb", "an option of PyTorch's pinned host allocator, which this pool does not replace"},
    {"backend", "the backend is this pool; to use cudaMallocAsync, leave PyTorch's own allocator in place"},
    {"per_process_memory_fraction", "set it with torch.cuda.set_per_process_memory_fraction (mgm_set_memory_fraction)"},
    {"graph_capture_record_stream_reuse", "memory freed during a capture is reused only after the capture's pool is released"},
}};

}  // namespace

pool_options pool_options::parse(std::string_view conf) {
  pool_options o;
  std::size_t start = 0;
  while (start <= conf.size()) {
    const std::size_t comma = std::min(conf.find(',', start), conf.size());
    std::string_view item = conf.substr(start, comma - start);
    std::size_t column = start + 1;
    while (!item.empty() && item.front() == ' ') {
      item.remove_prefix(1);
      ++column;
    }
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (!item.empty()) {
      const std::size_t colon = item.find(':');
      if (colon == std::string_view::npos) fail(conf, column, "expected key:value");
      const std::string_view name = item.substr(0, colon);
      if (name == "expandable_segments" || name == "check_invariants" || name == "shareable") {
        const std::string_view value = item.substr(colon + 1);
        bool& flag = name == "expandable_segments" ? o.expandable_segments
                     : name == "shareable"         ? o.shareable
                                                   : o.check_invariants;
        if (value == "True" || value == "true" || value == "1") {
          flag = true;
        } else if (value == "False" || value == "false" || value == "0") {
          flag = false;
        } else {
          fail(conf, column + colon + 1, std::string{name} + " takes True or False");
        }
        if (comma == conf.size()) break;
        start = comma + 1;
        continue;
      }
      const key* k = nullptr;
      for (const auto& candidate : keys) {
        if (candidate.name == name) k = &candidate;
      }
      for (const auto& r : pytorch_only) {
        if (r.name == name) fail(conf, column, std::string{name} + " (a PYTORCH_CUDA_ALLOC_CONF key) is not honoured: " + std::string{r.why});
      }
      if (k == nullptr) {
        std::string known;
        for (const auto& candidate : keys) known += (known.empty() ? "" : ", ") + std::string{candidate.name};
        fail(conf, column, "unknown option '" + std::string{name} + "'; the options are " + known +
                                   ", expandable_segments, shareable, check_invariants");
      }
      const std::string_view value = item.substr(colon + 1);
      if (value == "unlimited" || value == "none") {
        o.*(k->field) = unlimited;
      } else {
        std::size_t v = 0;
        try {
          v = parse_bytes(value);
        } catch (const parse_error& e) {
          fail(conf, column + colon + e.column(), e.what());
        }
        if (k->scale != 1 && v > unlimited / k->scale) fail(conf, column + colon + 1, "too large");
        o.*(k->field) = v * k->scale;
      }
    }
    if (comma == conf.size()) break;
    start = comma + 1;
  }
  o.validate();
  return o;
}

pool_options pool_options::from_env() {
  const char* conf = std::getenv("MGM_ALLOC_CONF");
  return conf == nullptr ? pool_options{} : parse(conf);
}

void pool_options::validate() const {
  MGM_EXPECTS((round_bytes & (round_bytes - 1)) == 0 && round_bytes >= 256,
              "pool_options: round must be a power of two of at least 256 bytes, not " + std::to_string(round_bytes));
  for (const auto& k : keys) {
    const std::size_t v = this->*(k.field);
    if (k.field == &pool_options::round_bytes || v == unlimited) continue;
    MGM_EXPECTS(multiple(v, round_bytes), "pool_options: " + std::string{k.name} + " (" + std::to_string(v) +
                                              ") must be a multiple of round (" + std::to_string(round_bytes) + ")");
  }
  MGM_EXPECTS(small_request_bytes > 0 && small_request_bytes <= small_segment_bytes,
              "pool_options: small_request must be positive and at most small_segment");
  MGM_EXPECTS(small_request_bytes < (std::size_t{1} << 32), "pool_options: small_request must be below 4 GiB");
  MGM_EXPECTS(small_segment_bytes <= large_segment_bytes, "pool_options: small_segment must be at most large_segment");
  MGM_EXPECTS(segment_round_bytes > 0, "pool_options: segment_round must be positive");
  MGM_EXPECTS(map_chunk_bytes > 0, "pool_options: map_chunk must be positive");
}

std::string pool_options::to_string() const {
  std::string out;
  for (const auto& k : keys) {
    if (k.scale != 1) continue;
    const std::size_t v = this->*(k.field);
    out += (out.empty() ? "" : ",") + std::string{k.name} + ":" + (v == unlimited ? "unlimited" : std::to_string(v));
  }
  out += ",expandable_segments:";
  out += expandable_segments ? "True" : "False";
  if (shareable) out += ",shareable:True";
  if (check_invariants) out += ",check_invariants:True";
  return out;
}

}  // namespace mgm
