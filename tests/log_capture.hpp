// Captures what the library reports through mgm::log during one test.
#pragma once

#include <mgm/log.hpp>

#include <mutex>
#include <string>
#include <vector>

namespace mgm::test {

struct log_capture {
  std::mutex mutex;
  std::vector<std::string> messages;
  log_callback previous;
  log_capture() {
    previous = set_log_callback([this](log_level, std::string_view m) {
      const std::lock_guard lock{mutex};
      messages.emplace_back(m);
    });
  }
  ~log_capture() { set_log_callback(previous); }
  log_capture(const log_capture&) = delete;
  log_capture& operator=(const log_capture&) = delete;
};

}  // namespace mgm::test
