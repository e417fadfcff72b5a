/// @file
/// @brief `tag_scope`: names the allocations a thread makes while it is alive.
#pragma once

namespace mgm {

/// @brief Tags every allocation the current thread makes while the scope lives, for snapshots,
/// leak reports and per-tag statistics:
/// @code
///   { mgm::tag_scope tag{"layer3.fc"}; void* w = pool.allocate(bytes); }
/// @endcode
/// Scopes nest; the innermost wins. The tag must outlive every allocation made under it (a string
/// literal). Reading the current tag is one thread-local load.
/// **Thread safety:** per thread.
class tag_scope {
 public:
  explicit tag_scope(const char* tag) noexcept : previous_{current_} { current_ = tag; }
  ~tag_scope() { current_ = previous_; }
  tag_scope(const tag_scope&) = delete;
  tag_scope& operator=(const tag_scope&) = delete;

  /// @brief The innermost live tag of this thread, or nullptr.
  [[nodiscard]] static const char* current() noexcept { return current_; }

 private:
  const char* previous_;
  inline static thread_local const char* current_ = nullptr;
};

}  // namespace mgm
