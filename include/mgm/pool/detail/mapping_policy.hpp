/// @file
/// @brief How much one growth of an expandable segment maps, and in what chunks (the policy of
/// `expandable_source`, which says why in its file comment). Pure arithmetic on byte counts.
#pragma once

#include <algorithm>
#include <cstddef>

namespace mgm::detail {

/// Sizes in bytes; `cap` is what the pool may hold (the device, or less under its limits) and
/// `avail` what a growth may map now. Every byte count it gives to map is whole granules.
struct mapping_policy {
  std::size_t granule;

  /// The physical chunk, the unit an idle block gives back under a capacity limit (a growth's last
  /// chunk also takes the tail, `expandable_source`):
  /// 1/`chunk_share` of the capacity (160 MiB of 80 GiB); and while what a growth may map
  /// (`avail`) is at least `room_factor` times what the segment has `mapped`, 1/`growth_share` of
  /// `mapped` when that is more: chunks grow with the range while memory is plentiful, since each
  /// cuMemCreate costs about 143 us whatever its size. Near a limit they stay small: a chunk is
  /// also what an idle block must cover whole to be given back. Measured (`mgm replay --fit`, the
  /// smallest capacity that runs a trace, over its peak live bytes): with one chunk per growth, U-Net 1.024,
  /// the generated ResNet-50 1.014, GPT-2 1.084 and GPT 1.3B 1.021; with 1/512, 1.003, 1.008, 1.010
  /// and 1.003. Growing chunks (`scripts/bench`, 6 iterations, typical model, no cap): creates
  /// ResNet-32 95 -> 64, U-Net 72 -> 53, GPT 1.3B 305 -> 246, GPT 2.7B 312 -> 248, modelled driver
  /// seconds 0.0715 -> 0.0671, 0.0586 -> 0.0559, 0.2786 -> 0.2701, 0.4487 -> 0.4395; reserved /
  /// live, late calls (also at 1.05 x peak live) and every fit as before but U-Net's, 1.0030 ->
  /// 1.0057. Room for 2x (not 4x) gave GPT 1.3B 182 creates but fits of 1.0138 (GPT 1.3B) and
  /// 1.0147 (2.7B); 1/`growth_share` of 1 (a chunk per growth) a U-Net fit of 1.0244. Room for
  /// 8x, not 4x, since the huge range (`expandable_source`): U-Net's fit 1.0127 -> 1.0033 (its
  /// large range had an idle 84 MiB block at its limit that a 96 MiB chunk, shared with a live
  /// block, kept mapped; 5x gave 1.0127 too, 6x to 16x 1.0033), every other fit as before;
  /// creates GPT 1.3B 209 -> 229, 2.7B 215 -> 234, InceptionV4 55 -> 59 and DenseNet-121 54 ->
  /// 56, modelled driver seconds 0.2617 -> 0.2646, 0.4312 -> 0.4339, 0.0718 -> 0.0724 and 0.0714
  /// -> 0.0717 (their bounds 3.29, 3.55, 0.48 and 0.50), every other trace as before.
  [[nodiscard]] std::size_t largest_chunk(std::size_t cap, std::size_t avail, std::size_t mapped) const noexcept {
    constexpr std::size_t chunk_share = 512;
    constexpr std::size_t room_factor = 8;
    constexpr std::size_t growth_share = 16;
    const std::size_t grown = avail / room_factor >= mapped ? mapped / growth_share : 0;
    return std::max(granule, std::max(cap / chunk_share, grown) / granule * granule);
  }

  /// Whether mapping `bytes` of `avail` would leave less than 1/`near_full_share` of `cap`
  /// available: near the device's end, or near the pool's limit.
  [[nodiscard]] static bool near_full(std::size_t cap, std::size_t avail, std::size_t bytes) noexcept {
    return avail < bytes + margin(cap);
  }
  /// What stays available near full: 1/`near_full_share` of the capacity.
  [[nodiscard]] static std::size_t margin(std::size_t cap) noexcept {
    constexpr std::size_t near_full_share = 32;
    return cap / near_full_share;
  }

  /// Near full, what a growth maps: the `bytes` it needs and a pad, the lesser of 1/`pad_share` of
  /// what would stay available and 1/`growth_share` of the growth. A training step's second pass
  /// differs a little from its first (the first left its blocks in other places), and what it
  /// lacks then costs a growth every pass; the pad takes it, while nearly all the rest stays
  /// available. Measured with `scripts/bench`: at a capacity of 1.05 x peak live, GPT 1.3B from 11
  /// late driver calls to 0; `mgm replay --fit` as before on every trace (without the bound by the
  /// growth, the transformer's fit rose from 1.0024 to 1.0028).
  [[nodiscard]] std::size_t padded(std::size_t avail, std::size_t bytes) const noexcept {
    constexpr std::size_t pad_share = 64;
    constexpr std::size_t growth_share = 32;
    return avail > bytes ? bytes + std::min((avail - bytes) / pad_share, bytes / growth_share) / granule * granule : bytes;
  }

