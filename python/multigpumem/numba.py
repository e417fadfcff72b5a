"""Numba: an External Memory Manager plugin over the pool.

    NUMBA_CUDA_MEMORY_MANAGER=multigpumem.numba python job.py
    (or numba.cuda.set_memory_manager(multigpumem.numba.manager()) before any context exists)

Device memory comes from the pool, on the default stream (Numba's interface has no stream);
host and pinned memory stay Numba's own. get_ipc_handle refuses: pooled blocks are not exported
yet (their segments are process-local), so buffers to share between processes need Numba's own
allocator.
"""
import contextlib

import multigpumem

_manager = None


def _numba_cuda():
    try:
        from numba import cuda
        from numba.cuda.cudadrv import driver
    except ImportError as e:
        raise ImportError("multigpumem.numba needs Numba with CUDA support (import numba.cuda failed: %s)" % e) from e
    return cuda, driver


def manager():
    """The plugin class (made on first use, so that importing this module needs no Numba)."""
    global _manager
    if _manager is not None:
        return _manager
    cuda, driver = _numba_cuda()

    class MultiGpuMemNumbaManager(cuda.HostOnlyCUDAMemoryManager):
        def initialize(self):
            pass  # the pools start lazily; may be called more than once

        def memalloc(self, size):
            device = self.context.device.id
            ptr = multigpumem.alloc(size, device, 0)

            def finalizer():
                multigpumem.free(ptr, size, device, 0)

            return driver.MemoryPointer(self.context, device_pointer(driver, ptr), size, finalizer=finalizer)

        def get_memory_info(self):
            free, total = multigpumem.memory_info(self.context.device.id)
            return driver.MemoryInfo(free=free, total=total)

        def get_ipc_handle(self, memory):
            raise RuntimeError("multigpumem.numba: memory of the pool cannot be shared with another process yet "
                               "(its segments are process-local, and exporting pooled blocks is not built); "
                               "allocate buffers to share with Numba's own allocator")

        def reset(self):
            super().reset()  # Numba's host allocations
            multigpumem.empty_cache()

        @contextlib.contextmanager
        def defer_cleanup(self):
            with super().defer_cleanup():
                yield

        @property
        def interface_version(self):
            return 1

    _manager = MultiGpuMemNumbaManager
    return _manager


def device_pointer(driver, ptr):
    """A device address as this Numba's driver layer takes it: CUdeviceptr with NVIDIA's bindings,
    else a ctypes integer (as RMM's plugin does)."""
    if getattr(driver, "USE_NV_BINDING", False):
        return driver.binding.CUdeviceptr(ptr)
    import ctypes
    return ctypes.c_uint64(ptr)


def __getattr__(name):
    # NUMBA_CUDA_MEMORY_MANAGER=multigpumem.numba: Numba reads _numba_memory_manager from this module.
    if name == "_numba_memory_manager":
        return manager()
    raise AttributeError("module 'multigpumem.numba' has no attribute %r" % name)
