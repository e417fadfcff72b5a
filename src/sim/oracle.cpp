// The simulator's judge: every range `sim::judged` hands out is checked against the uses the
// machine knows of (see <mgm/sim/oracle.hpp> for the rules).
//
// Tables (machine_state, under oracle_mutex): `ranges`, by first byte, no two overlapping; a
// live range has its holder and the streams `record_stream` named; a freed one the uses that may
// not have ended. A freed range whose uses all ended is erased at once, and every call prunes
// two more (a cursor walks the table), so the table holds live and not-yet-safe ranges only.
#include "machine_state.hpp"

#include <mgm/bytes.hpp>
#include <mgm/error.hpp>
#include <mgm/log.hpp>
#include <mgm/sim/oracle.hpp>


#include <algorithm>
#include <limits>
#include <string>

namespace mgm::sim {

const char* name(hazard_kind k) noexcept {
  switch (k) {
    case hazard_kind::reuse: return "reuse";
    case hazard_kind::overlap: return "overlap";
    case hazard_kind::unordered_free: return "unordered_free";
    case hazard_kind::dead_stream: return "dead_stream";
    case hazard_kind::graph_replay: return "graph_replay";
    case hazard_kind::vmm_contract: return "vmm_contract";
  }
  return "unknown";
}

namespace detail {

constexpr std::int64_t forever = std::numeric_limits<std::int64_t>::max();


void merge(vector_clock& into, const vector_clock& from) {
  for (const clock_entry& e : from) advance_to(into, e.stream, e.ns);
}

void advance_to(vector_clock& c, stream_id s, std::int64_t ns) {
  for (clock_entry& e : c) {
    if (e.stream == s) {
      e.ns = std::max(e.ns, ns);
      return;
    }
  }
  c.push_back({s, ns});
}

std::int64_t known(const vector_clock& c, stream_id s) noexcept {
  for (const clock_entry& e : c) {
    if (e.stream == s) return e.ns;
  }
  return std::numeric_limits<std::int64_t>::min();
}

std::string machine_state::describe_stream(stream_id s) const {
  const auto dev = device_of_id(s);
  const auto index = index_of_id(s);
  const auto generation = static_cast<std::uint32_t>(s >> 40);
  std::string out = index == 0 ? "the default stream of sim device " + std::to_string(dev)
                               : "stream " + std::to_string(index) + " of sim device " + std::to_string(dev);
  if (generation != 0) {
    out += " (made after " + std::to_string(generation) + " destroyed stream" + (generation == 1 ? "" : "s") +
           " with this handle)";
  }
  return out;
}

void machine_state::report_locked(const hazard& h) { found.push_back(h); }

void machine_state::report(hazard h, bool may_throw) {
  {
    const std::lock_guard lock{oracle_mutex};
    report_locked(h);
  }
  if (may_throw && judging.load(std::memory_order_relaxed) == oracle_mode::enforce) throw stream_hazard{std::move(h)};
}

void machine_state::vmm_breach(const std::string& what, device_id d, std::uintptr_t va, std::size_t bytes,
                               bool may_throw) {
  const std::string message = "sim vmm: " + what;
  if (judge_on()) {
    hazard h;
    h.kind = hazard_kind::vmm_contract;
    h.device = d;
    h.address = va;
    h.bytes = bytes;
    h.message = message;
    report(std::move(h), may_throw);  // throws it when enforcing
  }
  if (may_throw) throw cuda_error{cudaErrorInvalidValue, message + ": cudaErrorInvalidValue"};
  log(log_level::error, message);
}

void machine_state::report_dead_stream(device_id d, stream_id s, const char* call) {
  if (!judge_on()) return;
  hazard h;
  h.kind = hazard_kind::dead_stream;
  h.device = d;
  h.earlier_user = describe_stream(s);
  h.message = std::string{call} + " on " + h.earlier_user + ", which was destroyed (undefined behaviour on CUDA)";
  report(std::move(h), true);
}

std::size_t machine_state::peers_of(device_id d) {
  const std::size_t n = devices.size();
  if (n == 1) return 0;
  const std::lock_guard lock{peer_mutex};
  std::size_t k = 0;
  for (std::size_t a = 0; a < n; ++a) {
    if (a != d.index() && peer_enabled[a * n + d.index()] != 0) ++k;
  }
  return k;
}

std::optional<device_id> machine_state::owner_of(std::uintptr_t addr) const noexcept {
  {  // memory mapped through the virtual-memory seam belongs to its physical allocation's device
    const std::lock_guard lock{vmm_mutex};
    if (auto m = mappings.upper_bound(addr); m != mappings.begin()) {
      --m;
      if (addr < m->first + m->second.bytes) {
        const auto phys = physical.find(m->second.handle);
        if (phys != physical.end()) return phys->second.device;
      }
    }
  }
  const auto* b = reinterpret_cast<const std::byte*>(addr);
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const auto& dev = *devices[i];
    if (b >= dev.base && b < dev.base + dev.capacity) return device_id{static_cast<int>(i)};
    const std::lock_guard lock{dev.mutex};
    if (auto o = dev.overflow.upper_bound(addr); o != dev.overflow.begin()) {
      const auto block = dev.live.find((--o)->first);
      if (block != dev.live.end() && addr < block->first + block->second) return device_id{static_cast<int>(i)};
    }
  }
  return std::nullopt;
}

namespace {

std::string describe_user(const machine_state& m, const range_user& u) {
  if (u.host) return "the host";
  std::string s = m.describe_stream(u.stream);
  if (u.graph != 0) s += ", capturing graph " + std::to_string(u.graph);
  return s;
}

std::string span_text(std::uintptr_t p, std::size_t bytes) {
  return "[" + hex(p) + ", +" + format_bytes(bytes) + ")";
}

std::int64_t now_of(machine_state& m, std::uint32_t device) {
  auto& dev = *m.devices[device];
  const std::lock_guard lock{dev.mutex};
  return dev.now_ns;
}

std::int64_t tail_of(machine_state& m, stream_id s) {
  auto& dev = *m.devices[device_of_id(s)];
  const std::lock_guard lock{dev.mutex};
  const auto index = index_of_id(s);
  if (index >= dev.streams.size()) return dev.now_ns;
  const stream_state& st = dev.streams[index];
  if (make_stream_id(device_of_id(s), index, st.generation) != s) {
    return std::max(dev.dead_tail_ns, dev.now_ns);  // destroyed, its handle reused: its last work
  }
  return std::max(st.tail_ns, dev.now_ns);
}

// What a use stands for now: a stream use as it is; a graph's use is "until destroyed" while
// the graph lives, then one stream use per stream it was launched on (none if it never ran).
struct effective_use {
  bool graph_alive{false};
  std::vector<range_use> uses;
};
effective_use effective(machine_state& m, const range_use& u) {
  if (u.graph == 0) return {false, {u}};
  const std::lock_guard lock{m.capture_mutex};
  const graph_state& g = m.graphs[u.graph - 1];
  if (!g.destroyed) return {true, {{0, forever, u.graph}}};
  effective_use e;
  for (const clock_entry& l : g.launches) e.uses.push_back({l.stream, l.ns, 0});
  return e;
}

bool stream_use_ended(machine_state& m, const range_use& u, const range_user& user) {
  if (!user.host && user.stream == u.stream) return true;                        // program order
  if (now_of(m, device_of_id(u.stream)) >= u.until_ns) return true;             // the work is complete
  return !user.host && known(user.clock, u.stream) >= u.until_ns;                // waited on an event after it
}

// Whether `u` has ended for `user`; `until` is when it ends otherwise.
bool ended_for(machine_state& m, const range_use& u, const range_user& user, std::int64_t& until) {
  const effective_use e = effective(m, u);
  if (e.graph_alive) {
    until = forever;
    return user.graph == u.graph;  // the capture that owns it may reuse it
  }
  for (const range_use& s : e.uses) {
    if (!stream_use_ended(m, s, user)) {
      until = s.until_ns;
      return false;
    }
  }
  return true;
}

// Drops the uses of a freed range that have ended for everyone.
void drop_ended(machine_state& m, tracked_range& r) {
  std::erase_if(r.uses, [&](const range_use& u) {
    const effective_use e = effective(m, u);
    if (e.graph_alive) return false;
    return std::all_of(e.uses.begin(), e.uses.end(), [&](const range_use& s) {
      return now_of(m, device_of_id(s.stream)) >= s.until_ns;
    });
  });
}

void prune(machine_state& m, int budget) {
  if (m.ranges.empty()) return;
  auto it = m.ranges.lower_bound(m.prune_cursor);
  for (int i = 0; i < budget; ++i) {
    if (it == m.ranges.end()) it = m.ranges.begin();
    if (!it->second.live) {
      drop_ended(m, it->second);
      if (it->second.uses.empty()) {
        it = m.ranges.erase(it);
        if (m.ranges.empty()) break;
        continue;
      }
    }
    ++it;
  }
  m.prune_cursor = it == m.ranges.end() ? 0 : it->first;
}

range_user resolve(machine_state& m, std::uintptr_t addr, std::optional<stream_ref> stream,
                   std::optional<device_id> device, stream_id& dead) {
  range_user u;
  if (device && device->is_host()) device.reset();  // host memory: no device clock of its own
  if (!device) device = m.owner_of(addr);
  if (!stream) {
    u.host = true;
    u.device = device ? static_cast<std::uint32_t>(device->index()) : 0;
    u.start_ns = now_of(m, u.device);
    return u;
  }
  if (stream->get() == nullptr && !device) {  // host memory on the null stream: the host's
    u.host = true;
    return u;
  }
  const stream_key key = m.decode(*stream, device.value_or(device_id{0}));
  auto& dev = *m.devices[key.device];
  const std::lock_guard lock{dev.mutex};
  MGM_EXPECTS(key.index < dev.streams.size(), "unknown simulated stream");
  const stream_state& st = dev.streams[key.index];
  u.device = key.device;
  u.stream = make_stream_id(key.device, key.index, st.generation);
  u.graph = st.graph;
  u.start_ns = std::max(st.tail_ns, dev.now_ns);
  u.clock = st.clock;
  if (!st.alive) dead = u.stream;
  return u;
}

// [p, p + bytes) must be mapped, with access for the user's device, where it lies in a reservation.
std::string access_problem(machine_state& m, std::uintptr_t p, std::size_t bytes, const range_user& user) {
  const std::lock_guard lock{m.vmm_mutex};
  auto r = m.reservations.upper_bound(p);
  if (r == m.reservations.begin() || (--r, p >= r->first + r->second.first)) return {};
  auto it = m.mappings.upper_bound(p);
  std::uintptr_t cursor = p;
  if (it != m.mappings.begin()) --it;
  for (; cursor < p + bytes; ++it) {
    if (it == m.mappings.end() || it->first > cursor || it->first + it->second.bytes <= cursor) {
      return "handed out " + span_text(p, bytes) + ", which is not mapped at " + hex(cursor);
    }
    const device_id reader{static_cast<int>(user.device)};
    if (std::find(it->second.readers.begin(), it->second.readers.end(), reader) == it->second.readers.end()) {
      return "handed out " + span_text(p, bytes) + " to " + describe_user(m, user) +
             " before access was granted to sim device " + std::to_string(user.device) + " at " + hex(cursor) +
             " (cuMemSetAccess)";
    }
    cursor = it->first + it->second.bytes;
  }
  return {};
}

}  // namespace
}  // namespace detail

