"""The Python package over the C ABI, on the simulator (MGM_C_SIM), with stand-ins for torch,
cupy and numba that record what the glue hands them (none of the three can be installed here)."""
import ctypes
import importlib
import json
import os
import pickle
import sys
import types

import pytest

import multigpumem
from multigpumem import _lib

MiB = 1 << 20
GiB = 1 << 30


def test_the_library_is_found_next_to_the_package_and_runs_on_the_simulator():
    assert os.path.basename(multigpumem.library_path()).startswith("libmultigpumem_c.so")
    assert multigpumem.device_count() == 8  # dgx-h100
    assert "sim=dgx-h100" in multigpumem.config()
    free, total = multigpumem.memory_info(0)
    assert total > 79 * GiB and free <= total


def test_alloc_free_stats_and_snapshot_agree():
    streams = [_lib.library().mgm_sim_create_stream(d) for d in range(2)]
    held = []
    for i in range(40):
        d = i % 2
        p = multigpumem.alloc(100_000 + i * 4096, d, streams[d])
        held.append((p, 100_000 + i * 4096, d, streams[d]))
    for d in range(2):
        st = multigpumem.stats(d)
        snap = multigpumem.snapshot(d)
        active = sum(b["size"] for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated")
        assert st["allocated_bytes.all.current"] == active
        assert st["allocation.all.current"] == 20
        assert st["requested_bytes.all.current"] == sum(n for _, n, dd, _ in held if dd == d)
        assert st["reserved_bytes.all.current"] == sum(s["total_size"] for s in snap["segments"])
    for p, n, d, s in held:
        multigpumem.free(p, n, d, s)
    assert multigpumem.stats(0)["allocated_bytes.all.current"] == 0
    assert multigpumem.empty_cache() > 0


def test_record_stream_holds_a_block_until_the_other_streams_work_is_done():
    lib = _lib.library()
    s1, s2 = lib.mgm_sim_create_stream(1), lib.mgm_sim_create_stream(1)
    p = multigpumem.alloc(MiB, 1, s1)
    multigpumem.free(p, MiB, 1, s1)
    assert multigpumem.alloc(MiB, 1, s1) == p  # reused at once on its own stream
    assert lib.mgm_sim_enqueue(s2, 1_000_000) == 0
    multigpumem.record_stream(p, s2)
    multigpumem.free(p, MiB, 1, s1)
    q = multigpumem.alloc(MiB, 1, s1)
    assert q != p  # p waits for s2's work
    multigpumem.free(q, MiB, 1, s1)
    with pytest.raises(ValueError, match="no pool holds"):
        multigpumem.record_stream(12345, s2)


def test_dump_snapshot_pickles_for_memory_viz(tmp_path):
    p = multigpumem.alloc(MiB, 3)
    out = tmp_path / "snap.pickle"
    multigpumem.dump_snapshot(str(out), 3)
    with open(out, "rb") as f:
        snap = pickle.load(f)
    assert {"segments", "device_traces"} <= set(snap)
    assert snap["segments"][0]["blocks"][0]["state"] in ("active_allocated", "inactive")
    multigpumem.free(p, MiB, 3)


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="device 99 is not one of the 8 devices"):
        multigpumem.alloc(MiB, 99)
    with pytest.raises(ValueError, match=r"not in \[0, 1\]"):
        multigpumem.set_memory_fraction(2.0, 4)
    assert multigpumem.alloc(0, 0) == 0  # size 0: no memory, no error
    multigpumem.set_memory_fraction(0.01, 4)
    with pytest.raises(MemoryError, match="memory fraction"):
        multigpumem.alloc(GiB, 4)
    multigpumem.set_memory_fraction(1.0, 4)
    p = multigpumem.alloc(GiB, 4)
    multigpumem.free(p, GiB, 4)
    multigpumem.free(p, GiB, 4)  # a double free: logged, nothing changes
    assert multigpumem.stats(4)["allocated_bytes.all.current"] == 0


def _hide(monkeypatch, *names):
    """Makes `import NAME` fail, as where the framework is not installed."""
    for n in names:
        monkeypatch.setitem(sys.modules, n, None)


