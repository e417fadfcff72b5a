/* A C program over the C ABI (MultiGpuMem::c), as a framework's shim links it. Run on the
 * simulator (MGM_C_SIM, set by the test), or on a GPU without it. */
#include <mgm/c/multigpumem.h>

#include <stdio.h>

int main(void) {
  if (mgm_abi_version() < 1) {
    fprintf(stderr, "mgm_abi_version: %d\n", mgm_abi_version());
    return 1;
  }
  const int devices = mgm_device_count();
  if (devices < 0) {
    fprintf(stderr, "the library cannot start: %s\n", mgm_last_error());
    return 1;
  }
  if (devices == 0) {
    fprintf(stderr, "no device\n");
    return 77;
  }
  void* p = mgm_alloc_async((size_t)1 << 20, 0, NULL);
  if (p == NULL) {
    fprintf(stderr, "mgm_alloc_async: %s\n", mgm_last_error());
    return 1;
  }
  mgm_free_async(p, (size_t)1 << 20, 0, NULL);
  printf("C ABI %d: 1 MiB allocated and freed on device 0\n", mgm_abi_version());
  return 0;
}
