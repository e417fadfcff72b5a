/// @file
/// @brief Synthetic training allocation traces generated from a layer table (ResNet family, BERT-base).
///
/// Glossary
/// - *layer table*: one row per layer of a network (`data/arch/*_layers.csv`): op, channels, kernel,
///   stride, output size per sample, parameter count, what backward keeps. `builtin_layer_table()`
///   returns the ResNet-50 / ResNet-152 / BERT-base tables compiled into the library. BERT's table gives
///   each row's output as a shape (`out_shape_per_sample`, `L x 768`, `12 x L x L`) in the sequence
///   length `L` instead of a count.
/// - *step*: one training iteration: input batch, forward, loss, backward, optimizer step.
/// - *block*: a residual block, named by the first two parts of its rows' names (`layer2.0`).
///
/// Behaviour: the trace is the allocation stream of PyTorch's caching allocator (as its profiler
/// records it) for one process training the network, in PyTorch's order:
/// - the loop's `x, y = batch.to(gpu)` allocates input and labels, then drops the previous step's;
///   likewise `out = model(x)` and `loss = crit(out, y)` drop the previous logits and loss. The loop's
///   four references outlive the step; the last step's are freed at the end of the trace.
/// - forward: per layer its output, what it saves for backward (`saved_for_backward`), in-place ops
///   (`relu_inplace`, `add_inplace`, `view`) allocate nothing; a convolution's cuDNN workspace is
///   allocated after its output and freed at once (rule in generator.cpp); batch norm allocates
///   `num_batches_tracked + 1` (512 B), its output, and its saved mean and inverse std (fp32).
/// - backward, layers in reverse: each op's input gradient, its weight-gradient temporaries (summed
///   into `.grad` and freed: `zero_grad()` zeroes, it does not free), workspaces, then the incoming
///   gradient and the saved tensors no later node needs. A residual block sums its two input
///   gradients into a new tensor.
/// - persistent state (`training_options::persistent_state`): weights and BN buffers before the first
///   step; on the first step the weight gradients become `.grad` (kept) and the optimizer allocates its
///   state (SGD-momentum one buffer per parameter tensor, Adam two). Without it the trace holds only
///   what a step allocates and frees, as a profiler started after warm-up sees.
/// - sizes are the caching allocator's: requests rounded up to 512 B (minimum 512 B).
///
/// BERT (a table whose rows are `embedding`, `layernorm`, `linear`, ...: `bert-base`): the rules of
/// generator.cpp's section "BERT"; one step is masked-language-model training of BertModel with its
/// decoder tied to the word embeddings, `training_options::sequence_length` tokens per sample.
///
/// Invariants: every free names a live allocation of the same size; pointers are never reused;
/// time grows by 1 µs per event; with `persistent_state == false` every step is net zero.
#pragma once

