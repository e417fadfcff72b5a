// The parts of the training-trace generator (src/trace/generator*.cpp) they share: the layer
// table reader's helpers, the emitter of allocations and frees, cuDNN's workspaces, the walk's
// pieces; and the two models, CNN (generator_cnn.cpp) and BERT (generator_bert.cpp). Internal.
#pragma once

#include "../detail/text.hpp"


#include <mgm/error.hpp>
#include <mgm/trace/generator.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <fstream>
#include <istream>
#include <span>
#include <sstream>
#include <string>
#include <unordered_map>

namespace mgm::tracegen_detail {

using namespace mgm;

// ---- the table reader ----------------------------------------------------------------------------

[[noreturn]] inline void fail(const std::string& name, std::size_t line, std::size_t column, const std::string& why) {
  throw parse_error::at("layer table '" + name + "'", line, column, why);
}

inline std::string_view trim(std::string_view s) { return mgm::detail::trim_blanks(s); }

// Splits one CSV line; a field may be quoted ("a, b"), with "" for a quote inside. Returns false on
// an unterminated quote.
inline bool split_csv(std::string_view line, std::vector<std::string>& fields) {
  fields.clear();
  std::string field;
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back(trim(field));
      field.clear();
    } else {
      field += c;
    }
  }
  fields.emplace_back(trim(field));
  return !quoted;
}

inline bool parse_size(std::string_view s, std::size_t& out) {
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && end == s.data() + s.size();
}

constexpr std::array<std::string_view, 18> known_ops{
    "input", "conv", "bn", "relu", "relu_inplace", "maxpool", "maxpool_indices_int64", "add_inplace",
    "adaptive_avgpool", "view", "linear", "log_softmax",
    // BERT's table
    "embedding", "layernorm", "dropout", "matmul+softmax", "matmul", "gelu"};

// Checks a shape `L x 768` / `12 x L x L` / `768`: factors separated by `x`, each a positive
// integer or `L`.
inline bool valid_shape(std::string_view shape) {
  if (trim(shape).empty()) return false;
  while (!shape.empty()) {
    const auto x = shape.find('x');
    const auto factor = trim(shape.substr(0, x));
    std::size_t v = 0;
    if (factor != "L" && (!parse_size(factor, v) || v == 0)) return false;
    if (x == std::string_view::npos) break;
    shape.remove_prefix(x + 1);
    if (trim(shape).empty()) return false;
  }
  return true;
}

// ---- the generator's state -----------------------------------------------------------------------

constexpr std::size_t block_bytes = 512;  // the caching allocator rounds every request up to 512 B

inline std::size_t round_block(std::size_t bytes) noexcept {
  return std::max(block_bytes, (bytes + block_bytes - 1) / block_bytes * block_bytes);
}

struct tensor {
  std::size_t bytes{0};
  std::uint64_t pointer{0};
  int refs{0};       // holders: nodes that saved it, pending gradient consumers, the loop
  bool live{false};
};

using tensor_id = std::size_t;
constexpr tensor_id no_tensor = static_cast<tensor_id>(-1);

class emitter {
 public:
  emitter(trace& t, const training_options& o) : trace_{t}, options_{o} {}

  tensor_id alloc(std::size_t bytes, int refs = 0) {
    const std::size_t size = round_block(bytes);
    tensors_.push_back(tensor{size, next_pointer_, refs, true});
    next_pointer_ += 0x200;
    event(trace_event::action_type::allocate, tensors_.back());
    return tensors_.size() - 1;
  }
  void free(tensor_id id) {
    auto& t = tensors_.at(id);
    if (!t.live) throw logic_error{"mgm::generate_training_trace: internal error, double free"};
    t.live = false;
    event(trace_event::action_type::free, t);
  }
  // A temporary: allocated and freed at once (workspaces, counters).
  void temporary(std::size_t bytes) {
    if (bytes > 0) free(alloc(bytes));
  }
  void hold(tensor_id id) {
    if (id != no_tensor) ++tensors_.at(id).refs;
  }
  // Drops one holder; frees when none is left.
  void release(tensor_id id) {
    if (id == no_tensor) return;
    auto& t = tensors_.at(id);
    if (--t.refs <= 0 && t.live) free(id);
  }
  // Frees a tensor nobody holds (a forward intermediate nothing saved).
  void drop_if_unheld(tensor_id id) {
    if (id != no_tensor && tensors_.at(id).refs <= 0 && tensors_.at(id).live) free(id);
  }
  [[nodiscard]] std::size_t bytes(tensor_id id) const { return tensors_.at(id).bytes; }

