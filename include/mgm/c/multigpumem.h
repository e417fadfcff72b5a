/* MultiGpuMem's C ABI: the caching pool of every GPU of the process, for frameworks that take an
 * external allocator through C function pointers (PyTorch's CUDAPluggableAllocator, CuPy's
 * CFunctionAllocator, a Numba EMM plugin through ctypes) and for C programs.
 *
 * libmultigpumem_c.so (SONAME libmultigpumem_c.so.1; CMake: MultiGpuMem::c) runs one
 * multi_device_pool per process. A device's pool is made on its first use, with the options of
 * MGM_ALLOC_CONF (the keys of PYTORCH_CUDA_ALLOC_CONF it can honour are accepted; the others are
 * refused by name, with the reason, and every call then fails with that message).
 * With MGM_C_SIM=PRESET (a simulated machine's preset or device list, as `mgm --sim` reads it)
 * the pools run on the simulator, judged by its oracle (MGM_C_SIM_JUDGE=off: not judged, for
 * benchmarks): for tests, and machines without a GPU.
 *
 * Errors: no function but mgm_torch_alloc throws. One that fails returns NULL (or -1)
 * and sets mgm_last_error(), a message of the calling thread, valid until its next failing call
 * (or mgm_clear_error). Events with no caller to tell are logged: see MGM_LOG below.
 * Strings returned by mgm_stats_json, mgm_snapshot_json and mgm_config live in a buffer of the
 * calling thread until its next call of the same function.
 *
 * Size 0: an allocation of 0 bytes returns NULL and is no error (mgm_last_error() is not set);
 * freeing NULL does nothing. PyTorch's caching allocator hands out no memory for empty tensors
 * either, and CuPy treats a zero-size allocation as a null pointer.
 *
 * Streams are cudaStream_t values passed as void* (NULL: the legacy default stream); on the
 * simulator, a stream of mgm_sim_create_stream. */
#ifndef MGM_C_MULTIGPUMEM_H
#define MGM_C_MULTIGPUMEM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define MGM_C_API __attribute__((visibility("default")))
#else
#define MGM_C_API
#endif

/* The ABI this header describes; mgm_abi_version() says what the loaded library has.
 * Versions only add: 2 added mgm_record_memory_history, and every function of 1 is unchanged, so a
 * caller built for version N runs with any library of version N or later. */
#define MGM_ABI_VERSION 2

/* cudaStream_t's type, without the CUDA headers (the same pointer). */
struct CUstream_st;
typedef struct CUstream_st* mgm_stream_t;

MGM_C_API int mgm_abi_version(void);
/* The calling thread's last error; "" when none. */
MGM_C_API const char* mgm_last_error(void);
/* Empties the calling thread's last error, as `errno = 0` does: to learn whether a call that
 * returns nothing (mgm_free_async) was refused. */
MGM_C_API void mgm_clear_error(void);

/* The library's messages (a refused free, a hook that failed, the pools' warnings, the
 * simulator's findings) go to stderr, one line each ("multigpumem: LEVEL: text"), from the level
 * MGM_LOG names: off, error, warning (the default), info or debug; any other value stops the
 * library from starting, with that reason. mgm_set_log_fn sends those of `min_level` and above to
 * `fn` instead, with `user`; fn NULL: back to stderr. `fn` runs on the thread of the event, maybe
 * on several threads at once, sometimes under a lock of the pools: it must not call the library.
 * A message being delivered while mgm_set_log_fn replaces `fn` may still reach the old `fn` after
 * mgm_set_log_fn returns: keep the old `user` valid until no other thread can be in the library. */
#define MGM_LOG_DEBUG 0
#define MGM_LOG_INFO 1
#define MGM_LOG_WARNING 2
#define MGM_LOG_ERROR 3
typedef void (*mgm_log_fn)(int level, const char* message, void* user);
MGM_C_API void mgm_set_log_fn(mgm_log_fn fn, int min_level, void* user);
/* The GPUs the pools run on (simulated ones under MGM_C_SIM); -1 when the library cannot start. */
MGM_C_API int mgm_device_count(void);
/* `device`'s free and total memory as the driver (or the simulator) counts them. 0, or -1. */
MGM_C_API int mgm_memory_info(int device, size_t* free_bytes, size_t* total_bytes);
/* The pool options in effect, as MGM_ALLOC_CONF text, plus "sim=PRESET" under the simulator. */
MGM_C_API const char* mgm_config(void);