#include <mgm/trace/trace.hpp>

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mgm {

/// @brief One row of a layer table. Counts are per sample (no batch dimension).
struct layer_row {
  std::size_t line{0};                  ///< the line of the file it came from (1-based)
  std::size_t index{0};
  std::string name;
  std::string op;                       ///< input, conv, bn, relu, relu_inplace, maxpool, ...
  std::size_t in_channels{0};
  std::size_t out_channels{0};
  std::size_t kernel{0};
  std::size_t stride{1};
  std::size_t out_h{0};
  std::size_t out_w{0};
  std::size_t out_elems_per_sample{0};  ///< 0 when the table gives `out_shape` instead
  std::string out_shape;                ///< `L x 768`: factors separated by `x`, `L` the sequence length
  std::size_t params{0};
  std::size_t buffers{0};
  std::string saved_for_backward;       ///< free text: `yes (...)`, `no (...)`, `aliases ...` (or `note`)
  /// @brief Elements per sample for a sequence length: `out_elems_per_sample`, or the product of
  /// `out_shape`'s factors with `L` = `sequence_length`.
  [[nodiscard]] std::size_t elems_per_sample(std::size_t sequence_length) const;
};

/// @brief A network as a list of layers in forward order.
struct layer_table {
  std::string name;
  std::vector<layer_row> layers;
  /// @brief Σ params over the rows.
  [[nodiscard]] std::size_t parameter_count() const noexcept;
};

/// @brief Reads a layer table CSV. The header names the columns (any order); `name`, `op`,
/// `out_elems_per_sample` or `out_shape_per_sample` (BERT's format: `L x 768`), and `params` are
/// required, `idx`, `in_channels`, `out_channels`, `kernel`, `stride`, `out_h`, `out_w`, `buffers`,
/// `saved_for_backward` (or `note`) optional. Quoted fields, CRLF and blank lines are accepted.
/// @throws mgm::parse_error naming the line (and column) of a bad row, an unknown op, a missing
/// column, or an empty table.
[[nodiscard]] layer_table read_layer_table(std::istream& in, std::string name = "layers");
/// @throws mgm::parse_error as above; mgm::logic_error when the file cannot be opened.
[[nodiscard]] layer_table read_layer_table_file(const std::string& path);

/// @brief The tables compiled into the library: "resnet50", "resnet152", "bert-base".
[[nodiscard]] std::span<const std::string_view> builtin_layer_tables() noexcept;
/// @throws mgm::logic_error for another name.
[[nodiscard]] layer_table builtin_layer_table(std::string_view model);

enum class training_dtype { fp32, fp16, bf16 };
enum class optimizer_kind { sgd_momentum, adam };

/// @brief "fp32", "fp16", "bf16" (also "float32", "float16", "half", "bfloat16").
/// @throws mgm::logic_error for another name.
[[nodiscard]] training_dtype parse_training_dtype(std::string_view name);
/// @brief 4 for fp32, 2 for fp16 and bf16.
[[nodiscard]] std::size_t bytes_per_element(training_dtype dtype) noexcept;

struct training_options {
  std::size_t batch_size{32};
  training_dtype dtype{training_dtype::fp32};   ///< of activations, gradients and workspaces
  /// With fp16/bf16: AMP (autocast): weights, `.grad` and optimizer state stay fp32 (the master
  /// copy); each step casts every conv/linear weight to `dtype` (freed after that layer's backward),
  /// the input batch arrives fp32 and is cast before the first conv, and the loss runs in fp32.
  /// `false`: the whole model is `dtype` (`model.half()`). Ignored for fp32.
  bool mixed_precision{true};
  std::size_t iterations{1};                     ///< steps
  bool persistent_state{true};                   ///< weights, `.grad`, optimizer state in the trace
  optimizer_kind optimizer{optimizer_kind::sgd_momentum};
  std::size_t sequence_length{128};              ///< tokens per sample (BERT only; at most 512)
  std::uint64_t stream{0};
  std::uint64_t thread{0};
};

/// @brief The allocation trace of `options.iterations` training steps of `table`.
/// @throws mgm::logic_error for a batch size or iteration count of 0, or a table the generator
/// cannot follow (no `input` row first, a `bn` with nothing before it, no `linear` classifier; for
/// BERT a missing row of the embeddings or of an encoder layer, or a sequence length of 0 or > 512).
[[nodiscard]] trace generate_training_trace(const layer_table& table, const training_options& options);

/// @brief The size of the allocation that starts each step of a generated trace (the input batch,
/// rounded to 512 B; BERT's input ids, N·L int64): the marker `training_step_stats` splits on.
[[nodiscard]] std::size_t training_input_bytes(const layer_table& table, const training_options& options);

/// @brief What one step of a trace allocates.
struct step_stats {
  std::size_t allocations{0};
  std::size_t frees{0};
  std::size_t allocated_bytes{0};   ///< Σ bytes of the step's allocations
  std::size_t peak_bytes{0};        ///< the most live bytes above the step's start, within the step
};

/// @brief How many consecutive marker-sized allocations start a step of a generated trace: 1 for
/// ResNet (the input batch), 3 for BERT (input ids, attention mask and labels, all N·L int64: one
/// alone can share its size with a bias gradient, e.g. 768 fp32 at N·L = 384).
[[nodiscard]] std::size_t training_step_markers(const layer_table& table);

/// @brief Splits a trace into steps, each starting at the first of `markers_per_step` consecutive
/// allocations (no event between) of exactly `marker_bytes` (the input batch); events before the
/// first step (setup) belong to no step. For a real trace, `marker_bytes` is its first allocation's
/// size.
[[nodiscard]] std::vector<step_stats> training_step_stats(const trace& t, std::size_t marker_bytes,
                                                          std::size_t markers_per_step = 1);

}  // namespace mgm
