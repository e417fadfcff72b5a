"""MultiGpuMem's caching pool from Python, over its C ABI (libmultigpumem_c.so.1, through ctypes).

    import multigpumem
    p = multigpumem.alloc(1 << 20, device=0)       # stream-ordered memory of GPU0's pool
    multigpumem.free(p, 1 << 20, device=0)
    multigpumem.stats(0)["allocated_bytes.all.current"]

Frameworks, each a module that imports without its framework installed:
    multigpumem.torch.use()        PyTorch: the pool replaces the caching allocator
    multigpumem.torch.mem_pool()   a torch.cuda.MemPool over the pool, for `with torch.cuda.use_mem_pool(...)`
    multigpumem.cupy.use()         CuPy: allocations on CuPy's current stream
    NUMBA_CUDA_MEMORY_MANAGER=multigpumem.numba    Numba's external memory manager

Sharing a block with another process (the pools' memory made shareable: MGM_ALLOC_CONF=shareable:True):
    token = multigpumem.ipc_export(p, device=0)    # a str: pickle it, send it
    q = multigpumem.ipc_import(token, device=0)    # in the other process: the same memory
    multigpumem.ipc_close(q)                       # there, when done; then ipc_unexport(p) or free here

The library logs what no call can report (a refused free, the pools' warnings) to stderr, from the
level MGM_LOG names: off, error, warning (the default), info, debug.

MGM_ALLOC_CONF sets the pool's options (PYTORCH_CUDA_ALLOC_CONF's keys it can honour are taken, the
others refused by name); MGM_C_SIM=PRESET runs the pools on a simulated machine; MGM_C_LIBRARY
names the library where it is not next to this package.
"""
import ctypes
import json
import pickle

from . import _lib

__all__ = ["alloc", "free", "record_stream", "forget_stream", "empty_cache", "set_memory_fraction", "stats", "snapshot",
           "record_memory_history", "dump_snapshot", "device_count", "memory_info", "config", "library_path", "ipc_export", "ipc_unexport",
           "ipc_import", "ipc_close"]


_devices = None  # the device count, fixed for the process


def _check_device(device):
    global _devices
    if _devices is None:
        _devices = device_count()
    n = _devices
    if not isinstance(device, int) or device < 0 or device >= n:
        raise ValueError("multigpumem: device %r is not one of the %d devices this process sees" % (device, n))


def device_count():
    n = _lib.library().mgm_device_count()
    if n < 0:
        raise RuntimeError(_lib.last_error())
    return n


def config():
    """The pool's options in effect, as MGM_ALLOC_CONF text."""
    c = _lib.library().mgm_config()
    if c is None:
        raise RuntimeError(_lib.last_error())
    return c.decode()


def library_path():
    return _lib.path()


def alloc(size, device=0, stream=0):
    """`size` bytes of `device`'s pool, ordered on `stream` (a cudaStream_t as an int; 0: the
    default stream). Returns the address (0 for size 0). Raises MemoryError with the pool's message."""
    _check_device(device)
    p = _lib.library().mgm_alloc_async(size, device, stream or None)
    if not p:
        if size == 0:
            return 0
        raise MemoryError(_lib.last_error())
    return p


def free(ptr, size, device=0, stream=0):
    """Returns memory of `alloc` to its pool, in `stream`'s order. A pointer the pool did not hand
    out (a double free, a foreign pointer, a bad device) changes nothing: the library logs it to
    stderr (MGM_LOG) and this raises ValueError with the reason."""
    if ptr:
        lib = _lib.library()
        lib.mgm_clear_error()
        lib.mgm_free_async(ptr, size, device, stream or None)
        why = _lib.last_error()
        if why:
            raise ValueError(why)


def _release(ptr, size, device, stream):
    """A framework's finalizer's free: never raises (a refused free is logged by the library)."""
    if ptr:
        _lib.library().mgm_free_async(ptr, size, device, stream or None)


