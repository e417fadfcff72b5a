"""PyTorch: the pool as PyTorch's CUDA allocator, through CUDAPluggableAllocator.

    import multigpumem.torch
    multigpumem.torch.use()          # first thing, before anything touches CUDA
    x = torch.empty(1 << 20, device="cuda")

What works: allocation and free on the current stream, Tensor.record_stream, torch.cuda.empty_cache,
torch.cuda.set_per_process_memory_fraction, allocations during CUDA graph captures (from the
capture's private pool). What is lost under the global swap: torch.cuda.memory_stats and the memory
snapshots (they raise: use multigpumem.stats / multigpumem.snapshot), torch.multiprocessing's CUDA
IPC, and a capture's private pool is never released (PyTorch's pool hooks are C++-typed): graphs
captured again and again keep their memory. mem_pool() keeps PyTorch's caching allocator (and its
graph pools) and gives it the pool's memory for a region of code.
"""
from . import _lib

_allocator = None  # the CUDAPluggableAllocator, made once
_region_allocator = None  # the one behind mem_pool()


def _torch():
    try:
        import torch
    except ImportError as e:
        raise ImportError("multigpumem.torch needs PyTorch (import torch failed: %s)" % e) from e
    memory = getattr(getattr(torch, "cuda", None), "memory", None)
    if memory is None or not hasattr(memory, "CUDAPluggableAllocator"):
        raise ImportError("multigpumem.torch needs PyTorch 2.0 or later with CUDA (torch.cuda.memory."
                          "CUDAPluggableAllocator); this torch is %s" % getattr(torch, "__version__", "unknown"))
    return torch


def allocator():
    """The CUDAPluggableAllocator over the pool, with every hook set."""
    global _allocator
    if _allocator is not None:
        return _allocator
    torch = _torch()
    alloc = torch.cuda.memory.CUDAPluggableAllocator(_lib.path(), "mgm_torch_alloc", "mgm_torch_free")
    hooks = alloc.allocator()
    hooks.set_init_fn(_lib.function_address("mgm_torch_init"))
    hooks.set_reset_fn(_lib.function_address("mgm_torch_empty_cache"))
    hooks.set_memory_fraction_fn(_lib.function_address("mgm_torch_set_memory_fraction"))
    hooks.set_record_stream_fn(_lib.function_address("mgm_torch_record_stream"))
    hooks.set_base_alloc_fn(_lib.function_address("mgm_torch_base_alloc"))
    _allocator = alloc
    return alloc


def use():
    """Makes the pool PyTorch's CUDA allocator for this process (once, before CUDA is used)."""
    torch = _torch()
    if torch.cuda.is_initialized():
        raise RuntimeError("multigpumem.torch.use(): PyTorch has initialised CUDA already, and its allocator can "
                           "no longer be swapped. Call it first, before any tensor, model or library touches "
                           "CUDA (an import that compiles CUDA extensions does), or keep PyTorch's allocator and "
                           "use `with torch.cuda.use_mem_pool(multigpumem.torch.mem_pool()):` for a region.")
    torch.cuda.memory.change_current_allocator(allocator())


def mem_pool(**kwargs):
    """A torch.cuda.MemPool whose segments come from the pool (PyTorch 2.5+), for
    `with torch.cuda.use_mem_pool(pool):`. PyTorch's caching allocator stays in charge (its stats,
    snapshots and graph pools keep working); it turns its expandable segments off for such pools."""
    torch = _torch()
    if not hasattr(torch.cuda, "MemPool"):
        raise ImportError("multigpumem.torch.mem_pool() needs torch.cuda.MemPool (PyTorch 2.5 or later)")
    global _region_allocator
    if _region_allocator is None:
        # MemPool checks for NULL and runs PyTorch's own out-of-memory path: the entry points that
        # return NULL (same signatures as mgm_torch_alloc / mgm_torch_free) serve it.
        _region_allocator = torch.cuda.memory.CUDAPluggableAllocator(_lib.path(), "mgm_alloc_async", "mgm_free_async")
    return torch.cuda.MemPool(_region_allocator.allocator(), **kwargs)