bool oracle::enabled() const noexcept { return machine_->judge_on(); }

void oracle::handed_out(const void* p, std::size_t bytes, std::optional<stream_ref> stream,
                        std::optional<device_id> device) const {
  auto& m = *machine_;
  if (!m.judge_on() || p == nullptr || bytes == 0) return;
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  detail::stream_id dead = 0;
  detail::range_user user = detail::resolve(m, addr, stream, device, dead);
  if (dead != 0) m.report_dead_stream(device_id{static_cast<int>(user.device)}, dead, "an allocation");
  if (auto problem = detail::access_problem(m, addr, bytes, user); !problem.empty()) {
    // Listed; thrown only when enforcing (in record mode the call behaves as without the judge).
    m.vmm_breach(problem, device_id{static_cast<int>(user.device)}, addr, bytes,
                 m.judging.load(std::memory_order_relaxed) == oracle_mode::enforce);
  }

  std::vector<hazard> found;
  std::vector<detail::range_use> shared;  // claims of live graphs that share the range with this capture
  const bool enforce = m.judging.load(std::memory_order_relaxed) == oracle_mode::enforce;
  {
    const std::lock_guard lock{m.oracle_mutex};
    auto first = m.ranges.upper_bound(addr);
    if (first != m.ranges.begin()) {
      if (auto prev = std::prev(first); prev->first + prev->second.bytes > addr) first = prev;
    }
    auto last = first;
    for (; last != m.ranges.end() && last->first < addr + bytes; ++last) {
      const detail::tracked_range& r = last->second;
      // The hazard's text is made only when there is one: this loop runs on every judged hand-out.
      const auto start_hazard = [&](hazard_kind kind, std::string earlier) {
        hazard h;
        h.kind = kind;
        h.device = device_id{static_cast<int>(r.device)};
        h.address = addr;
        h.bytes = bytes;
        h.new_user = detail::describe_user(m, user);
        h.new_from = std::chrono::nanoseconds{user.start_ns};
        h.earlier_user = std::move(earlier);
        return h;
      };
      if (r.live) {
        hazard h = start_hazard(hazard_kind::overlap, detail::describe_user(m, r.holder));
        h.message = "overlap on sim device " + std::to_string(r.device) + ": " + detail::span_text(addr, bytes) +
                    " handed to " + h.new_user + " while " + detail::span_text(last->first, r.bytes) +
                    " is still allocated to " + h.earlier_user;
        found.push_back(std::move(h));
        continue;
      }
      for (const detail::range_use& u : r.uses) {
        std::int64_t until = 0;
        if (u.graph != 0 && user.graph != 0 && u.graph != user.graph && detail::effective(m, u).graph_alive) {
          // Another capture takes memory a live graph owns: a private pool shared by captures
          // whose graphs replay in turn. The graph keeps its claim; their launches must not overlap.
          shared.push_back(u);
          const std::pair<std::uint64_t, std::uint64_t> pair{std::min(u.graph, user.graph), std::max(u.graph, user.graph)};
          if (std::find(m.graph_sharing.begin(), m.graph_sharing.end(), pair) == m.graph_sharing.end()) {
            m.graph_sharing.emplace_back(pair);
          }
          continue;
        }
        if (detail::ended_for(m, u, user, until)) continue;
        hazard h = start_hazard(hazard_kind::reuse,
                                u.graph != 0 ? "graph " + std::to_string(u.graph) : m.describe_stream(u.stream));
        h.earlier_until = std::chrono::nanoseconds{until};
        const std::string when = until == detail::forever ? "until it is destroyed" : "until t=" + std::to_string(until) + " ns";
        h.message = "reuse hazard on sim device " + std::to_string(r.device) + ": " + detail::span_text(addr, bytes) +
                    " handed to " + h.new_user + " (work from t=" + std::to_string(user.start_ns) + " ns) while " +
                    h.earlier_user + " may still use it " + when +
                    (user.host ? " (the host did not synchronise)"
                               : u.graph != 0 ? " (a graph's memory is its own until then)"
                                              : " (no wait on an event covering the free, and that work is not complete)");
        found.push_back(std::move(h));
        break;
      }
    }
    if (found.empty() || !enforce) {
      // The new range absorbs what it covers; the parts of freed ranges outside it stay tracked.
      std::vector<std::pair<std::uintptr_t, detail::tracked_range>> rest;
      for (auto it = first; it != last; ++it) {
        const std::uintptr_t b = it->first;
        const std::uintptr_t e = it->first + it->second.bytes;
        if (it->second.live) continue;
        if (b < addr) {
          auto left = it->second;
          left.bytes = addr - b;
          rest.emplace_back(b, std::move(left));
        }
        if (e > addr + bytes) {
          auto right = it->second;
          right.bytes = e - (addr + bytes);
          rest.emplace_back(addr + bytes, std::move(right));
        }
      }
      m.ranges.erase(first, last);
      for (auto& [b, r] : rest) m.ranges.emplace(b, std::move(r));
      detail::tracked_range live;
      live.bytes = bytes;
      live.device = user.device;
      live.live = true;
      live.holder = user;
      live.holder.clock.clear();  // not needed after the check
      live.uses = std::move(shared);  // carried to the free
      m.ranges.emplace(addr, std::move(live));
      if (user.graph != 0) {
        const std::lock_guard capture_lock{m.capture_mutex};
        m.graphs[user.graph - 1].ranges.emplace_back(addr, bytes);
      }
    }
    detail::prune(m, 2);
    for (const hazard& h : found) m.report_locked(h);
  }
  if (!found.empty() && enforce) throw stream_hazard{std::move(found.front())};
}

