#include "../detail/text.hpp"

#include <mgm/error.hpp>
#include <mgm/trace/trace.hpp>

#include "../detail/fmt.hpp"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <istream>
#include <ostream>
#include <string>
#include <unordered_map>

namespace mgm {
namespace {

constexpr std::string_view header = "Thread,Time,Action,Pointer,Size,Stream";

[[noreturn]] void fail(const std::string& name, std::size_t line, std::size_t column, const std::string& why) {
  throw parse_error::at("trace '" + name + "'", line, column, why);
}

std::string_view trim(std::string_view s) { return detail::trim_blanks(s); }

bool parse_unsigned(std::string_view s, std::uint64_t& out) {
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    s.remove_prefix(2);
    base = 16;
  }
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out, base);
  return ec == std::errc{} && end == s.data() + s.size();
}

bool parse_time(std::string_view s, double& seconds) {
  // HH:MM:SS[.ffffff]
  if (s.size() < 8 || s[2] != ':' || s[5] != ':') return false;
  std::uint64_t h = 0;
  std::uint64_t m = 0;
  std::uint64_t sec = 0;
  if (!parse_unsigned(s.substr(0, 2), h) || !parse_unsigned(s.substr(3, 2), m) || !parse_unsigned(s.substr(6, 2), sec)) {
    return false;
  }
  double frac = 0.0;
  if (s.size() > 8) {
    if (s[8] != '.' || s.size() == 9) return false;
    double scale = 0.1;
    for (const char c : s.substr(9)) {
      if (c < '0' || c > '9') return false;
      frac += (c - '0') * scale;
      scale /= 10;
    }
  }
  if (m > 59 || sec > 60) return false;
  seconds = static_cast<double>(h * 3600 + m * 60 + sec) + frac;
  return true;
}

}  // namespace

