"""CuPy: the pool as CuPy's allocator, stream-ordered on CuPy's current stream.

    import multigpumem.cupy
    multigpumem.cupy.use()
    a = cupy.zeros(1 << 20)

Each allocation is made and freed on the stream that is current when it is made
(cupy.cuda.get_current_stream()), which it keeps alive until then; memory used on another stream
needs multigpumem.record_stream. Before destroying a stream the pool has seen, call
multigpumem.forget_stream(device, stream.ptr).
cupy.get_default_memory_pool()'s figures no longer apply: use multigpumem.stats.
"""
import multigpumem


def _cupy():
    try:
        import cupy
    except ImportError as e:
        raise ImportError("multigpumem.cupy needs CuPy (import cupy failed: %s)" % e) from e
    return cupy


class _Block:
    """Owns one allocation: freed on its stream when CuPy drops the last reference."""

    __slots__ = ("ptr", "size", "device", "stream", "_stream_object")

    def __init__(self, ptr, size, device, stream, stream_object=None):
        self.ptr, self.size, self.device, self.stream = ptr, size, device, stream
        self._stream_object = stream_object  # the stream must outlive the free ordered on it

    def __del__(self):
        if self.ptr:
            multigpumem._release(self.ptr, self.size, self.device, self.stream)
            self.ptr = 0


def malloc(size):
    """CuPy's allocator interface: a MemoryPointer of `size` bytes on the current device."""
    cupy = _cupy()
    device = cupy.cuda.runtime.getDevice()
    current = cupy.cuda.get_current_stream()
    stream = current.ptr
    ptr = multigpumem.alloc(size, device, stream)
    block = _Block(ptr, size, device, stream, current)
    memory = cupy.cuda.memory.UnownedMemory(ptr, size, block, device)
    return cupy.cuda.memory.MemoryPointer(memory, 0)


def use():
    """Makes the pool CuPy's allocator (cupy.cuda.set_allocator)."""
    _cupy().cuda.set_allocator(malloc)