void oracle::freed(const void* p, std::optional<stream_ref> stream, std::optional<device_id> device) const noexcept {
  auto& m = *machine_;
  if (!m.judge_on() || p == nullptr) return;
  try {
    const auto addr = reinterpret_cast<std::uintptr_t>(p);
    detail::stream_id dead = 0;
    // A synchronous free is a free in the default stream's order (its waits count).
    detail::range_user by = detail::resolve(m, addr, stream.value_or(stream_ref{}), device, dead);
    const std::lock_guard lock{m.oracle_mutex};
    const auto it = m.ranges.find(addr);
    if (it == m.ranges.end() || !it->second.live) return;  // not judged, or a double free: the allocator reports it
    detail::tracked_range& r = it->second;
    std::vector<detail::range_use> uses;
    const auto add_stream = [&](detail::stream_id s) { uses.push_back({s, detail::tail_of(m, s), 0}); };
    // A free in a stream's order ends every use in that order: the freeing stream's work is the
    // use that may still touch the block (a synchronous free: the legacy default stream's).
    const detail::stream_id free_stream = by.host ? detail::make_stream_id(by.device, 0, 0) : by.stream;
    add_stream(free_stream);
    // Freed on another stream than it was allocated on: the caller must have ordered the
    // allocating stream's work before the free (an event it waited on), or that work is done.
    if (!r.holder.host && r.holder.stream != free_stream) {
      const std::int64_t until = detail::tail_of(m, r.holder.stream);
      const bool ordered = detail::now_of(m, detail::device_of_id(r.holder.stream)) >= until ||
                           (!by.host && detail::known(by.clock, r.holder.stream) >= until);
      if (!ordered) {
        hazard h;
        h.kind = hazard_kind::unordered_free;
        h.device = device_id{static_cast<int>(r.device)};
        h.address = addr;
        h.bytes = r.bytes;
        h.earlier_user = m.describe_stream(r.holder.stream);
        h.new_user = m.describe_stream(free_stream);
        h.earlier_until = std::chrono::nanoseconds{until};
        h.message = "unordered free on sim device " + std::to_string(r.device) + ": " + detail::span_text(addr, r.bytes) +
                    " freed on " + h.new_user + " while " + h.earlier_user + ", which allocated it, may still use it until t=" +
                    std::to_string(until) + " ns (make the freeing stream wait on an event recorded after that work)";
        m.report_locked(h);
        add_stream(r.holder.stream);  // and judge its reuse as if that use were still there
      }
    }
    if (r.holder.graph != 0) uses.push_back({0, 0, r.holder.graph});
    if (by.graph != 0 && by.graph != r.holder.graph) {
      uses.push_back({0, 0, by.graph});
      const std::lock_guard capture_lock{m.capture_mutex};
      m.graphs[by.graph - 1].ranges.emplace_back(addr, r.bytes);
    }
    for (const detail::stream_id s : r.extra) add_stream(s);
    for (const detail::range_use& u : r.uses) uses.push_back(u);  // live graphs sharing the range
    r.live = false;
    r.holder = {};
    r.extra.clear();
    r.uses = std::move(uses);
    detail::drop_ended(m, r);
    if (r.uses.empty()) m.ranges.erase(it);
    detail::prune(m, 2);
  } catch (const std::exception& e) {
    log(log_level::error, std::string{"sim oracle: "} + e.what());
  }
}

