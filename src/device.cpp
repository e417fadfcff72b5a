#include <mgm/device.hpp>
#include <mgm/error.hpp>

namespace mgm {

int device_count() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaErrorInsufficientDriver || status == cudaErrorNoDevice) {
    (void)cudaGetLastError();
    return 0;  // count is left unwritten by CUDA here; ours started at 0
  }
  MGM_CUDA_TRY(status);
  return count;
}

device_id current_device() {
  int d = 0;
  MGM_CUDA_TRY(cudaGetDevice(&d));
  return device_id{d};
}

device_memory memory_info(device_id device) {
  const scoped_device on{device};
  device_memory m;
  MGM_CUDA_TRY(cudaMemGetInfo(&m.free_bytes, &m.total_bytes));
  return m;
}

scoped_device::scoped_device(device_id device) {
  MGM_EXPECTS(!device.is_host(), "scoped_device: the host is not a CUDA device");
  MGM_CUDA_TRY(cudaGetDevice(&previous_));
  if (previous_ != device.value()) {
    MGM_CUDA_TRY(cudaSetDevice(device.value()));
    switched_ = true;
  }
}

scoped_device::~scoped_device() {
  if (switched_ && cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
}

}  // namespace mgm
