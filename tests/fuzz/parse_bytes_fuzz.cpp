// parse_bytes on arbitrary text: it either returns a size or throws parse_error with a column
// inside the text (or just past it); a returned size prints and parses back to itself.
#include <mgm/bytes.hpp>
#include <mgm/error.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text{reinterpret_cast<const char*>(data), size};
  try {
    const std::size_t bytes = mgm::parse_bytes(text);
    if (mgm::parse_bytes(std::to_string(bytes)) != bytes) std::abort();
    if (mgm::parse_bytes(std::to_string(bytes) + " B") != bytes) std::abort();
  } catch (const mgm::parse_error& e) {
    if (e.column() < 1 || e.column() > size + 1 || e.line() != 1) std::abort();
  }
  return 0;
}