/* Stream-ordered memory of `device`'s pool: usable by work on `stream` at once, by other streams
 * after they synchronise with it. NULL on failure (out of memory, a bad device, a memory fraction
 * reached), with mgm_last_error() naming the figures. */
MGM_C_API void* mgm_alloc_async(size_t size, int device, void* stream);
/* Returns `ptr` (of `size` bytes, from `device`) for reuse in `stream`'s order. A pointer the pool
 * did not hand out (a double free, a foreign pointer, a bad device) changes nothing: it is logged
 * (MGM_LOG) and becomes this thread's mgm_last_error(), which is otherwise left as it was. */
MGM_C_API void mgm_free_async(void* ptr, size_t size, int device, void* stream);
/* `ptr` is also used on `stream`: it is reused only after the work enqueued there by its free has
 * completed. 0, or -1 when no pool holds `ptr`. */
MGM_C_API int mgm_record_stream(void* ptr, void* stream);
/* Before destroying a stream the pools have seen: its cached blocks join the others (PyTorch's
 * and CuPy's streams come and go). 0, or -1. */
MGM_C_API int mgm_forget_stream(int device, void* stream);
/* Gives every pool's idle memory back to the driver; returns the bytes released. */
MGM_C_API size_t mgm_empty_cache(void);
/* Caps `device`'s pool at `fraction` of the device's memory (0 <= fraction <= 1): an allocation
 * after which the pool's reserved memory would be past it fails (after the pool gave back its
 * idle memory). Capped allocations of a device are made one at a time; one that fails may have
 * taken a segment past the cap for a moment. 0, or -1 for a bad fraction or device. */
MGM_C_API int mgm_set_memory_fraction(double fraction, int device);
/* `device`'s pool statistics as JSON, in torch.cuda.memory_stats()'s flat keys
 * ("allocated_bytes.all.current", ...) plus "mgm.*" keys; NULL on failure. Only the ".all."
 * figures exist: the pool does not count its small and large pools apart, so there are no
 * ".small_pool." or ".large_pool." keys. */
MGM_C_API const char* mgm_stats_json(int device);
/* `device`'s pool as torch.cuda.memory._snapshot() has it ({"segments": [...], "device_traces":
 * [...]}, the format memory_viz reads once pickled); NULL on failure. "device_traces" has one
 * list per device: empty unless mgm_record_memory_history is on. */
MGM_C_API const char* mgm_snapshot_json(int device);
/* Records each device's allocations and frees through this library, as
 * torch.cuda.memory._record_memory_history does, for the snapshot's "device_traces" (memory_viz's
 * timeline): "alloc", "free_requested" and "free_completed" (a free is reusable in its stream's
 * order at once), and "oom" with the device's free bytes, each with "addr", "size" (the bytes
 * asked for), "stream" and "time_us"; no stack frames. The last `max_entries` per device are
 * kept. A call with `max_entries` > 0 starts afresh; 0 stops recording and drops the history.
 * 0, or -1 with the error set. */
MGM_C_API int mgm_record_memory_history(size_t max_entries);
/* Simulator only (MGM_C_SIM): a new stream on `device`; NULL otherwise. */
MGM_C_API void* mgm_sim_create_stream(int device);
/* Simulator only: begin and end a graph capture on a stream of mgm_sim_create_stream, as
 * torch.cuda.graph does (allocations during it come from the capture's private pool). 0, or -1. */
MGM_C_API int mgm_sim_begin_capture(void* stream);
MGM_C_API int mgm_sim_end_capture(void* stream);
/* Simulator only: `nanoseconds` of work on a stream of mgm_sim_create_stream (a kernel), so that
 * stream order can be seen: memory freed behind it waits for it. 0, or -1. */