void oracle::used_on(const void* p, stream_ref stream) const {
  auto& m = *machine_;
  if (!m.judge_on() || p == nullptr) return;
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  detail::stream_id dead = 0;
  const detail::range_user by = detail::resolve(m, addr, stream, std::nullopt, dead);
  if (dead != 0) m.report_dead_stream(device_id{static_cast<int>(by.device)}, dead, "record_stream");
  const std::lock_guard lock{m.oracle_mutex};
  auto it = m.ranges.upper_bound(addr);
  if (it == m.ranges.begin()) return;
  --it;
  detail::tracked_range& r = it->second;
  if (!r.live || addr >= it->first + r.bytes || by.host) return;
  if (!r.holder.host && r.holder.stream == by.stream) return;
  if (std::find(r.extra.begin(), r.extra.end(), by.stream) == r.extra.end()) r.extra.push_back(by.stream);
}

std::size_t oracle::tracked_ranges() const {
  const std::lock_guard lock{machine_->oracle_mutex};
  return machine_->ranges.size();
}

// ---- machine -------------------------------------------------------------------------------

std::vector<hazard> machine::hazards() const {
  const std::lock_guard lock{state_->oracle_mutex};
  return state_->found;
}

void machine::clear_hazards() {
  const std::lock_guard lock{state_->oracle_mutex};
  state_->found.clear();
}

oracle_mode machine::judging() const noexcept { return state_->judging.load(std::memory_order_relaxed); }

}  // namespace mgm::sim
