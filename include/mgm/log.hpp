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
/// whether one free was refused compares the count before and after it.
[[nodiscard]] std::uint64_t refused_deallocations() noexcept;
/// @brief Counts one refused deallocation of the calling thread (for the allocators that refuse).
void note_refused_deallocation() noexcept;

}  // namespace mgm