  /// What a growth of a segment with `mapped` bytes mapped, `free` of them free, may map for a
  /// request of `size` bytes, the request included: as much as leaves the segment's free mapped
  /// bytes F' at most its mapped bytes M' / map_ahead_share. With F free and M mapped now, mapping
  /// m bytes gives M' = M + m and F' = F + m - size, so m <= (M + share (size - F)) / (share - 1).
  /// Rounded down, and never into the near-full margin (0 when nothing fits: the caller maps the
  /// request alone). Measured and left out (`scripts/bench` traces, 6 iterations, typical model):
  /// a share of 24 cut ResNet-32's growths 48 -> 40 (1.122 x its floor, still over 1.1) but raised
  /// reserved / live to 1.045 (BERT-base, from 1.034); 16, to 32 growths, took five traces over
  /// 1.05; mapping ahead room for one more request of the same size (bounded by 1/20 of the range)
  /// gave ResNet-32 42 growths and BERT-base 1.054. The growths of a forward pass are one per
  /// large request once the free mapped bytes, held near 1/32 of the range, are less than it.
  /// Also left out: what is mapped ahead rounded down to whole requests of the size (ahead that
  /// serves no request is only waste): at this share ResNet-32 48 -> 49 growths and GPT 1.3B
  /// 1.018 -> 1.036; at 1/16, 36 growths (0.0628 s, still above 1.1 x its floor) with the DTR
  /// transformer at 1.053, GPT-2 124M 1.054 and the generated ResNet-50 1.054; at 1/20, 39
  /// growths and GPT 2.7B 1.056. ResNet-32's trace is one forward pass whose 171 MiB requests
  /// each need a growth until the range holds 32 of them: under the memory target its growths
  /// stay near 48 (0.0647 s against a bound of 0.0623). Also left out, a streak bet: after the
  /// k-th growth in a row for the same size, map one more request of it (one chunk per growth
  /// while 8x the mapped bytes stay available, requests up to 1/64 of the capacity). At k = 3 it
  /// met every target, ResNet-32 at 30 growths and 0.0601 s against 0.0607 (its floor falls with
  /// its reserved bytes); but a bet that loses, at the end of a streak, leaves a whole request
  /// mapped, and which streaks end so depends on their lengths: at k = 2 and 4, BERT-base's four
  /// 476 MiB growths left one unused (reserved / live 1.030 -> 1.130), and U-Net (k = 4) 1.077
  /// and the generated ResNet-50 (k = 2) 1.053. At k = 5, 6 and 8, ResNet-32 at 1.00, 1.00 and
  /// 1.005 of its bound. Bounding the loss (the request at most 1/16 of the mapped bytes) leaves
  /// ResNet-32's first 17 growths, its 171 MiB ones, unbet. Without the bound by the capacity,
  /// U-Net's fit was 1.0112.
  /// Why no policy meets ResNet-32's bound under the memory target: `least_growth_driver_time`
  /// (include/mgm/trace/growth_bound.hpp; `mgm replay`'s LEAST s) gives the least any allocator
  /// that grows ranges can take while reserved stays within 1.05 x peak live after each growth,
  /// packing perfectly: 37 growths and 1.107 x its own floor, above the 1.1 the bound allows;
  /// within 1.0324 (the pool's reserved / live there), 47 growths to the pool's 48. It falls under
  /// 1.1 only from about 1.06 (34 growths, 1.099).
  [[nodiscard]] std::size_t ahead_bytes(std::size_t cap, std::size_t avail, std::size_t mapped, std::size_t free,
                                        std::size_t size) const noexcept {
    constexpr std::size_t map_ahead_share = 32;
    std::size_t budget = mapped;  // M + share (size - F), when positive
    if (size >= free) {
      budget += map_ahead_share * (size - free);
    } else if (budget > map_ahead_share * (free - size)) {
      budget -= map_ahead_share * (free - size);
    } else {
      return 0;
    }
    const std::size_t m = budget / (map_ahead_share - 1) / granule * granule;
    return std::min(m, avail > margin(cap) ? (avail - margin(cap)) / granule * granule : 0);
  }
};

}  // namespace mgm::detail
