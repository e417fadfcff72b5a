"""Numba: an External Memory Manager plugin over the pool.

    NUMBA_CUDA_MEMORY_MANAGER=multigpumem.numba python job.py
    (or numba.cuda.set_memory_manager(multigpumem.numba.manager()) before any context exists)

Device memory comes from the pool, on the default stream (Numba's interface has no stream);
host and pinned memory stay Numba's own. get_ipc_handle exports the pooled block (its chunks'
descriptors, through multigpumem.ipc_export) when the pools' memory is shareable
(MGM_ALLOC_CONF=shareable:True), and says so when it is not. The handle pickles as a token, and
opens in the other process with multigpumem.ipc_import; the exporter keeps the array alive meanwhile.
"""
import contextlib
import functools

import multigpumem

def _numba_cuda():
    try:
        from numba import cuda
        from numba.cuda.cudadrv import driver
    except ImportError as e:
        raise ImportError("multigpumem.numba needs Numba with CUDA support (import numba.cuda failed: %s)" % e) from e
    return cuda, driver


@functools.cache
def manager():
    """The plugin class (made on first use, so that importing this module needs no Numba)."""
    cuda, driver = _numba_cuda()

    class MultiGpuMemNumbaManager(cuda.HostOnlyCUDAMemoryManager):
        def initialize(self):
            pass  # the pools start lazily; may be called more than once

        def memalloc(self, size):
            device = self.context.device.id
            ptr = multigpumem.alloc(size, device, 0)

            def finalizer():
                multigpumem._release(ptr, size, device, 0)

            return driver.MemoryPointer(self.context, device_pointer(driver, ptr), size, finalizer=finalizer)

        def get_memory_info(self):
            free, total = multigpumem.memory_info(self.context.device.id)
            return driver.MemoryInfo(free=free, total=total)

        def get_ipc_handle(self, memory):
            # A view's owner is the allocation the pool handed out; the view lies at an offset in it.
            base = getattr(memory, "owner", memory)
            base_ptr = _pointer_value(base)
            offset = _pointer_value(memory) - base_ptr
            device = self.context.device.id
            try:
                token = multigpumem.ipc_export(base_ptr, device)
            except ValueError as e:
                raise RuntimeError("multigpumem.numba: this memory cannot be shared with another process: %s" % e) from e
            return ipc_handle_class()(base, token, memory.size, device, offset)

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

    return MultiGpuMemNumbaManager


def _pointer_value(memory):
    v = getattr(memory, "device_pointer_value", None)
    if v is None:
        p = memory.device_pointer
        v = int(p) if not hasattr(p, "value") else p.value
    return v or 0


@functools.cache
def ipc_handle_class():
    """numba.cuda's IpcHandle over a pooled block: pickled as our token, opened with ipc_import."""
    _, driver = _numba_cuda()

    class MultiGpuMemIpcHandle(driver.IpcHandle):
        def __init__(self, base, token, size, device, offset=0):
            super().__init__(base, token, size, source_info=None, offset=offset)
            self.token, self.device = token, device
            self._mapped = None

        def open(self, context):
            if self._mapped is not None:
                raise ValueError("IpcHandle is already opened")
            self._mapped = multigpumem.ipc_import(self.token, context.device.id)
            return driver.MemoryPointer(context, device_pointer(driver, self._mapped + self.offset), self.size)

        def close(self):
            if self._mapped is None:
                raise ValueError("IpcHandle not opened")
            multigpumem.ipc_close(self._mapped)
            self._mapped = None

        def __reduce__(self):
            return (_rebuild_ipc_handle, (self.token, self.size, self.device, self.offset))

    return MultiGpuMemIpcHandle


def _rebuild_ipc_handle(token, size, device, offset):
    return ipc_handle_class()(None, token, size, device, offset)


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
