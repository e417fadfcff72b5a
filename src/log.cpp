#include <mgm/log.hpp>

#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace mgm {
namespace {
thread_local std::uint64_t refused = 0;
thread_local std::string refused_why;
std::mutex callback_mutex;
std::shared_ptr<const log_callback> current;  // guarded by callback_mutex
}  // namespace

log_callback set_log_callback(log_callback callback) {
  auto next = callback ? std::make_shared<const log_callback>(std::move(callback)) : nullptr;
  const std::lock_guard lock{callback_mutex};
  auto previous = std::exchange(current, std::move(next));
  return previous ? *previous : log_callback{};
}

void log(log_level level, std::string_view message) noexcept {
  std::shared_ptr<const log_callback> cb;
  {
    const std::lock_guard lock{callback_mutex};
    cb = current;
  }
  if (!cb) return;
  try {
    (*cb)(level, message);
  } catch (...) {  // a callback must not throw; if it does, the message is lost, not the process
  }
}

std::uint64_t refused_deallocations() noexcept { return refused; }

std::string_view last_refused_deallocation() noexcept { return refused_why; }

void report_refused_deallocation(std::string_view why) noexcept {
  ++refused;
  try {
    refused_why.assign(why);
  } catch (...) {
    refused_why.clear();
  }
  log(log_level::error, why);
}

}  // namespace mgm
