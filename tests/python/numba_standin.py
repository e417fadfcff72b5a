"""A stand-in for numba.cuda, as much of it as the EMM plugin uses (Numba with CUDA cannot run
here): HostOnlyCUDAMemoryManager, and the driver's MemoryPointer, MemoryInfo and IpcHandle with
Numba 0.56's constructors and attributes. `install(modules)` puts it in `modules` (sys.modules, or
pytest's monkeypatch.setitem through a dict-like adaptor) and returns the list of host calls."""
import contextlib
import ctypes
import sys
import types


def build():
    calls = []

    class HostOnly:
        def __init__(self, context):
            self.context = context

        def reset(self):
            calls.append("host reset")

        def defer_cleanup(self):
            calls.append("host defer")
            return contextlib.nullcontext()

    class MemoryPointer:
        def __init__(self, context, pointer, size, owner=None, finalizer=None):
            self.context, self.device_pointer, self.size, self.finalizer = context, pointer, size, finalizer
            self._owner = owner

        @property
        def owner(self):
            return self if self._owner is None else self._owner

        @property
        def device_pointer_value(self):
            return self.device_pointer.value

        def view(self, start):
            return MemoryPointer(self.context, ctypes.c_uint64(self.device_pointer_value + start), self.size - start,
                                 owner=self.owner)

    class IpcHandle:
        def __init__(self, base, handle, size, source_info=None, offset=0):
            self.base, self.handle, self.size, self.source_info, self.offset = base, handle, size, source_info, offset

    driver = types.ModuleType("numba.cuda.cudadrv.driver")
    driver.MemoryPointer = MemoryPointer
    driver.IpcHandle = IpcHandle
    driver.USE_NV_BINDING = False
    driver.MemoryInfo = lambda free, total: (free, total)
    cuda = types.ModuleType("numba.cuda")
    cuda.HostOnlyCUDAMemoryManager = HostOnly
    cudadrv = types.ModuleType("numba.cuda.cudadrv")
    cudadrv.driver = driver
    numba = types.ModuleType("numba")
    numba.cuda = cuda
    modules = {"numba": numba, "numba.cuda": cuda, "numba.cuda.cudadrv": cudadrv, "numba.cuda.cudadrv.driver": driver}
    return modules, calls


def install(setitem=None):
    """Installs the stand-in (with `setitem(sys.modules, name, module)`, e.g. monkeypatch.setitem);
    returns (the plugin module, freshly imported, the host calls)."""
    modules, calls = build()
    for name, module in modules.items():
        if setitem is None:
            sys.modules[name] = module
        else:
            setitem(sys.modules, name, module)
    sys.modules.pop("multigpumem.numba", None)
    import multigpumem.numba as mnumba
    mnumba.manager.cache_clear()  # the classes are made again over this stand-in
    mnumba.ipc_handle_class.cache_clear()
    return mnumba, calls


def context(device):
    return types.SimpleNamespace(device=types.SimpleNamespace(id=device))
