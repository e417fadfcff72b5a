"""The C library (libmultigpumem_c.so.1) through ctypes: found by MGM_C_LIBRARY, else where
`cmake --install` put it (the installed package's _installed.py names the library's folder
relative to the package: PREFIX/lib/python3.X/dist-packages/multigpumem -> PREFIX/lib); the build
tree's copy knows the library built beside it."""
import ctypes
import os
import threading

SONAME = "libmultigpumem_c.so.1"
ABI_VERSION = 2

_lock = threading.Lock()
_lib = None
_path = None


def candidates():
    """The paths tried, in order: MGM_C_LIBRARY; in the build tree, the library built beside this
    copy of the package (named by the generated _where.py); installed, the folder _installed.py
    names; else PREFIX/lib three folders up (a package copied by hand)."""
    env = os.environ.get("MGM_C_LIBRARY")
    if env:
        return [env]
    try:
        from . import _where  # written by the build into the build tree's copy only
        return [_where.LIBRARY]
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        from . import _installed  # written by cmake --install
        return [os.path.normpath(os.path.join(here, _installed.LIBRARY_DIR, SONAME))]
    except ImportError:
        pass
    return [os.path.normpath(os.path.join(here, "..", "..", "..", SONAME))]


def _declare(lib):
    c_size_t, c_void_p, c_int, c_double, c_char_p = (ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int,
                                                      ctypes.c_double, ctypes.c_char_p)
    table = {
        "mgm_abi_version": (c_int, []),
        "mgm_last_error": (c_char_p, []),
        "mgm_clear_error": (None, []),
        "mgm_device_count": (c_int, []),
        "mgm_config": (c_char_p, []),
        "mgm_memory_info": (c_int, [c_int, ctypes.POINTER(c_size_t), ctypes.POINTER(c_size_t)]),
        "mgm_alloc_async": (c_void_p, [c_size_t, c_int, c_void_p]),
        "mgm_free_async": (None, [c_void_p, c_size_t, c_int, c_void_p]),
        "mgm_record_stream": (c_int, [c_void_p, c_void_p]),
        "mgm_forget_stream": (c_int, [c_int, c_void_p]),
        "mgm_empty_cache": (c_size_t, []),
        "mgm_set_memory_fraction": (c_int, [c_double, c_int]),
        "mgm_stats_json": (c_char_p, [c_int]),
        "mgm_snapshot_json": (c_char_p, [c_int]),
        "mgm_record_memory_history": (c_int, [c_size_t]),
        "mgm_sim_create_stream": (c_void_p, [c_int]),
        "mgm_sim_begin_capture": (c_int, [c_void_p]),
        "mgm_sim_end_capture": (c_int, [c_void_p]),
        "mgm_sim_enqueue": (c_int, [c_void_p, ctypes.c_ulonglong]),
        "mgm_ipc_export": (c_char_p, [c_void_p, c_int]),
        "mgm_ipc_unexport": (c_int, [c_void_p]),
        "mgm_ipc_import": (c_void_p, [c_char_p, c_int]),
        "mgm_ipc_close": (c_int, [c_void_p]),
    }
    for name, (restype, argtypes) in table.items():
        f = getattr(lib, name)
        f.restype = restype
        f.argtypes = argtypes


def library():
    """The loaded library (loaded once). Raises OSError naming every path tried."""
    global _lib, _path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        errors = []
        for path in candidates():
            if not os.path.exists(path):
                errors.append("%s: no such file" % path)
                continue
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                errors.append("%s: %s" % (path, e))
                continue
            # The version first: an older library lacks the newer functions _declare looks up.
            # A newer one keeps every function of this version (versions only add).
            lib.mgm_abi_version.restype = ctypes.c_int
            lib.mgm_abi_version.argtypes = []
            version = lib.mgm_abi_version()
            if version < ABI_VERSION:
                raise OSError("%s has ABI version %d; this package needs %d or later" % (path, version, ABI_VERSION))
            _declare(lib)
            _lib, _path = lib, path
            return lib
        raise OSError("multigpumem: %s not found (set MGM_C_LIBRARY to its path): %s" % (SONAME, "; ".join(errors)))


def path():
    """The path of the loaded library."""
    library()
    return _path


def last_error():
    return library().mgm_last_error().decode("utf-8", "replace")


def function_address(name):
    """A C function's address, as PyTorch's setters take it."""
    return ctypes.cast(getattr(library(), name), ctypes.c_void_p).value
