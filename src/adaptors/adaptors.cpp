// The adaptors' out-of-line parts: tag reports and checkpoint differences, RMM log rows.
#include <mgm/adaptors/logging_adaptor.hpp>
#include <mgm/adaptors/tracking_adaptor.hpp>
#include <mgm/bytes.hpp>

#include "../detail/fmt.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <iterator>
#include <map>
#include <set>

namespace mgm {
namespace detail {

namespace {
const std::string& tag_name(const std::string& tag) {
  static const std::string untagged{"(untagged)"};
  return tag.empty() ? untagged : tag;
}
}  // namespace

std::vector<tag_usage> usage_by_tag(const std::vector<allocation_record>& live) {
  std::map<std::string, tag_usage> by;
  for (const auto& r : live) {
    auto& u = by[r.tag];
    u.tag = r.tag;
    ++u.allocations;
    u.bytes += r.bytes;
  }
  std::vector<tag_usage> out;
  for (auto& [tag, u] : by) out.push_back(std::move(u));
  std::stable_sort(out.begin(), out.end(), [](const tag_usage& a, const tag_usage& b) { return a.bytes > b.bytes; });
  return out;
}

std::string usage_report(const std::vector<tag_usage>& usage) {
  std::string out;
  for (const auto& u : usage) {
    fmt::format_to(std::back_inserter(out), "{:<32} {:>12} in {} allocations\n", tag_name(u.tag), format_bytes(u.bytes),
                   u.allocations);
  }
  return out;
}

tracking_diff diff_checkpoints(const tracking_checkpoint& before, const tracking_checkpoint& after) {
  tracking_diff d;
  std::set<std::uint64_t> after_seqs;
  for (const auto& r : after.live) after_seqs.insert(r.sequence);
  std::set<std::uint64_t> before_seqs;
  for (const auto& r : before.live) before_seqs.insert(r.sequence);
  std::map<std::string, tracking_diff::tag_change> by;
  for (const auto& r : after.live) {
    if (before_seqs.contains(r.sequence)) continue;
    d.appeared.push_back(r);
    auto& c = by[r.tag];
    c.tag = r.tag;
    ++c.allocations;
    c.bytes += static_cast<std::int64_t>(r.bytes);
  }
  for (const auto& r : before.live) {
    if (after_seqs.contains(r.sequence)) continue;
    d.disappeared.push_back(r);
    auto& c = by[r.tag];
    c.tag = r.tag;
    --c.allocations;
    c.bytes -= static_cast<std::int64_t>(r.bytes);
  }
  for (auto& [tag, c] : by) {
    if (c.bytes != 0 || c.allocations != 0) d.by_tag.push_back(c);
    d.bytes += c.bytes;
  }
  std::stable_sort(d.by_tag.begin(), d.by_tag.end(),
                   [](const tracking_diff::tag_change& a, const tracking_diff::tag_change& b) { return a.bytes > b.bytes; });
  return d;
}

std::string rmm_log_row(const char* action, const void* p, std::size_t bytes, std::uintptr_t stream) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1'000'000;
  std::tm local{};
  localtime_r(&t, &local);
  return fmt::format("{},{:02}:{:02}:{:02}.{:06},{},0x{:x},{},0x{:x}", static_cast<long>(::syscall(SYS_gettid)), local.tm_hour,
                     local.tm_min, local.tm_sec, static_cast<long long>(micros), action,
                     reinterpret_cast<std::uintptr_t>(p), bytes, stream);
}

}  // namespace detail

std::string tracking_diff::to_string() const {
  std::string out = (bytes >= 0 ? "+" : "-") + format_bytes(static_cast<std::size_t>(bytes >= 0 ? bytes : -bytes)) +
                    " in " + std::to_string(appeared.size()) + " new and " + std::to_string(disappeared.size()) +
                    " freed allocations";
  for (const auto& c : by_tag) {
    out += "\n  " + std::string{c.tag.empty() ? "(untagged)" : c.tag} + " " + (c.bytes >= 0 ? "+" : "-") +
           format_bytes(static_cast<std::size_t>(c.bytes >= 0 ? c.bytes : -c.bytes)) + " (" +
           (c.allocations >= 0 ? "+" : "") + std::to_string(c.allocations) + ")";
  }
  return out;
}

}  // namespace mgm