trace read_rmm_csv(std::istream& in, std::string name) {
  trace t;
  t.name = std::move(name);
  std::string line;
  std::size_t number = 0;
  bool seen_header = false;
  while (std::getline(in, line)) {
    ++number;
    const std::string_view row = trim(line);
    if (row.empty()) continue;
    if (!seen_header) {
      if (row != header) fail(t.name, number, 1, "expected the header '" + std::string{header} + "'");
      seen_header = true;
      continue;
    }
    std::string_view fields[6];
    std::size_t columns[6];
    std::size_t start = 0;
    for (int f = 0; f < 6; ++f) {
      const std::size_t comma = f < 5 ? row.find(',', start) : std::string_view::npos;
      if (f < 5 && comma == std::string_view::npos) {
        fail(t.name, number, row.size() + 1, "expected 6 comma-separated fields, found " + std::to_string(f + 1));
      }
      columns[f] = start + 1;
      fields[f] = trim(row.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
      start = comma + 1;
    }
    if (fields[5].find(',') != std::string_view::npos) fail(t.name, number, columns[5], "more than 6 fields");
    trace_event e;
    e.line = number;
    if (!parse_unsigned(fields[0], e.thread)) fail(t.name, number, columns[0], "the thread is not a number");
    if (!parse_time(fields[1], e.seconds)) fail(t.name, number, columns[1], "the time is not HH:MM:SS.ffffff");
    if (fields[2] == "allocate") {
      e.action = trace_event::action_type::allocate;
    } else if (fields[2] == "free") {
      e.action = trace_event::action_type::free;
    } else if (fields[2] == "allocate failure") {
      e.action = trace_event::action_type::allocate_failure;
    } else {
      fail(t.name, number, columns[2],
           "unknown action '" + std::string{fields[2]} + "' (expected allocate, free or allocate failure)");
    }
    if (!parse_unsigned(fields[3], e.pointer)) fail(t.name, number, columns[3], "the pointer is not a number");
    std::uint64_t bytes = 0;
    if (!parse_unsigned(fields[4], bytes)) fail(t.name, number, columns[4], "the size is not a number");
    e.bytes = static_cast<std::size_t>(bytes);
    if (!parse_unsigned(fields[5], e.stream)) fail(t.name, number, columns[5], "the stream is not a number");
    t.events.push_back(e);
  }
  if (!seen_header) fail(t.name, std::max<std::size_t>(number, 1), 0, "empty: no header line");
  return t;
}

trace read_rmm_csv_file(const std::string& path) {
  std::ifstream in{path};
  MGM_EXPECTS(in.good(), "cannot open the trace '" + path + "'");
  const auto slash = path.find_last_of('/');
  return read_rmm_csv(in, slash == std::string::npos ? path : path.substr(slash + 1));
}

void write_rmm_csv(std::ostream& out, const trace& t) {
  out << header << '\n';
  for (const auto& e : t.events) {
    const auto total_us = static_cast<std::uint64_t>(e.seconds * 1e6 + 0.5);
    const std::string time = fmt::format("{:02}:{:02}:{:02}.{:06}", total_us / 3'600'000'000ULL, total_us / 60'000'000ULL % 60,
                                         total_us / 1'000'000ULL % 60, total_us % 1'000'000ULL);
    const char* action = e.action == trace_event::action_type::allocate ? "allocate"
                         : e.action == trace_event::action_type::free   ? "free"
                                                                         : "allocate failure";
    out << fmt::format("{},{},{},0x{:x},{},0x{:x}", e.thread, time, action, e.pointer, e.bytes, e.stream) << '\n';
  }
}

compiled_trace trace::compile() const {
  compiled_trace c;
  c.name = name;
  std::unordered_map<std::uint64_t, std::pair<std::uint32_t, std::size_t>> live;  // pointer -> slot, bytes
  std::vector<std::pair<std::uint32_t, std::uint32_t>> order;  // live slots in allocation order (slot, stream)
  std::unordered_map<std::uint64_t, std::uint32_t> stream_index;
  std::size_t live_bytes = 0;
  const auto stream_of = [&](std::uint64_t s) {
    const auto [it, inserted] = stream_index.emplace(s, static_cast<std::uint32_t>(c.streams.size()));
    if (inserted) c.streams.push_back(s);
    return it->second;
  };
  std::vector<std::size_t> slot_bytes;
  std::vector<std::uint32_t> slot_stream;
  std::vector<bool> slot_live;
  for (const auto& e : events) {
    switch (e.action) {
      case trace_event::action_type::allocate_failure: ++c.failures_skipped; break;
      case trace_event::action_type::allocate: {
        if (live.contains(e.pointer)) {
          fail(name, e.line, 0, "allocation at a pointer that is still live (never freed before)");
        }
        const auto slot = static_cast<std::uint32_t>(c.slots++);
        live.emplace(e.pointer, std::pair{slot, e.bytes});
        slot_bytes.push_back(e.bytes);
        slot_stream.push_back(stream_of(e.stream));
        slot_live.push_back(true);
        c.ops.push_back({slot, slot_stream.back(), e.bytes, false});
        ++c.allocations;
        c.total_bytes += e.bytes;
        live_bytes += e.bytes;
        c.peak_live_bytes = std::max(c.peak_live_bytes, live_bytes);
        break;
      }
      case trace_event::action_type::free: {
        const auto it = live.find(e.pointer);
        if (it == live.end()) fail(name, e.line, 0, "free of a pointer that is not live");
        if (e.bytes != 0 && e.bytes != it->second.second) {
          fail(name, e.line, 0,
               "free of " + std::to_string(e.bytes) + " bytes for an allocation of " + std::to_string(it->second.second));
        }
        c.ops.push_back({it->second.first, stream_of(e.stream), it->second.second, true});
        live_bytes -= it->second.second;
        slot_live[it->second.first] = false;
        live.erase(it);
        break;
      }
    }
  }
  // What the log never freed is freed at the end, newest first, so that iterations repeat.
  for (std::size_t s = c.slots; s-- > 0;) {
    if (!slot_live[s]) continue;
    c.ops.push_back({static_cast<std::uint32_t>(s), slot_stream[s], slot_bytes[s], true});
    ++c.leftovers_freed;
  }
  if (c.streams.empty()) c.streams.push_back(0);
  return c;
}

}  // namespace mgm