MGM_C_API int mgm_sim_enqueue(void* stream, unsigned long long nanoseconds);

/* PyTorch's CUDAPluggableAllocator (torch.cuda.memory.change_current_allocator). The signatures
 * are those PyTorch casts the pointers to: the free takes the device, whatever its docstring says.
 *
 * mgm_torch_alloc THROWS: PyTorch does not check a null return under change_current_allocator,
 * so a failure throws mgm::out_of_memory (a std::bad_alloc; a bad device: mgm::logic_error) with
 * the pool's message (starting "CUDA out of memory"), which PyTorch turns into a Python exception.
 * It is the one entry point that throws, and must be called from C++ (as PyTorch does). Under a
 * torch.cuda.MemPool, which checks for NULL and retries, mgm_alloc_async / mgm_free_async are
 * given instead (same signatures). A graph capture's private pool is not released under the
 * global swap (PyTorch's pool hooks are C++-typed): its memory stays with the pool. */
MGM_C_API void* mgm_torch_alloc(size_t size, int device, mgm_stream_t stream);
MGM_C_API void mgm_torch_free(void* ptr, size_t size, int device, mgm_stream_t stream);
/* set_init_fn: PyTorch may call it before any setting is made; the pools start lazily anyway. */
MGM_C_API void mgm_torch_init(int device_count);
/* set_reset_fn: torch.cuda.empty_cache(). */
MGM_C_API void mgm_torch_empty_cache(void);
/* set_memory_fraction_fn: torch.cuda.set_per_process_memory_fraction(fraction, device). */
MGM_C_API void mgm_torch_set_memory_fraction(double fraction, int device);
/* set_record_stream_fn: Tensor.record_stream(stream). */
MGM_C_API void mgm_torch_record_stream(void* ptr, mgm_stream_t stream);
/* set_base_alloc_fn: the pool segment `ptr` lies in, and (in *size) that segment's size; for a
 * pointer no pool holds, the pointer itself and 0. */
MGM_C_API void* mgm_torch_base_alloc(void* ptr, size_t* size);

/* Shareable memory: a pooled block seen by another process (NCCL's peers, a data loader, a
 * serving process). The pools must make shareable memory: MGM_ALLOC_CONF=shareable:True (POSIX
 * descriptors, and fabric handles where supported, at the recommended granularity: also what
 * ncclCommRegister needs), with expandable_segments on (the default).
 *
 * mgm_ipc_export: a token naming the block `ptr` (a live allocation of `device`'s pool) as one
 * line of text (this process's id and descriptors), to pass by any channel; NULL on failure. It
 * lives in a buffer of the calling thread until its next mgm_ipc_export; exporting `ptr` again
 * gives the same token. The descriptors stay open until mgm_ipc_unexport(ptr) or the block's
 * free; keep the block allocated until every importer closed its mapping (memory still mapped
 * elsewhere lives on, but the pool reuses the block). Exporting lets other processes of this user
 * take this process's descriptors under Yama's ptrace_scope 1 (prctl PR_SET_PTRACER_ANY), as
 * importers must; while any block is exported, every free also takes the exports' lock.
 * mgm_ipc_import: in another process, the block of `token` mapped for `device` (this process's
 * ordinal of the same GPU); NULL on failure (the exporter gone, the block no longer exported, no
 * permission to take its descriptors: pidfd_getfd needs the same user).
 * mgm_ipc_close: unmaps what mgm_ipc_import mapped. Order work across processes yourself (an IPC
 * event, or a host handshake): the pools order nothing between processes. 0, or -1. */
MGM_C_API const char* mgm_ipc_export(void* ptr, int device);
MGM_C_API int mgm_ipc_unexport(void* ptr);
MGM_C_API void* mgm_ipc_import(const char* token, int device);
MGM_C_API int mgm_ipc_close(void* ptr);

#ifdef __cplusplus
}
#endif

#endif /* MGM_C_MULTIGPUMEM_H */
