/// @file
/// @brief `pool_options`: the caching pool's size policy and limits, and `MGM_ALLOC_CONF`.
#pragma once

#include <cstddef>
#include <limits>
#include <string>
#include <string_view>

namespace mgm {

/// @brief How a `caching_pool` sizes its segments and blocks. Defaults follow PyTorch's caching
/// allocator, except the rounding (256 B, CUDA's alignment, instead of 512 B).
///
/// `MGM_ALLOC_CONF` sets them as `key:value,...` (as `PYTORCH_CUDA_ALLOC_CONF` does), sizes as
/// `parse_bytes` reads them: `round`, `small_request`, `small_segment`, `large_segment`,
/// `large_direct`, `segment_round`, `max_split_size` (also PyTorch's `max_split_size_mb`, a
/// number of MiB), `release_threshold`, `map_chunk`, `huge_request`, and `expandable_segments`, `shareable` and
/// `check_invariants` (`True`/`False`).
/// The other keys of `PYTORCH_CUDA_ALLOC_CONF` (`garbage_collection_threshold`,
/// `roundup_power2_divisions`, `backend`, ...) are refused by name, each with the reason.
struct pool_options {
  static constexpr std::size_t unlimited = std::numeric_limits<std::size_t>::max();

  std::size_t round_bytes{256};                         ///< every block is a multiple (a power of two >= 256)
  std::size_t small_request_bytes{std::size_t{1} << 20};  ///< requests up to this come from small segments
  std::size_t small_segment_bytes{std::size_t{2} << 20};  ///< the size of a small segment (twice on a large device)
  std::size_t large_segment_bytes{std::size_t{20} << 20};  ///< the smallest large segment
  std::size_t large_direct_bytes{std::size_t{10} << 20};   ///< requests from here get a segment of their own size
  std::size_t segment_round_bytes{std::size_t{2} << 20};   ///< large segments are multiples of this
  /// Blocks of plain segments this large are never split for smaller requests (PyTorch's
  /// `max_split_size_mb`). Blocks of expandable segments split for any request: their rests merge back.
  std::size_t max_split_bytes{unlimited};
  std::size_t release_threshold_bytes{unlimited};  ///< reserved memory above this is released after frees
  /// Expandable segments: the largest chunk one growth maps with one `create` and one `map` (a
  /// growth is mapped in chunks of at most this, whole granules). A chunk is also what an idle
  /// block gives back whole, so larger chunks mean fewer driver calls and coarser release. By
  /// default only the pool's own cap applies: 1/512 of the device (see expandable_source.hpp for
  /// the policy and its measurements).
  std::size_t map_chunk_bytes{unlimited};
  /// Expandable segments: requests from this size on (a language model's logits and their
  /// gradients, whole-batch buffers) grow a range of their own, the *huge range*, where a block is
  /// placed away from a live predecessor of its size (see expandable_source.hpp); they take a free
  /// block of the large range only when their own range has none, and other requests take theirs
  /// only under pressure. `unlimited`: no huge range.
  std::size_t huge_request_bytes{std::size_t{512} << 20};
  /// Grow segments by mapping 2 MiB granules into one reserved range per stream and size class,
  /// where the upstream offers virtual memory (`mgm::vmm_allocator`) and the device supports it.
  bool expandable_segments{true};
  /// The upstream's virtual memory is made shareable (`vmm_sharing::shareable`: NCCL-registrable,
  /// exportable to other processes with `caching_pool::export_block`). The pool does not read it:
  /// whoever makes the upstream from the options does (the C ABI, and through it the Python package).
  bool shareable{false};
  /// In builds without `NDEBUG`: every allocation and free ends with `caching_pool::check_invariants()`
  /// (a walk of every block: for tests and debugging). A broken invariant in a free terminates.
  bool check_invariants{false};

  /// @brief Options from `key:value,...` text, starting from the defaults.
  /// @throws mgm::parse_error naming the column of an unknown key or a bad value;
  /// mgm::logic_error when the result is inconsistent (see `validate`).
  [[nodiscard]] static pool_options parse(std::string_view conf);
  /// @brief `parse(getenv("MGM_ALLOC_CONF"))`, or the defaults when it is unset.
  [[nodiscard]] static pool_options from_env();
  /// @throws mgm::logic_error naming the option that breaks: `round_bytes` a power of two >= 256;
  /// every size a multiple of it; `small_request <= small_segment`; `small_segment <= large_segment`.
  void validate() const;
  /// @brief The options as `MGM_ALLOC_CONF` text.
  [[nodiscard]] std::string to_string() const;

  friend bool operator==(const pool_options&, const pool_options&) = default;
};

/// @brief Bounds on what a caching pool takes from its upstream, checked at every growth (set at
/// run time with `caching_pool::set_limits`; not part of `MGM_ALLOC_CONF`). A growth that would
/// break one is refused like the upstream's out-of-memory: the pool gives back what it holds idle
/// and tries again, then throws `mgm::out_of_memory` naming the limit. What a growth maps ahead of
/// the request (expandable segments) never breaks one.
struct pool_limits {
  /// The most bytes the pool holds reserved (a process's memory fraction, as
  /// `torch.cuda.set_per_process_memory_fraction` sets it).
  std::size_t max_reserved_bytes{pool_options::unlimited};
  /// The bytes the pool leaves free on its device (a placement reserve kept for others); checked
  /// where the upstream can say its free memory.
  std::size_t keep_free_bytes{0};

  friend bool operator==(const pool_limits&, const pool_limits&) = default;
};

}  // namespace mgm
