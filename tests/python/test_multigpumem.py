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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numba_standin  # noqa: E402

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


def test_a_refused_free_raises_is_logged_and_loses_nothing(capfd):
    p = multigpumem.alloc(GiB, 4)
    kept = multigpumem.alloc(3 * MiB, 4)  # live throughout: a wrong free would take it
    multigpumem.free(p, GiB, 4)
    before = multigpumem.stats(4)
    with pytest.raises(ValueError, match="mgm_free_async: "):
        multigpumem.free(p, GiB, 4)  # a double free
    foreign = ctypes.create_string_buffer(4096)
    with pytest.raises(ValueError, match="mgm_free_async: "):
        multigpumem.free(ctypes.addressof(foreign), 4096, 4)  # memory the pool never had
    with pytest.raises(ValueError, match="device 42 is not one of the 8 devices"):
        multigpumem.free(kept, 3 * MiB, 42)  # a bad device: not freed
    after = multigpumem.stats(4)
    for key in ("allocated_bytes.all.current", "allocation.all.current", "reserved_bytes.all.current"):
        assert after[key] == before[key], key
    assert after["allocation.all.current"] == 1
    # `kept` is still the caller's: no new allocation is handed its memory.
    others = [multigpumem.alloc(3 * MiB, 4) for _ in range(8)]
    assert kept not in others
    for q in others:
        multigpumem.free(q, 3 * MiB, 4)
    multigpumem.free(kept, 3 * MiB, 4)  # a good free raises nothing
    assert multigpumem.stats(4)["allocation.all.current"] == 0
    err = capfd.readouterr().err  # the library's own line on stderr, for each refusal
    assert err.count("multigpumem: error: ") >= 3, err


def test_a_graph_capture_keeps_its_memory_after_the_capture():
    lib = _lib.library()
    g = lib.mgm_sim_create_stream(5)
    assert lib.mgm_sim_begin_capture(g) == 0
    during = multigpumem.alloc(8 * MiB, 5, g)
    multigpumem.free(during, 8 * MiB, 5, g)  # freed inside the capture: the graph still uses it
    assert lib.mgm_sim_end_capture(g) == 0
    after = [multigpumem.alloc(8 * MiB, 5, g), multigpumem.alloc(8 * MiB, 5, 0)]
    assert during not in after  # a replay writes there: nobody else gets it
    for q, s in zip(after, (g, 0)):
        multigpumem.free(q, 8 * MiB, 5, s)
    assert lib.mgm_sim_begin_capture(None) == -1  # the default stream cannot capture
    assert "capture" in _lib.last_error()


def test_8_threads_on_4_devices_never_share_memory():
    import random
    import threading
    lib = _lib.library()
    streams = [lib.mgm_sim_create_stream(t % 4) for t in range(8)]
    live = {d: {} for d in range(4)}  # device -> {ptr: size} of every thread's live blocks
    lock = threading.Lock()
    errors = []

    def work(t):
        d, s, rng = t % 4, streams[t], random.Random(t)
        held = []
        try:
            for _ in range(400):
                if len(held) < 12 and rng.random() < 0.55:
                    n = rng.randrange(256, 2 * MiB)
                    p = multigpumem.alloc(n, d, s)
                    with lock:
                        for q, m in live[d].items():
                            assert p + n <= q or q + m <= p, "two live blocks overlap"
                        live[d][p] = n
                    held.append((p, n))
                elif held:
                    p, n = held.pop(rng.randrange(len(held)))
                    with lock:
                        del live[d][p]
                    multigpumem.free(p, n, d, s)
            for p, n in held:
                with lock:
                    del live[d][p]
                multigpumem.free(p, n, d, s)
        except Exception as e:  # noqa: BLE001 - reported below, with the thread
            errors.append("thread %d: %r" % (t, e))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    for d in range(4):
        assert multigpumem.stats(d)["allocated_bytes.all.current"] == 0


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
    mnumba, calls = numba_standin.install(monkeypatch.setitem)
    Manager = mnumba._numba_memory_manager  # what NUMBA_CUDA_MEMORY_MANAGER reads
    m = Manager(numba_standin.context(7))
    assert m.interface_version == 1
    mp = m.memalloc(2 * MiB)
    assert isinstance(mp.device_pointer, ctypes.c_uint64) and mp.size == 2 * MiB
    assert multigpumem.stats(7)["allocated_bytes.all.current"] == 2 * MiB
    free, total = m.get_memory_info()
    assert total > 79 * GiB
    with pytest.raises(RuntimeError, match="cannot be shared with another process.*shareable:True"):
        m.get_ipc_handle(mp)
    mp.finalizer()
    assert multigpumem.stats(7)["allocated_bytes.all.current"] == 0
    with m.defer_cleanup():
        pass
    m.reset()
    assert calls == ["host defer", "host reset"]


