/// @file
/// @brief The stream seam (`mgm::stream_ops`) on real CUDA streams and events.
#pragma once

#include <mgm/concepts.hpp>
#include <mgm/device.hpp>
#include <mgm/error.hpp>
#include <mgm/stream.hpp>

#include <cuda_runtime_api.h>

namespace mgm {

/// @brief Streams and events through the CUDA runtime. Stateless.
///
/// Events are created with `cudaEventDisableTiming` (the cheapest kind, all a pool needs).
/// **Thread safety:** as the CUDA runtime. **Device affinity:** `create_event(d)` makes `d`
/// current for the call; the other calls act on the event's and stream's own device.
class cuda_stream_ops {
 public:
  using event = cudaEvent_t;

  [[nodiscard]] event create_event(device_id d) const {
    const scoped_device on{d};
    cudaEvent_t e{};
    MGM_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  void record(event e, stream_ref s) const { MGM_CUDA_TRY(cudaEventRecord(e, s.get())); }
  [[nodiscard]] bool query(event e) const {
    const cudaError_t status = cudaEventQuery(e);
    if (status == cudaSuccess) return true;
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();  // "not ready" is an answer, not an error: leave no trace of it
      return false;
    }
    detail::throw_cuda_error(status, "cudaEventQuery(e)", __FILE__, __LINE__);
  }
  void wait(stream_ref s, event e) const { MGM_CUDA_TRY(cudaStreamWaitEvent(s.get(), e, 0)); }
  void synchronize(event e) const { MGM_CUDA_TRY(cudaEventSynchronize(e)); }
  void synchronize_device(device_id d) const {
    const scoped_device on{d};
    MGM_CUDA_TRY(cudaDeviceSynchronize());
  }
  void destroy_event(event e) const noexcept { (void)cudaEventDestroy(e); }
  [[nodiscard]] bool is_capturing(stream_ref s) const {
    cudaStreamCaptureStatus status{cudaStreamCaptureStatusNone};
    MGM_CUDA_TRY(cudaStreamIsCapturing(s.get(), &status));
    return status != cudaStreamCaptureStatusNone;
  }
  [[nodiscard]] std::uint64_t capture_id(stream_ref s) const {
    if (s.get() == nullptr) return 0;  // the legacy stream is never captured: no call
    cudaStreamCaptureStatus status{cudaStreamCaptureStatusNone};
    unsigned long long id = 0;
    MGM_CUDA_TRY(cudaStreamGetCaptureInfo(s.get(), &status, &id));
    return status != cudaStreamCaptureStatusNone ? static_cast<std::uint64_t>(id) : 0;
  }
  capture_mode exchange_capture_mode(capture_mode mode) const {
    auto m = static_cast<cudaStreamCaptureMode>(mode);
    MGM_CUDA_TRY(cudaThreadExchangeStreamCaptureMode(&m));
    return static_cast<capture_mode>(m);
  }

  friend constexpr bool operator==(cuda_stream_ops, cuda_stream_ops) noexcept { return true; }
};
static_assert(stream_ops<cuda_stream_ops>);
static_assert(static_cast<int>(capture_mode::global) == cudaStreamCaptureModeGlobal &&
              static_cast<int>(capture_mode::local) == cudaStreamCaptureModeThreadLocal &&
              static_cast<int>(capture_mode::relaxed) == cudaStreamCaptureModeRelaxed);

}  // namespace mgm
