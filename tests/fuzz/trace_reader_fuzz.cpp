// The RMM-CSV trace reader and compiler on arbitrary text: a trace, or parse_error naming a line
// of the text; a compiled trace's ops pair every allocation with one free.
#include <mgm/error.hpp>
#include <mgm/trace/trace.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text{reinterpret_cast<const char*>(data), size};
  std::size_t lines = 1;
  for (const char c : text) lines += c == '\n' ? 1 : 0;
  std::istringstream in{text};
  try {
    const auto t = mgm::read_rmm_csv(in, "fuzz");
    const auto c = t.compile();
    std::vector<int> state(c.slots, 0);
    for (const auto& op : c.ops) {
      if (op.slot >= c.slots || op.stream >= c.streams.size()) std::abort();
      if (op.is_free ? state[op.slot] != 1 : state[op.slot] != 0) std::abort();
      state[op.slot] = op.is_free ? 2 : 1;
    }
    for (const int s : state) {
      if (s != 2) std::abort();
    }
  } catch (const mgm::parse_error& e) {
    if (e.line() < 1 || e.line() > lines) std::abort();
  }
  return 0;
}
