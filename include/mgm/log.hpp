/// @file
/// @brief The library's one voice: an optional callback for rare events.
///
/// MultiGpuMem never prints. Events a caller cannot see through an exception, such as a
/// `deallocate` (which is `noexcept`) given a pointer its allocator never returned, are reported
/// here. By default they are dropped; install a callback to see them.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

namespace mgm {

enum class log_level { debug, info, warning, error };

/// @brief Receives one message; must not throw.
using log_callback = std::function<void(log_level, std::string_view message)>;

/// @brief Installs `callback` (an empty one drops messages) and returns the previous one.
/// **Thread safety:** safe; a message being delivered concurrently may still reach the old one.
log_callback set_log_callback(log_callback callback);

/// @brief Delivers `message` to the installed callback. Never throws.
void log(log_level level, std::string_view message) noexcept;

/// @brief How many deallocations the calling thread made that were refused: a `noexcept`
/// deallocate given a pointer its allocator did not hand out (a double free, a foreign pointer,
/// a device with no pool) changes nothing, logs why, and counts here. A caller that must know
/// whether one free was refused compares the count before and after it, and reads why in
/// `last_refused_deallocation()`.
[[nodiscard]] std::uint64_t refused_deallocations() noexcept;
/// @brief Why the calling thread's last refused deallocation was refused ("" before any).
[[nodiscard]] std::string_view last_refused_deallocation() noexcept;
/// @brief For the allocators that refuse: counts one refused deallocation of the calling thread,
/// keeps `why` as its `last_refused_deallocation()` and logs it as an error.
void report_refused_deallocation(std::string_view why) noexcept;
/// @brief `report_refused_deallocation(describe())`, where building the text may throw (then a
/// shorter one is reported).
template <class Describe>
void refuse_deallocation(Describe&& describe) noexcept {
  try {
    report_refused_deallocation(describe());
  } catch (...) {
    report_refused_deallocation("a deallocation was refused (no host memory to say which)");
  }
}

}  // namespace mgm
