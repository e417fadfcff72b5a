#include <mgm/bytes.hpp>
#include <mgm/error.hpp>
#include <mgm/sim/device_spec.hpp>

#include <string>

namespace mgm::sim {
namespace {

[[noreturn]] void fail(std::string_view text, std::size_t column, const std::string& why) {
  throw parse_error{"device list '" + std::string{text} + "', column " + std::to_string(column) + ": " + why, 1,
                    column};
}

std::string_view trim(std::string_view s, std::size_t& offset) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
    ++offset;
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::vector<device_spec> parse_device_list(std::string_view text) {
  std::vector<device_spec> devices;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    const std::size_t end = comma == std::string_view::npos ? text.size() : comma;
    std::size_t column = start + 1;  // 1-based column of the item's first character
    std::string_view item = trim(text.substr(start, end - start), column);
    if (item.empty()) fail(text, column, "expected a device such as '2x80GiB' or '24GiB:RTX 4090'");

    const std::size_t item_column = column;
    std::size_t count = 1;
    const std::size_t x = item.find_first_of("xX");
    const std::size_t colon = item.find(':');
    if (x != std::string_view::npos && x > 0 && (colon == std::string_view::npos || x < colon) &&
        item.substr(0, x).find_first_not_of("0123456789") == std::string_view::npos) {
      count = 0;
      for (const char c : item.substr(0, x)) {
        count = count * 10 + static_cast<std::size_t>(c - '0');
        if (count > max_devices) fail(text, column, "more than " + std::to_string(max_devices) + " devices");
      }
      if (count == 0) fail(text, column, "a count of zero devices");
      item.remove_prefix(x + 1);
      column += x + 1;
    }
    const std::size_t name_at = item.find(':');
    const std::string_view size_text = item.substr(0, name_at);
    std::size_t bytes = 0;
    try {
      bytes = parse_bytes(size_text);
    } catch (const parse_error& e) {
      fail(text, column + (e.column() > 0 ? e.column() - 1 : 0), e.what());
    }
    if (bytes < 256) fail(text, column, "a device needs at least 256 bytes of memory");
    std::string name = "Simulated GPU";
    if (name_at != std::string_view::npos) {
      std::size_t name_column = column + name_at + 1;
      const std::string_view n = trim(item.substr(name_at + 1), name_column);
      if (n.empty()) fail(text, name_column, "an empty device name after ':'");
      name = std::string{n};
    }
    if (devices.size() + count > max_devices) fail(text, item_column, "more than " + std::to_string(max_devices) + " devices");
    for (std::size_t i = 0; i < count; ++i) devices.push_back({name, bytes, 90, std::nullopt, true});
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return devices;
}

}  // namespace mgm::sim
