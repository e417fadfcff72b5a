/// @file
/// @brief Synthetic training allocation traces of a GPT-style decoder-only transformer.
///
/// The model is GPT-2's layout, as nanoGPT writes it in PyTorch: token and position embeddings,
/// `layers` pre-LayerNorm blocks (LayerNorm, one fused QKV linear, scaled-dot-product attention with
/// the flash kernel (causal; it keeps the output and its log-sum-exp, never the T×T scores), an output
/// projection, a residual add; LayerNorm, a 4× MLP with GELU, a residual add), a final LayerNorm and
/// an LM head tied to the token embedding. Dropout is 0, as in pretraining. Linear layers have biases.
///
/// Behaviour, per step (on top of the rules of generator.hpp: requests rounded to 512 B, the loop's
/// variables `idx, targets` and `logits, loss` dropping the previous step's):
/// - forward: each op's output and what its backward keeps (LayerNorm: input, mean and rstd in fp32;
///   a linear: its input; GELU: its input; attention: Q, K, V (the QKV tensor), output, log-sum-exp);
///   with `activation_checkpointing` a block keeps only its input, and backward runs its forward
///   again before its backward;
/// - the loss: cross-entropy over the vocabulary in fp32 (log-softmax kept for backward);
/// - backward, blocks in reverse: each input gradient, each weight gradient (the first gradient of a
///   parameter becomes its `.grad`; the embedding's second one, through the tied head, is summed
///   into it and freed);
/// - under AMP (`training_options::mixed_precision` with fp16/bf16): weights, `.grad` and optimizer
///   state fp32; each linear casts its weight to the dtype in forward (kept until its backward), and
///   a weight's gradient is computed in the dtype, then cast to the fp32 `.grad`;
/// - the optimizer (`training_options::optimizer`; AdamW has Adam's buffers: weight decay is in
///   place) steps each parameter tensor, then `zero_grad()` frees every `.grad` (set_to_none, the
///   default since PyTorch 2.0), so each backward allocates them again.
///
/// Invariants: those of generator.hpp; `parameter_count()` counts the tied head once.
#pragma once

#include <mgm/trace/generator.hpp>
#include <mgm/trace/trace.hpp>

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace mgm {

/// @brief The shape of a GPT-style model.
struct gpt_config {
  std::string name{"gpt"};
  std::size_t layers{12};
  std::size_t hidden{768};       ///< d_model
  std::size_t heads{12};         ///< must divide `hidden`
  std::size_t vocabulary{50257};
  std::size_t context{1024};     ///< positions: the most tokens per sample
  bool activation_checkpointing{false};

  /// @brief Parameters, the tied head counted once: V·d + P·d + L·(12·d² + 13·d) + 2·d.
  [[nodiscard]] std::size_t parameter_count() const noexcept;
  /// @throws mgm::logic_error for a zero dimension or `heads` that do not divide `hidden`.
  void validate() const;
};

/// @brief The configurations compiled in: "gpt2-124m" (12 × 768 × 12, GPT-2), "gpt-1.3b"
/// (24 × 2048 × 16) and "gpt-2.7b" (32 × 2560 × 32) of the GPT-3 paper's Table 2.1 (2048 positions),
/// all with GPT-2's vocabulary of 50257.
[[nodiscard]] std::span<const std::string_view> builtin_gpt_configs() noexcept;
/// @throws mgm::logic_error for another name.
[[nodiscard]] gpt_config builtin_gpt_config(std::string_view name);

/// @brief The allocation trace of `options.iterations` training steps of `model`, with
/// `options.sequence_length` tokens per sample.
/// @throws mgm::logic_error for a batch size or iteration count of 0, a sequence length of 0 or
/// above `model.context`, or an invalid `model`.
[[nodiscard]] trace generate_gpt_trace(const gpt_config& model, const training_options& options);

/// @brief The size of each of the two allocations that start a step of a GPT trace (`idx` and
/// `targets`, batch × sequence int64, rounded to 512 B): the marker `training_step_stats` splits on,
/// two per step.
[[nodiscard]] std::size_t gpt_input_bytes(const training_options& options);

}  // namespace mgm