def test_the_modules_import_without_their_frameworks(monkeypatch):
    _hide(monkeypatch, "torch", "cupy", "numba", "numba.cuda")
    for name in ("multigpumem.torch", "multigpumem.cupy", "multigpumem.numba"):
        sys.modules.pop(name, None)
        importlib.import_module(name)
    import multigpumem.cupy as mcupy
    import multigpumem.numba as mnumba
    import multigpumem.torch as mtorch
    with pytest.raises(ImportError, match="PyTorch"):
        mtorch.use()
    with pytest.raises(ImportError, match="CuPy"):
        mcupy.use()
    with pytest.raises(ImportError, match="Numba"):
        mnumba._numba_memory_manager  # what NUMBA_CUDA_MEMORY_MANAGER reads


class _FakePluggable:
    """torch.cuda.memory.CUDAPluggableAllocator as a recorder."""

    made = []

    def __init__(self, path, alloc_fn_name, free_fn_name):
        self.path, self.alloc_fn_name, self.free_fn_name = path, alloc_fn_name, free_fn_name
        self.hooks = {}
        _FakePluggable.made.append(self)

    # The setters torch._C._CUDAPluggableAllocator has (a misspelt one fails, as it would there).
    SETTERS = ("set_init_fn", "set_reset_fn", "set_memory_fraction_fn", "set_base_alloc_fn", "set_record_stream_fn",
               "set_begin_allocate_to_pool", "set_end_allocate_to_pool_fn", "set_release_pool")

    def allocator(self):
        outer = self

        class Hooks:
            def __getattr__(self, name):
                if name not in _FakePluggable.SETTERS:
                    raise AttributeError(name)
                return lambda address: outer.hooks.__setitem__(name, address)

        return Hooks()


def _fake_torch(initialized=False):
    torch = types.ModuleType("torch")
    torch.__version__ = "2.6.0+fake"
    cuda = types.ModuleType("torch.cuda")
    memory = types.ModuleType("torch.cuda.memory")
    memory.CUDAPluggableAllocator = _FakePluggable
    memory.swapped = []
    memory.change_current_allocator = memory.swapped.append
    cuda.memory = memory
    cuda.is_initialized = lambda: initialized
    cuda.MemPool = lambda allocator, **kw: ("MemPool", allocator, kw)
    torch.cuda = cuda
    return torch


def test_torch_use_swaps_the_allocator_with_every_hook(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", _fake_torch())
    sys.modules.pop("multigpumem.torch", None)
    import multigpumem.torch as mtorch
    mtorch.use()
    alloc = _FakePluggable.made[-1]
    assert sys.modules["torch"].cuda.memory.swapped == [alloc]
    assert alloc.path == multigpumem.library_path()
    assert (alloc.alloc_fn_name, alloc.free_fn_name) == ("mgm_torch_alloc", "mgm_torch_free")
    lib = _lib.library()
    expected = {
        "set_init_fn": "mgm_torch_init",
        "set_reset_fn": "mgm_torch_empty_cache",
        "set_memory_fraction_fn": "mgm_torch_set_memory_fraction",
        "set_record_stream_fn": "mgm_torch_record_stream",
        "set_base_alloc_fn": "mgm_torch_base_alloc",
    }
    for setter, fn in expected.items():
        assert alloc.hooks[setter] == ctypes.cast(getattr(lib, fn), ctypes.c_void_p).value
    pool = mtorch.mem_pool(use_on_oom=True)
    assert pool[0] == "MemPool" and pool[2] == {"use_on_oom": True}
    region = _FakePluggable.made[-1]  # MemPool checks NULL: the entry points that return it
    assert (region.alloc_fn_name, region.free_fn_name) == ("mgm_alloc_async", "mgm_free_async")
    # The entry points PyTorch calls, through the addresses it was given.
    alloc_fn = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)(
        ctypes.cast(getattr(lib, "mgm_torch_alloc"), ctypes.c_void_p).value)
    free_fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)(
        ctypes.cast(getattr(lib, "mgm_torch_free"), ctypes.c_void_p).value)
    p = alloc_fn(4 * MiB, 5, None)
    assert p and multigpumem.stats(5)["allocated_bytes.all.current"] == 4 * MiB
    free_fn(p, 4 * MiB, 5, None)
    assert multigpumem.stats(5)["allocated_bytes.all.current"] == 0


