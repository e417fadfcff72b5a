/// @file
/// @brief `stream_ref`: a non-owning, trivially copyable reference to a stream.
#pragma once

#include <cuda_runtime_api.h>

#include <concepts>
#include <cstdint>

namespace mgm {

/// @brief A non-owning reference to a CUDA stream, or to a simulated one.
///
/// Converts implicitly from `cudaStream_t` and from any stream view with a `get()` returning one
/// (`cuda::stream_ref`, `rmm::cuda_stream_view`), so CCCL's `cuda::mr` concepts, which pass a
/// `cuda::stream_ref`, reach our `allocate_async`. The default value is the default stream.
/// The simulated machine mints its own handles, values that are never valid host pointers; they
/// are only meaningful to that machine's seams.
class stream_ref {
 public:
  constexpr stream_ref() noexcept = default;
  constexpr stream_ref(cudaStream_t stream) noexcept : stream_{stream} {}  // NOLINT: implicit by design
  template <class View>
    requires(!std::same_as<View, stream_ref> && requires(const View& v) {
      { v.get() } -> std::convertible_to<cudaStream_t>;
    })
  constexpr stream_ref(const View& view) noexcept : stream_{view.get()} {}  // NOLINT: implicit by design

  [[nodiscard]] constexpr cudaStream_t get() const noexcept { return stream_; }
  [[nodiscard]] constexpr cudaStream_t value() const noexcept { return stream_; }
  /// @brief The handle as an integer, for logs (RMM's CSV prints streams this way).
  [[nodiscard]] std::uintptr_t id() const noexcept { return reinterpret_cast<std::uintptr_t>(stream_); }

  friend constexpr bool operator==(stream_ref a, stream_ref b) noexcept { return a.stream_ == b.stream_; }

 private:
  cudaStream_t stream_{nullptr};
};

/// @brief How a graph capture restricts "potentially unsafe" calls (`cudaMalloc`, `cudaFree`,
/// event queries and synchronisation), as CUDA's `cudaStreamCaptureMode`:
/// - `global`: the calling thread may not make them while it has a capture that was not begun
///   in `relaxed` mode, nor while any other thread has a capture begun in `global` mode;
/// - `local` (`cudaStreamCaptureModeThreadLocal`): only the calling thread's own captures count;
/// - `relaxed`: nothing is prohibited.
/// A thread's mode is exchanged with `stream_ops::exchange_capture_mode`; a capture's mode is
/// given when it begins. A prohibited call fails and invalidates the captures it interferes with.
enum class capture_mode : int { global = 0, local = 1, relaxed = 2 };

}  // namespace mgm