# Two processes with shareable pools (MGM_ALLOC_CONF=shareable:True): the exporter fills a block,
# the importer (started by the exporter while it holds the block) checks it and overwrites it.
_EXPORTER = r"""
import ctypes, os, pickle, subprocess, sys
sys.path.insert(0, os.environ["MGM_TEST_DIR"])
import multigpumem, numba_standin
n = 3 * (1 << 20) + 100
p = multigpumem.alloc(n, 5)
ctypes.memmove(p, bytes(i * 7 % 256 for i in range(n)), n)
token = multigpumem.ipc_export(p, 5)
r = subprocess.run([sys.executable, "-c", os.environ["MGM_IMPORTER"], "plain", token, str(n)])
assert r.returncode == 0, "the importer failed"
assert ctypes.string_at(p, n) == b"Z" * n, "the importer's writes are not here"
multigpumem.ipc_unexport(p)
# Numba: the handle of a view pickles, and opens in the other process at the view's offset.
mnumba, _ = numba_standin.install()
m = mnumba._numba_memory_manager(numba_standin.context(5))
mp = m.memalloc(1 << 20)
ctypes.memset(mp.device_pointer_value, 0x33, 1 << 20)
ctypes.memset(mp.device_pointer_value + 4096, 0x44, 16)
h = m.get_ipc_handle(mp.view(4096))
assert h.offset == 4096
r = subprocess.run([sys.executable, "-c", os.environ["MGM_IMPORTER"], "numba", pickle.dumps(h).hex(), "16"])
assert r.returncode == 0, "the numba importer failed"
assert ctypes.string_at(mp.device_pointer_value + 4096, 16) == b"Z" * 16
mp.finalizer()
print("exporter ok")
"""

_IMPORTER = r"""
import ctypes, os, pickle, sys
sys.path.insert(0, os.environ["MGM_TEST_DIR"])
import multigpumem, numba_standin
mode, what, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "plain":
    q = multigpumem.ipc_import(what, 5)
    assert ctypes.string_at(q, n) == bytes(i * 7 % 256 for i in range(n)), "not the exporter's bytes"
    ctypes.memset(q, ord("Z"), n)
    multigpumem.ipc_close(q)
else:
    numba_standin.install()
    h = pickle.loads(bytes.fromhex(what))
    mp = h.open(numba_standin.context(5))
    assert ctypes.string_at(mp.device_pointer_value, n) == b"\x44" * n, "not the view's bytes"
    ctypes.memset(mp.device_pointer_value, ord("Z"), n)
    h.close()
"""


def test_a_block_shared_between_two_processes_plain_and_through_numbas_ipc_handle():
    import subprocess
    env = dict(os.environ, MGM_ALLOC_CONF="shareable:True", MGM_TEST_DIR=os.path.dirname(os.path.abspath(__file__)),
               MGM_IMPORTER=_IMPORTER)
    r = subprocess.run([sys.executable, "-c", _EXPORTER], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "exporter ok" in r.stdout


def test_ipc_bad_input_is_a_clear_error():
    p = multigpumem.alloc(MiB, 0)
    with pytest.raises(ValueError, match="shareable:True"):
        multigpumem.ipc_export(p, 0)  # this process's pools are process-local
    multigpumem.free(p, MiB, 0)
    with pytest.raises(OSError, match="token"):
        multigpumem.ipc_import("not a token", 0)
    with pytest.raises(ValueError, match="not a block"):
        multigpumem.ipc_close(12345)


def test_memory_history_fills_device_traces():
    multigpumem.record_memory_history(max_entries=10)
    try:
        p = multigpumem.alloc(2 * MiB, 4)
        multigpumem.free(p, 2 * MiB, 4)
        trace = multigpumem.snapshot(4)["device_traces"][4]
        assert [e["action"] for e in trace] == ["alloc", "free_requested", "free_completed"]
        assert all(e["addr"] == p and e["size"] == 2 * MiB for e in trace)
    finally:
        multigpumem.record_memory_history(enabled=False)
    assert all(t == [] for t in multigpumem.snapshot(4)["device_traces"])
    with pytest.raises(ValueError, match="max_entries must be at least 1"):
        multigpumem.record_memory_history(max_entries=0)