 private:
  void event(trace_event::action_type a, const tensor& t) {
    trace_event e;
    e.thread = options_.thread;
    e.seconds = static_cast<double>(trace_.events.size()) * 1e-6;  // 1 µs per event
    e.action = a;
    e.pointer = t.pointer;
    e.bytes = t.bytes;
    e.stream = options_.stream;
    trace_.events.push_back(e);
  }

  trace& trace_;
  const training_options& options_;
  std::vector<tensor> tensors_;
  std::uint64_t next_pointer_{0x10000000};
};

// ---- cuDNN workspaces ------------------------------------------------------------------------------
//
// What cudnn.benchmark picks on a Volta-class GPU, reduced to a rule on the layer's shape
// (C input channels, K output channels, k×k kernel, stride s, Ho×Wo output, N batch, e bytes/elem):
// - 3×3, stride 1: Winograd non-fused F(4×4, 3×3) when C and K ≥ 128 (forward and backward-data),
//   and always for backward-filter. Its workspace holds the transformed filter and the transformed
//   input and output tiles, 6×6 values each:  e·36·(K·C + N·C·T + N·K·T),  T = ⌈Ho/4⌉·⌈Wo/4⌉.
// - 1×1, stride 1: a plain GEMM, no forward workspace. Backward-data over a large map (input
//   ≥ 28×28) transposes the gradient first: a workspace the size of the input gradient.
// - Anything else (the 7×7 stem, stride-2, 3×3 with fewer than 128 channels): implicit-precomputed
//   GEMM, whose workspace is its offset table: 4 B per filter tap per output row,  4·C·k²·Ho.
// - Backward-filter of a stride-2 conv, or over a map of at most 7×7 (little N·H·W to reduce over),
//   splits the reduction: a workspace of partial sums the size of the weight gradient,  e·K·C·k².
// None of this is exact (cuDNN's choice also depends on timing), see the comparison in the report
// of the real ResNet-50 trace in tests/unit/generator_test.cpp.
struct conv_shape {
  std::size_t c, k_out, kernel, stride, ho, wo, hi, wi, n, e;
};

inline std::size_t winograd_bytes(const conv_shape& s) {
  const std::size_t tiles = ((s.ho + 3) / 4) * ((s.wo + 3) / 4);
  return s.e * 36 * (s.k_out * s.c + s.n * s.c * tiles + s.n * s.k_out * tiles);
}
inline std::size_t precomp_bytes(const conv_shape& s) { return 4 * s.c * s.kernel * s.kernel * s.ho; }
inline bool winograd_ok(const conv_shape& s) { return s.kernel == 3 && s.stride == 1; }

inline std::size_t forward_workspace(const conv_shape& s) {
  if (winograd_ok(s) && s.c >= 128 && s.k_out >= 128) return winograd_bytes(s);
  if (s.kernel == 1 && s.stride == 1) return 0;
  return precomp_bytes(s);
}
inline std::size_t backward_data_workspace(const conv_shape& s) {
  if (winograd_ok(s)) return s.c >= 128 && s.k_out >= 128 ? winograd_bytes(s) : precomp_bytes(s);
  if (s.kernel == 1 && s.stride == 1 && s.hi * s.wi >= 28 * 28) return s.e * s.n * s.c * s.hi * s.wi;
  return 0;
}
inline std::size_t backward_filter_workspace(const conv_shape& s) {
  if (winograd_ok(s)) return winograd_bytes(s);
  if (s.stride >= 2 || s.ho * s.wo <= 49) return s.e * s.k_out * s.c * s.kernel * s.kernel;
  return 0;
}

