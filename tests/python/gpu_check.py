#!/usr/bin/python3
"""scripts/gpu-check's look at the C ABI on a real GPU: the pool through ctypes, then PyTorch and
CuPy through their glue where they can be imported (each skipped otherwise). Exit 77 without a GPU.
Usage: MGM_C_LIBRARY=.../libmultigpumem_c.so.1 PYTHONPATH=<folder of multigpumem> gpu_check.py"""
import sys

import multigpumem
import multigpumem.cupy  # both import without their frameworks
import multigpumem.torch


def main():
    try:
        n = multigpumem.device_count()
    except (OSError, RuntimeError) as e:
        print("C ABI: cannot start: %s" % e)
        return 1
    if n <= 0:
        print("C ABI: no CUDA device visible: skipped")
        return 77
    size = 64 << 20
    ptrs = [multigpumem.alloc(size, 0) for _ in range(4)]
    for p in ptrs:
        multigpumem.free(p, size, 0)
    again = multigpumem.alloc(size, 0)
    st = multigpumem.stats(0)
    multigpumem.free(again, size, 0)
    print("C ABI on %d GPUs: 5 allocations of 64 MiB on GPU0, %d from the cache, %d driver allocations, "
          "reserved %d MiB; empty_cache gave back %d MiB" %
          (n, st["mgm.cache_hits"], st["num_device_alloc"], st["reserved_bytes.all.current"] >> 20,
           multigpumem.empty_cache() >> 20))
    status = 0
    try:
        import torch
        if not torch.cuda.is_available() or not hasattr(torch.cuda.memory, "CUDAPluggableAllocator"):
            raise ImportError("torch %s without CUDA or CUDAPluggableAllocator" % torch.__version__)
    except ImportError as e:
        print("PyTorch: skipped (%s)" % e)
    else:
        multigpumem.torch.use()
        x = torch.ones(1 << 22, device="cuda")
        y = (x * 2).sum().item()
        s = multigpumem.stats(0)
        ok = y == 2 * (1 << 22) and s["allocated_bytes.all.current"] > 0
        print("PyTorch %s: a tensor through the pool, sum %s, allocated %d KiB: %s" %
              (torch.__version__, y, s["allocated_bytes.all.current"] >> 10, "ok" if ok else "FAILED"))
        status = status if ok else 1
    try:
        import cupy
    except ImportError as e:
        print("CuPy: skipped (%s)" % e)
    else:
        multigpumem.cupy.use()
        a = cupy.arange(1 << 20, dtype=cupy.float64)
        ok = float(a.sum()) == float(sum(range(1 << 20)))
        print("CuPy %s: an array through the pool: %s" % (cupy.__version__, "ok" if ok else "FAILED"))
        status = status if ok else 1
    return status


if __name__ == "__main__":
    sys.exit(main())
