/// @file
/// @brief Pooled blocks shared with another process: `shared_block`, what the exporting process
/// hands over (`caching_pool::export_block`), and two ways to hand it over: a Unix socket, or a
/// text token the other process opens from this one's descriptors. `imported_block` maps it there.
///
/// A block is backed by the physical chunks of its pool's expandable segment; CUDA maps a chunk
/// only whole, so the importer maps every chunk the block touches, in order, and finds the block
/// at `offset`. It can therefore also read the neighbours that share those chunks, as with
/// `cudaIpcGetMemHandle` and a `cudaMalloc` allocation.
///
/// **The contract.** The block stays the exporter's: it must stay allocated until every importer
/// has released its `imported_block` (the pool reuses it once freed; its memory itself lives
/// until the last mapping goes, as the driver keeps it). Order the importer's work after the
/// exporter's with an IPC event or a host handshake: the pool orders nothing across processes.
#pragma once

#include <mgm/device.hpp>
#include <mgm/unique_fd.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace mgm {

/// @brief One physical chunk behind a shared block: its descriptor (POSIX, from
/// `cuMemExportToShareableHandle` or the simulator's memfd) and its size.
struct shared_chunk {
  unique_fd fd;
  std::size_t bytes{0};
};

/// @brief A pooled block as another process needs it: the chunks behind it, in address order,
/// and where the block lies in them. Owns the descriptors. Move-only.
struct shared_block {
  device_id device{0};
  std::size_t offset{0};  ///< of the block from the start of the first chunk
  std::size_t size{0};    ///< of the block, as allocated (rounded)
  std::vector<shared_chunk> chunks;

  /// @brief Σ chunk bytes: the address space an importer maps.
  [[nodiscard]] std::size_t mapped_bytes() const noexcept;
  /// @brief @throws mgm::logic_error naming what is wrong: no chunks, a closed descriptor, a
  /// chunk of 0 bytes, or a block that does not lie inside its chunks.
  void validate() const;
};

/// @brief Sends `b` over the connected Unix socket `socket` (its descriptors as `SCM_RIGHTS`, in
/// messages of at most 250). `b` keeps its own descriptors. @throws std::system_error.
void send_shared_block(int socket, const shared_block& b);
/// @brief Receives what `send_shared_block` sent. @throws std::system_error for a socket error or
/// a closed peer; mgm::logic_error for a message that is not a shared block.
[[nodiscard]] shared_block receive_shared_block(int socket);

/// @brief `b` as one line of text naming this process and its descriptors
/// (`mgm-ipc1:pid:device:offset:size:fd/bytes/st_dev/st_ino,...`), for a channel that carries only
/// bytes (a pickle, an environment variable). The descriptors must stay open here, in `b`, until
/// the other process has opened the token. @throws std::system_error when `fstat` fails.
[[nodiscard]] std::string shared_block_token(const shared_block& b);
/// @brief The block a token names, with the exporting process's descriptors copied into this one
/// (`pidfd_getfd`: Linux 5.6, and permission to trace the exporter: the same user, and under
/// Yama's `ptrace_scope` 1 the exporter's consent, `prctl(PR_SET_PTRACER, importer)`, or the
/// importer its ancestor). Each descriptor must still be the file the token names (its device and
/// inode), so a token whose descriptors were closed and their numbers reused fails.
/// @throws mgm::logic_error for a malformed token; std::system_error naming the process when it
/// is gone, its descriptors cannot be taken, or they are no longer the block's.
[[nodiscard]] shared_block open_shared_block_token(std::string_view token);
/// @brief Lets other processes of this user take this process's descriptors for its tokens where
/// Yama's `ptrace_scope` is 1 (`prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)`: they may then also
/// trace it, as they may everywhere without Yama). Returns false where the kernel refused (no
/// Yama: nothing was needed).
bool allow_token_imports() noexcept;

}  // namespace mgm
