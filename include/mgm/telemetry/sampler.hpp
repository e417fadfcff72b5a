/// @file
/// @brief `sampler`: a thread that asks a source for every GPU's state at a period and keeps the
/// last samples in a ring buffer. It never throws: a failing source is counted and its message kept.
#pragma once

#include <mgm/telemetry/source.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mgm::telemetry {

/// @brief One look at every GPU.
using sample_batch = std::vector<device_sample>;

class sampler {
 public:
  /// @param on_sample called on the sampler's thread after each batch (its exceptions are caught
  /// and counted as errors).
  sampler(std::unique_ptr<source> src, std::chrono::milliseconds period, std::size_t capacity = 1024,
          std::function<void(const sample_batch&)> on_sample = {});
  ~sampler();
  sampler(const sampler&) = delete;
  sampler& operator=(const sampler&) = delete;

  /// @brief Stops the thread (idempotent); the history stays readable. Waits as long as the
  /// source's call in progress takes (an NVML query on a failing GPU may take many seconds).
  void stop() noexcept;
  /// @brief Stops the thread, waiting at most `grace` for the source's call in progress. False
  /// when that call is still running: the thread ends after it (the destructor waits for it), and a
  /// process that must exit now can do so without waiting.
  [[nodiscard]] bool stop_within(std::chrono::milliseconds grace) noexcept;
  /// @brief The kept batches, oldest first (at most `capacity`).
  [[nodiscard]] std::vector<sample_batch> history() const;
  [[nodiscard]] std::optional<sample_batch> latest() const;
  [[nodiscard]] std::uint64_t batches() const noexcept;  ///< taken since the start
  [[nodiscard]] std::uint64_t errors() const noexcept;
  [[nodiscard]] std::string last_error() const;

  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

}  // namespace mgm::telemetry