def record_stream(ptr, stream):
    if _lib.library().mgm_record_stream(ptr, stream or None) != 0:
        raise ValueError(_lib.last_error())


def forget_stream(device, stream):
    """Before destroying `stream` (a cudaStream_t as an int): the pool forgets it, its cached blocks
    join the others."""
    if _lib.library().mgm_forget_stream(device, stream or None) != 0:
        raise ValueError(_lib.last_error())


def empty_cache():
    """Gives every pool's idle memory back; returns the bytes released."""
    return _lib.library().mgm_empty_cache()


def set_memory_fraction(fraction, device=0):
    if _lib.library().mgm_set_memory_fraction(float(fraction), device) != 0:
        raise ValueError(_lib.last_error())


def memory_info(device=0):
    """(free, total) bytes of `device`."""
    free_b, total_b = ctypes.c_size_t(), ctypes.c_size_t()
    if _lib.library().mgm_memory_info(device, ctypes.byref(free_b), ctypes.byref(total_b)) != 0:
        raise ValueError(_lib.last_error())
    return free_b.value, total_b.value


def stats(device=0):
    """The pool's statistics in torch.cuda.memory_stats()'s keys (plus mgm.*)."""
    s = _lib.library().mgm_stats_json(device)
    if s is None:
        raise ValueError(_lib.last_error())
    return json.loads(s)


def record_memory_history(enabled=True, max_entries=100_000):
    """Records every device's allocations and frees for snapshot()'s "device_traces" (the
    timeline of pytorch.org/memory_viz), as torch.cuda.memory._record_memory_history does for
    PyTorch's own allocator (a pluggable allocator gets no history from it): the last
    max_entries per device, without stack frames. Starting again drops the old history;
    enabled=False stops and drops it."""
    n = int(max_entries) if enabled else 0
    if enabled and n <= 0:
        raise ValueError("record_memory_history: max_entries must be at least 1, not %r" % (max_entries,))
    if _lib.library().mgm_record_memory_history(n) != 0:
        raise RuntimeError(_lib.last_error())


def snapshot(device=0):
    """The pool as torch.cuda.memory._snapshot() has it: {"segments": [...], "device_traces": [...]}
    (one list per device, empty unless record_memory_history is on)."""
    s = _lib.library().mgm_snapshot_json(device)
    if s is None:
        raise ValueError(_lib.last_error())
    return json.loads(s)


def dump_snapshot(path, device=0):
    """Writes the snapshot pickled, as PyTorch's memory_viz (pytorch.org/memory_viz) opens it."""
    with open(path, "wb") as f:
        pickle.dump(snapshot(device), f)


def ipc_export(ptr, device=0):
    """A token (str) naming the live allocation `ptr` of `device`'s pool for another process
    (ipc_import). Its descriptors stay open here until ipc_unexport(ptr) or the block's free; keep
    the block allocated until every importer has closed it. Needs MGM_ALLOC_CONF=shareable:True."""
    _check_device(device)
    t = _lib.library().mgm_ipc_export(ptr, device)
    if t is None:
        raise ValueError(_lib.last_error())
    return t.decode()


def ipc_unexport(ptr):
    """Closes the descriptors of ptr's token (later imports of it fail)."""
    if _lib.library().mgm_ipc_unexport(ptr) != 0:
        raise ValueError(_lib.last_error())


def ipc_import(token, device=0):
    """In another process: the block `token` names, mapped for `device` (this process's ordinal
    of the GPU). Returns its address; close it with ipc_close."""
    _check_device(device)
    p = _lib.library().mgm_ipc_import(token.encode() if isinstance(token, str) else token, device)
    if not p:
        raise OSError(_lib.last_error())
    return p


def ipc_close(ptr):
    """Unmaps a block of ipc_import."""
    if _lib.library().mgm_ipc_close(ptr) != 0:
        raise ValueError(_lib.last_error())