// ---- the network walk ------------------------------------------------------------------------------

enum class node_kind { conv, bn, relu, maxpool, add, avgpool, linear };

struct node {
  node_kind kind{};
  const layer_row* row{nullptr};
  tensor_id input{no_tensor};       // saved input (conv, bn, maxpool, linear); result (relu)
  std::size_t input_bytes{0};       // the input's size: its gradient's
  tensor_id saved1{no_tensor};      // bn: mean; maxpool: indices; conv/linear under AMP: weight copy
  tensor_id saved2{no_tensor};      // bn: inverse std; linear under AMP: bias copy
  bool shortcut{false};             // a downsample row (its input is the block's input)
  bool block_first{false};          // the first row of a residual block
  bool input_needs_grad{true};      // false for the stem conv (its input is data)
  std::string block;
};

// "layer2.0.conv1" -> "layer2.0"; "conv1" -> "".
inline std::string block_of(const std::string& name) {
  const auto a = name.find('.');
  if (a == std::string::npos) return {};
  const auto b = name.find('.', a + 1);
  if (b == std::string::npos) return {};
  return name.substr(0, b);
}
inline bool is_shortcut(const std::string& name) { return name.find(".downsample") != std::string::npos; }

// The parameter tensors of a row (torchvision's): conv weight (+ bias), bn weight and bias,
// linear weight and bias. Each tensor is its own allocation.
inline std::vector<std::size_t> param_tensors(const layer_row& r) {
  if (r.params == 0) return {};
  if (r.op == "bn") return {r.params / 2, r.params - r.params / 2};
  if (r.op == "linear" && r.in_channels * r.out_channels < r.params)
    return {r.in_channels * r.out_channels, r.params - r.in_channels * r.out_channels};
  if (r.op == "conv" && r.in_channels * r.out_channels * r.kernel * r.kernel < r.params) {
    const std::size_t w = r.in_channels * r.out_channels * r.kernel * r.kernel;
    return {w, r.params - w};
  }
  return {r.params};
}

// optimizer.step() for one parameter tensor of `elems` elements, kept in `master_e`-byte elements.
// On the first step with persistent state the optimizer creates its state: SGD's momentum_buffer
// = clone(grad), Adam's exp_avg and exp_avg_sq = zeros_like(param), each kept. Every Adam step
// computes denom = (exp_avg_sq.sqrt() / sqrt(bias_correction2)).add_(eps): two temporaries
// (AdamW's decoupled weight decay, p.mul_(1 - lr*wd), is in place). SGD-momentum without weight
// decay (buf.mul_(m).add_(grad); p.add_(buf, alpha=-lr)) allocates nothing.
inline void optimizer_step(emitter& em, const training_options& o, std::size_t elems, std::size_t master_e, bool first) {
  if (o.persistent_state && first) {
    const int buffers = o.optimizer == optimizer_kind::adam ? 2 : 1;
    for (int k = 0; k < buffers; ++k) em.alloc(elems * master_e, 1);
  }
  if (o.optimizer == optimizer_kind::adam) {
    const auto root = em.alloc(elems * master_e);
    const auto denom = em.alloc(elems * master_e);
    em.free(root);
    em.free(denom);
  }
}

// The training loop's variables (x, y, out, loss...): rebinding one drops the previous step's tensor.
inline void rebind(emitter& em, std::vector<tensor_id>& loop, std::size_t k, tensor_id id) {
  if (loop.size() <= k) loop.resize(k + 1, no_tensor);
  const auto old = loop[k];
  loop[k] = id;
  em.release(old);
}

/// @brief The BERT layout (embeddings, encoder layers, pooler), as bert_base_layers.csv has it.
bool is_bert_table(const layer_table& table);

/// @brief Appends to `t` the training of a CNN (the rows are a torchvision ResNet's).
void run_cnn_model(const layer_table& table, const training_options& o, trace& t);

/// @brief Appends to `t` the training of a BERT encoder.
void run_bert_model(const layer_table& table, const training_options& o, trace& t);

}  // namespace mgm::tracegen_detail