def test_torch_use_after_cuda_is_initialised_says_what_to_do(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(initialized=True))
    sys.modules.pop("multigpumem.torch", None)
    import multigpumem.torch as mtorch
    with pytest.raises(RuntimeError, match="initialised CUDA already.*use_mem_pool"):
        mtorch.use()


def test_cupy_allocations_are_ordered_on_cupys_current_stream(monkeypatch):
    stream = _lib.library().mgm_sim_create_stream(6)
    cupy = types.ModuleType("cupy")
    cuda = types.SimpleNamespace()
    cuda.runtime = types.SimpleNamespace(getDevice=lambda: 6)
    cuda.get_current_stream = lambda: types.SimpleNamespace(ptr=stream)
    cuda.memory = types.SimpleNamespace(UnownedMemory=lambda ptr, size, owner, device: (ptr, size, owner, device),
                                        MemoryPointer=lambda mem, offset: (mem, offset))
    cuda.allocators = []
    cuda.set_allocator = cuda.allocators.append
    cupy.cuda = cuda
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    sys.modules.pop("multigpumem.cupy", None)
    import multigpumem.cupy as mcupy
    mcupy.use()
    assert cuda.allocators == [mcupy.malloc]
    (ptr, size, owner, device), offset = mcupy.malloc(3 * MiB)
    assert size == 3 * MiB and device == 6 and offset == 0 and owner.stream == stream
    snap = multigpumem.snapshot(6)
    assert any(b["address"] == ptr and b["state"] == "active_allocated" for s in snap["segments"] for b in s["blocks"])
    del owner  # CuPy drops its last reference: freed on its stream
    import gc
    gc.collect()
    assert multigpumem.stats(6)["allocated_bytes.all.current"] == 0


def test_numba_plugin_allocates_from_the_pool_and_refuses_ipc(monkeypatch):
    calls = []

    class HostOnly:
        def __init__(self, context):
            self.context = context

        def reset(self):
            calls.append("host reset")

        def defer_cleanup(self):
            import contextlib
            calls.append("host defer")
            return contextlib.nullcontext()

    class MemoryPointer:
        def __init__(self, context, pointer, size, finalizer=None):
            self.context, self.pointer, self.size, self.finalizer = context, pointer, size, finalizer

    driver = types.SimpleNamespace(MemoryPointer=MemoryPointer, USE_NV_BINDING=False,
                                   MemoryInfo=lambda free, total: (free, total))
    cuda = types.ModuleType("numba.cuda")
    cuda.HostOnlyCUDAMemoryManager = HostOnly
    cudadrv = types.ModuleType("numba.cuda.cudadrv")
    cudadrv.driver = driver
    numba = types.ModuleType("numba")
    numba.cuda = cuda
    monkeypatch.setitem(sys.modules, "numba", numba)
    monkeypatch.setitem(sys.modules, "numba.cuda", cuda)
    monkeypatch.setitem(sys.modules, "numba.cuda.cudadrv", cudadrv)
    monkeypatch.setitem(sys.modules, "numba.cuda.cudadrv.driver", driver)
    sys.modules.pop("multigpumem.numba", None)
    import multigpumem.numba as mnumba
    mnumba._manager = None
    Manager = mnumba._numba_memory_manager  # what NUMBA_CUDA_MEMORY_MANAGER reads
    m = Manager(types.SimpleNamespace(device=types.SimpleNamespace(id=7)))
    assert m.interface_version == 1
    mp = m.memalloc(2 * MiB)
    assert isinstance(mp.pointer, ctypes.c_uint64) and mp.size == 2 * MiB
    assert multigpumem.stats(7)["allocated_bytes.all.current"] == 2 * MiB
    free, total = m.get_memory_info()
    assert total > 79 * GiB
    with pytest.raises(RuntimeError, match="cannot be shared with another process"):
        m.get_ipc_handle(mp)
    mp.finalizer()
    assert multigpumem.stats(7)["allocated_bytes.all.current"] == 0
    with m.defer_cleanup():
        pass
    m.reset()
    assert calls == ["host defer", "host reset"]
