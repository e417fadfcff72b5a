// BERT in the training-trace generator: embeddings, encoder layers and pooler, forward, backward
// and the optimizer step, as PyTorch's caching allocator sees them.
#include "generator_parts.hpp"

namespace mgm::tracegen_detail {

namespace {

// ---- BERT ------------------------------------------------------------------------------------------
//
// One masked-language-model training step of HuggingFace's BertModel (post-LN, 12 layers) in
// PyTorch's order, N samples of L tokens, T = N·L tokens, H hidden, I intermediate, A heads, V
// vocabulary, e bytes per element. The table gives the layers and their output shapes; the rules
// below add what its rows leave implicit:
// - the loop: `batch = {k: v.to(gpu)}` allocates input ids, attention mask and MLM labels (int64,
//   T each) and drops the previous step's; token-type and position ids are the model's buffers.
// - the extended attention mask: `mask[:, None, None, :].to(dtype)`, `1.0 - m`, `* finfo.min`:
//   three N·L tensors, the last kept through the encoder's forward.
// - embeddings: word and token-type lookups (T·H each) summed into a new tensor, the position lookup
//   (L·H: position ids are [1, L]) added in place (`embeddings += position_embeddings`), LayerNorm,
//   dropout.
// - LayerNorm: its output, and the per-token mean and rstd (fp32, T each) saved with its input.
// - dropout (p > 0 in training): its output and a bool mask (1 B per element) saved for backward.
//   BertSelfOutput and BertOutput apply a dropout to their dense output before the residual add,
//   and the attention probabilities go through one: the table has no rows for these.
// - self-attention: Q, K, V linears (T·H each, their input saved once per linear); scores Q·Kᵀ
//   (N·A·L·L; bmm saves Q and K), `/ sqrt(H/A)` and `+ mask` each a new tensor, softmax (its result
//   saved), dropout (output saved by the second bmm, with V), context (T·H), then
//   `permute(0, 2, 1, 3).contiguous()` copies it (T·H, the output dense's saved input).
// - the residual add before each LayerNorm is a new tensor, which LayerNorm saves.
// - GELU saves its input (the intermediate dense's output), its output is the output dense's input.
// - pooler: dense on the first token and tanh (N·H each) run in forward, but the MLM loss does not use
//   the pooled output: no gradient reaches the pooler, so it gets no `.grad` and no optimizer state;
//   its graph (the saved encoder output) and output live until the next step rebinds `outputs`.
// - the MLM head is the decoder tied to the word embeddings (`logits = h · Wᵀ`, T·V, no new
//   parameter): HF's BertLMPredictionHead also has a transform (dense + GELU + LayerNorm, 592,128
//   parameters) and a decoder bias (30,522), not in the table and not modelled. The loss is
//   cross-entropy over all T·V logits (log_softmax + nll_loss as for ResNet; ignored labels change
//   no size). The tied weight's two gradients: the decoder's arrives first (it becomes `.grad` on the
//   first step with persistent state), the embedding's is summed into it and freed.
// - backward, layers in reverse: each op's input gradient, weight-gradient temporaries (as for
//   ResNet), then the incoming gradient and saved tensors no later node needs. The second bmm's
//   backward makes the gradients of the probabilities (N·A·L·L) and of V (T·H); V's linear runs after
//   Q's and K's gradients are made (autograd runs the higher sequence numbers first). A tensor with
//   several consumers (a layer's input: Q, K, V and the residual; the attention LayerNorm's output:
//   intermediate dense and residual) gets its gradients summed, each sum a new tensor.
// - embedding backward (embedding_dense_backward on CUDA): above 3072 indices it sorts them first:
//   the sorted indices and their order (int64, the index count each), then the weight gradient
//   (rows × H), then the two temporaries go (its smaller segment buffers are not modelled); up to
//   3072 indices a direct kernel needs only the weight gradient. The position embedding's incoming
//   gradient is first summed over the batch (L·H).
// - the step's marker (`training_step_markers`): the three N·L int64 batch tensors in a row.
// - AMP: each linear's weight and bias are cast to `dtype` (saved, freed after its backward) as for
//   ResNet; activations are `dtype` throughout. (Autocast really runs LayerNorm and softmax in fp32
//   and casts their outputs back per consumer: not modelled.)

// The rows of one encoder layer, found by their names' last parts.
struct bert_layer_rows {
  const layer_row* query{nullptr};
  const layer_row* key{nullptr};
  const layer_row* value{nullptr};
  const layer_row* scores{nullptr};
  const layer_row* context{nullptr};
  const layer_row* attention_output{nullptr};
  const layer_row* attention_norm{nullptr};
  const layer_row* intermediate{nullptr};
  const layer_row* gelu{nullptr};
  const layer_row* output{nullptr};
  const layer_row* output_norm{nullptr};
};

struct bert_rows {
  const layer_row* word{nullptr};
  const layer_row* position{nullptr};
  const layer_row* token_type{nullptr};
  const layer_row* norm{nullptr};
  const layer_row* dropout{nullptr};
  const layer_row* pooler{nullptr};
  std::vector<bert_layer_rows> layers;
};


[[noreturn]] void bert_fail(const layer_table& table, const std::string& why) {
  throw logic_error{"mgm::generate_training_trace: the BERT table '" + table.name + "' " + why};
}

bert_rows bert_structure(const layer_table& table) {
  bert_rows b;
  const std::string layer_prefix = "encoder.layer.";
  for (const auto& r : table.layers) {
    const auto& name = r.name;
    if (name == "embeddings.word") b.word = &r;
    else if (name == "embeddings.position") b.position = &r;
    else if (name == "embeddings.token_type") b.token_type = &r;
    else if (name == "embeddings.LayerNorm") b.norm = &r;
    else if (name == "embeddings.dropout") b.dropout = &r;
    else if (name == "pooler.dense") b.pooler = &r;
    else if (name.compare(0, layer_prefix.size(), layer_prefix) == 0) {
      const auto dot = name.find('.', layer_prefix.size());
      std::size_t k = 0;
      if (dot == std::string::npos || !parse_size(std::string_view{name}.substr(layer_prefix.size(), dot - layer_prefix.size()), k) ||
          k > b.layers.size())
        bert_fail(table, "has an encoder row out of order: '" + name + "'");
      if (k == b.layers.size()) b.layers.emplace_back();
      auto& l = b.layers[k];
      const std::string part = name.substr(dot + 1);
      const std::pair<const char*, const layer_row**> parts[] = {
          {"attention.self.query", &l.query},         {"attention.self.key", &l.key},
          {"attention.self.value", &l.value},         {"attention.scores", &l.scores},
          {"attention.context", &l.context},          {"attention.output.dense", &l.attention_output},
          {"attention.output.LayerNorm", &l.attention_norm}, {"intermediate.dense", &l.intermediate},
          {"intermediate.gelu", &l.gelu},             {"output.dense", &l.output},
          {"output.LayerNorm", &l.output_norm}};
      bool known = false;
      for (const auto& [suffix, slot] : parts) {
        if (part == suffix) {
          *slot = &r;
          known = true;
        }
      }
      if (!known) bert_fail(table, "has an encoder row the generator does not know: '" + name + "'");
    } else {
      bert_fail(table, "has a row the generator does not know: '" + name + "'");
    }
  }
  if (!b.word || !b.position || !b.token_type || !b.norm || !b.dropout)
    bert_fail(table, "lacks one of embeddings.word/position/token_type/LayerNorm/dropout");
  if (b.layers.empty()) bert_fail(table, "has no encoder layer");
  for (std::size_t k = 0; k < b.layers.size(); ++k) {
    const auto& l = b.layers[k];
    if (!l.query || !l.key || !l.value || !l.scores || !l.context || !l.attention_output || !l.attention_norm ||
        !l.intermediate || !l.gelu || !l.output || !l.output_norm)
      bert_fail(table, "lacks a row of encoder layer " + std::to_string(k));
  }
  return b;
}

// A linear's output features: its shape's last factor (`L x 768` -> 768). Its parameters are the
// weight (params - out) and the bias (out).
std::size_t linear_out_features(const layer_row& r) { return r.elems_per_sample(1); }

// The parameter tensors of a BERT row: embedding weight; LayerNorm weight and bias; linear weight
// and bias.
std::vector<std::size_t> bert_param_tensors(const layer_row& r) {
  if (r.params == 0) return {};
  if (r.op == "layernorm") return {r.params / 2, r.params - r.params / 2};
  if (r.op == "linear") {
    const std::size_t out = linear_out_features(r);
    if (out < r.params) return {r.params - out, out};
  }
  return {r.params};
}

class bert_model {
 public:
  bert_model(const layer_table& table, const training_options& o, trace& t)
      : table_{table}, rows_{bert_structure(table)}, o_{o}, em_{t, o} {
    e_ = bytes_per_element(o.dtype);
    amp_ = o.dtype != training_dtype::fp32 && o.mixed_precision;
    master_e_ = amp_ ? 4 : e_;
    hidden_ = rows_.word->elems_per_sample(1);
    if (hidden_ == 0 || rows_.word->params % hidden_ != 0 || rows_.position->params % hidden_ != 0)
      bert_fail(table, "has embeddings whose parameters are not rows of the hidden size");
    vocab_ = rows_.word->params / hidden_;
    max_positions_ = rows_.position->params / hidden_;
    if (o.sequence_length == 0 || o.sequence_length > max_positions_)
      throw logic_error{"mgm::generate_training_trace: the sequence length " + std::to_string(o.sequence_length) +
                        " is not in 1.." + std::to_string(max_positions_) + " (the position embeddings' rows)"};
  }

  void run() {
    if (o_.persistent_state) setup();
    for (std::size_t i = 0; i < o_.iterations; ++i) step(i == 0);
    for (auto id : loop_) em_.release(id);
  }

 private:
  // A linear op's forward record: what its backward needs.
  struct linear_node {
    const layer_row* row{nullptr};
    tensor_id input{no_tensor};
    std::size_t input_bytes{0};
    tensor_id weight_copy{no_tensor};  // AMP
    tensor_id bias_copy{no_tensor};    // AMP
    tensor_id out{no_tensor};
  };
  struct norm_node {
    const layer_row* row{nullptr};
    tensor_id input{no_tensor};
    tensor_id mean{no_tensor};
    tensor_id rstd{no_tensor};
    tensor_id out{no_tensor};
  };
  struct layer_state {
    linear_node q, k, v, attention_output, intermediate, output;
    tensor_id probs{no_tensor};          // softmax result
    tensor_id probs_mask{no_tensor};
    tensor_id probs_dropped{no_tensor};  // saved by the second bmm
    std::size_t scores_bytes{0};
    tensor_id attention_mask{no_tensor};  // the attention output's dropout mask
    norm_node attention_norm;
    tensor_id output_mask{no_tensor};
    norm_node output_norm;
  };

  std::size_t tokens() const { return o_.batch_size * o_.sequence_length; }
  std::size_t hidden_bytes() const { return tokens() * hidden_ * e_; }

  void setup() {
    // model.cuda(): parameters, then the buffers position_ids and token_type_ids (int64 [1, max]).
    for (const auto& r : table_.layers)
      for (auto p : bert_param_tensors(r)) em_.alloc(p * master_e_, 1);
    em_.alloc(max_positions_ * 8, 1);
    em_.alloc(max_positions_ * 8, 1);
  }

  void weight_gradient(std::size_t elems, std::size_t elem_bytes, bool keep) {
    const auto g = em_.alloc(elems * elem_bytes);
    if (amp_ && elem_bytes != 4) {
      // AMP: the half gradient is cast to the fp32 master's dtype before accumulation.
      const auto g32 = em_.alloc(elems * 4);
      em_.free(g);
      keep_or_free(g32, keep);
    } else {
      keep_or_free(g, keep);
    }
  }
  void keep_or_free(tensor_id g, bool keep) {
    if (o_.persistent_state && keep) em_.hold(g);
    else em_.free(g);
  }

  linear_node linear_forward(const layer_row& r, tensor_id input, std::size_t out_bytes) {
    linear_node nd;
    nd.row = &r;
    nd.input = input;
    nd.input_bytes = em_.bytes(input);
    em_.hold(input);
    if (amp_) {
      const auto p = bert_param_tensors(r);
      nd.weight_copy = em_.alloc(p.front() * e_, 1);
      if (p.size() > 1) nd.bias_copy = em_.alloc(p.back() * e_, 1);
    }
    nd.out = em_.alloc(out_bytes);
    return nd;
  }
  // Returns the input's gradient; releases the incoming gradient and what the node saved.
  tensor_id linear_backward(const linear_node& nd, tensor_id g, bool first) {
    const auto gi = em_.alloc(nd.input_bytes, 1);  // mm: grad of the input
    const auto p = bert_param_tensors(*nd.row);
    weight_gradient(p.front(), e_, first);  // mm: grad of the weight
    em_.release(g);
    for (std::size_t k = 1; k < p.size(); ++k) weight_gradient(p[k], e_, first);  // sum: bias
    em_.release(nd.input);
    em_.release(nd.weight_copy);
    em_.release(nd.bias_copy);
    return gi;
  }

  norm_node norm_forward(const layer_row& r, tensor_id input) {
    norm_node nd;
    nd.row = &r;
    nd.input = input;
    em_.hold(input);
    nd.out = em_.alloc(em_.bytes(input));
    nd.mean = em_.alloc(tokens() * 4, 1);  // per token, fp32 (the accumulation type)
    nd.rstd = em_.alloc(tokens() * 4, 1);
    return nd;
  }
  tensor_id norm_backward(const norm_node& nd, tensor_id g, bool first) {
    const auto gi = em_.alloc(em_.bytes(nd.input), 1);
    const auto p = bert_param_tensors(*nd.row);
    for (auto elems : p) weight_gradient(elems, master_e_, first);  // weight, bias
    em_.release(g);
    em_.release(nd.input);
    em_.release(nd.mean);
    em_.release(nd.rstd);
    return gi;
  }

  // Dropout: the output (returned) and its bool mask (saved, in `mask`); the input is dropped if
  // nobody holds it.
  tensor_id dropout_forward(tensor_id input, std::size_t elems, tensor_id& mask) {
    const auto out = em_.alloc(em_.bytes(input));
    mask = em_.alloc(elems, 1);  // bool, 1 B per element
    em_.drop_if_unheld(input);
    return out;
  }
  tensor_id dropout_backward(tensor_id g, tensor_id mask) {
    const auto gi = em_.alloc(em_.bytes(g), 1);  // grad * mask * scale
    em_.release(g);
    em_.release(mask);
    return gi;
  }
  // Two gradients of one tensor summed into a new one.
  tensor_id sum(tensor_id a, tensor_id b) {
    const auto s = em_.alloc(em_.bytes(a), 1);
    em_.release(a);
    em_.release(b);
    return s;
  }
  // embedding_dense_backward: (sorted indices and their order, int64), then the weight gradient.
  void embedding_backward(const layer_row& r, std::size_t indices, bool keep) {
    constexpr std::size_t direct_kernel_indices = 3072;  // PyTorch's threshold for the unsorted kernel
    if (indices <= direct_kernel_indices) {
      weight_gradient(r.params, master_e_, keep);
      return;
    }
    const auto sorted = em_.alloc(indices * 8);
    const auto order = em_.alloc(indices * 8);
    weight_gradient(r.params, master_e_, keep);
    em_.free(sorted);
    em_.free(order);
  }

  void step(bool first) {
    const std::size_t n = o_.batch_size;
    const std::size_t seq = o_.sequence_length;
    const std::size_t t = tokens();
    // ---- the loop: batch.to(gpu) ----
    // Allocated in a row (the step's marker), then the previous step's are dropped.
    const auto ids = em_.alloc(t * 8, 1);  // int64
    const auto mask = em_.alloc(t * 8, 1);
    const auto labels = em_.alloc(t * 8, 1);
    replace_loop(0, ids);
    replace_loop(1, mask);
    replace_loop(2, labels);

    // ---- forward ----
    tensor_id extended = no_tensor;
    {
      const auto cast = em_.alloc(n * seq * e_);  // mask[:, None, None, :].to(dtype)
      const auto inverted = em_.alloc(n * seq * e_);  // 1.0 - m
      em_.free(cast);
      extended = em_.alloc(n * seq * e_);  // * finfo.min
      em_.free(inverted);
    }
    const auto word = em_.alloc(hidden_bytes());
    const auto token_type = em_.alloc(hidden_bytes());
    const auto embeddings = em_.alloc(hidden_bytes());  // inputs_embeds + token_type_embeddings
    em_.free(word);
    em_.free(token_type);
    em_.temporary(seq * hidden_ * e_);  // position lookup, added in place
    const auto emb_norm = norm_forward(*rows_.norm, embeddings);
    tensor_id emb_mask = no_tensor;
    tensor_id x = dropout_forward(emb_norm.out, t * hidden_, emb_mask);

    std::vector<layer_state> layers(rows_.layers.size());
    for (std::size_t k = 0; k < rows_.layers.size(); ++k) {
      const auto& r = rows_.layers[k];
      auto& s = layers[k];
      s.q = linear_forward(*r.query, x, t * linear_out_features(*r.query) * e_);
      s.k = linear_forward(*r.key, x, t * linear_out_features(*r.key) * e_);
      s.v = linear_forward(*r.value, x, t * linear_out_features(*r.value) * e_);
      s.scores_bytes = n * r.scores->elems_per_sample(seq) * e_;
      em_.hold(s.q.out);  // saved by Q·Kᵀ
      em_.hold(s.k.out);
      const auto raw = em_.alloc(s.scores_bytes);
      const auto scaled = em_.alloc(s.scores_bytes);  // / sqrt(head size)
      em_.free(raw);
      const auto masked = em_.alloc(s.scores_bytes);  // + extended mask
      em_.free(scaled);
      s.probs = em_.alloc(s.scores_bytes, 1);  // softmax, saves its result
      em_.free(masked);
      s.probs_dropped = dropout_forward(s.probs, n * r.scores->elems_per_sample(seq), s.probs_mask);
      em_.hold(s.probs_dropped);  // saved by probs·V, with V
      em_.hold(s.v.out);
      const auto context = em_.alloc(n * r.context->elems_per_sample(seq) * e_);
      const auto contiguous = em_.alloc(em_.bytes(context));  // permute(...).contiguous()
      em_.free(context);
      s.attention_output = linear_forward(*r.attention_output, contiguous, t * linear_out_features(*r.attention_output) * e_);
      const auto attn_dropped = dropout_forward(s.attention_output.out, t * linear_out_features(*r.attention_output), s.attention_mask);
      const auto attn_sum = em_.alloc(em_.bytes(attn_dropped));  // + the layer's input
      em_.free(attn_dropped);
      s.attention_norm = norm_forward(*r.attention_norm, attn_sum);
      const auto a = s.attention_norm.out;
      s.intermediate = linear_forward(*r.intermediate, a, t * linear_out_features(*r.intermediate) * e_);
      em_.hold(s.intermediate.out);  // GELU saves its input
      const auto gelu = em_.alloc(n * r.gelu->elems_per_sample(seq) * e_);
      s.output = linear_forward(*r.output, gelu, t * linear_out_features(*r.output) * e_);
      const auto out_dropped = dropout_forward(s.output.out, t * linear_out_features(*r.output), s.output_mask);
      const auto out_sum = em_.alloc(em_.bytes(out_dropped));  // + the attention LayerNorm's output
      em_.free(out_dropped);
      s.output_norm = norm_forward(*r.output_norm, out_sum);
      x = s.output_norm.out;
    }
    em_.free(extended);  // the encoder is done with it
    const auto sequence_output = x;

    if (rows_.pooler) {
      // The pooler: its graph holds the encoder output until `outputs` is rebound (loop slots 5, 6).
      em_.hold(sequence_output);
      const auto dense = em_.alloc(n * linear_out_features(*rows_.pooler) * e_);
      const auto pooled = em_.alloc(em_.bytes(dense), 1);  // tanh, saves its result
      em_.free(dense);
      replace_loop(5, pooled);
      replace_loop(6, sequence_output);
    }

    // ---- the MLM head: logits = h · W_wordᵀ (tied), then cross-entropy over the vocabulary ----
    linear_node decoder;
    decoder.row = rows_.word;
    decoder.input = sequence_output;
    decoder.input_bytes = em_.bytes(sequence_output);
    em_.hold(sequence_output);
    if (amp_) decoder.weight_copy = em_.alloc(rows_.word->params * e_, 1);
    const std::size_t logits_elems = t * vocab_;
    decoder.out = em_.alloc(logits_elems * e_, 1);
    replace_loop(3, decoder.out);  // outputs.logits

    const std::size_t loss_e = amp_ ? 4 : e_;
    if (amp_) em_.temporary(logits_elems * 4);  // the logits cast to fp32, consumed by log_softmax
    const auto log_probs = em_.alloc(logits_elems * loss_e, 1);
    const auto loss = em_.alloc(loss_e, 1);
    const auto total_weight = em_.alloc(loss_e, 1);
    replace_loop(4, loss);

    // ---- backward ----
    const auto ones = em_.alloc(loss_e);
    auto g = em_.alloc(logits_elems * loss_e);  // nll_loss_backward
    em_.free(ones);
    em_.release(total_weight);
    {
      const auto g2 = em_.alloc(logits_elems * loss_e);  // log_softmax_backward
      em_.free(g);
      em_.release(log_probs);
      g = g2;
      if (amp_) {
        const auto gh = em_.alloc(logits_elems * e_);
        em_.free(g);
        g = gh;
      }
    }
    em_.hold(g);
    {
      // The decoder: grad of h, grad of the tied weight (the first of its two gradients).
      const auto gi = em_.alloc(decoder.input_bytes, 1);
      weight_gradient(rows_.word->params, e_, first);
      em_.release(g);
      em_.release(decoder.input);
      em_.release(decoder.weight_copy);
      g = gi;
    }

    for (std::size_t k = layers.size(); k-- > 0;) {
      auto& s = layers[k];
      // output LayerNorm, its residual add (the gradient goes to both operands, no copy), dropout.
      const auto g_out_sum = norm_backward(s.output_norm, g, first);
      em_.hold(g_out_sum);  // also the residual's gradient
      const auto g_out = dropout_backward(g_out_sum, s.output_mask);
      const auto g_gelu = linear_backward(s.output, g_out, first);
      const auto g_inter = em_.alloc(em_.bytes(s.intermediate.out), 1);  // gelu_backward
      em_.release(g_gelu);
      em_.release(s.intermediate.out);
      const auto g_a_main = linear_backward(s.intermediate, g_inter, first);
      const auto g_a = sum(g_out_sum, g_a_main);
      const auto g_attn_sum = norm_backward(s.attention_norm, g_a, first);
      em_.hold(g_attn_sum);  // also the residual's gradient, the layer input's first
      const auto g_attn = dropout_backward(g_attn_sum, s.attention_mask);
      const auto g_context = linear_backward(s.attention_output, g_attn, first);
      // probs·V backward: grads of the (dropped) probabilities and of V.
      const auto g_probs_dropped = em_.alloc(s.scores_bytes, 1);
      const auto g_v = em_.alloc(em_.bytes(s.v.out), 1);
      em_.release(g_context);
      em_.release(s.probs_dropped);
      em_.release(s.v.out);
      const auto g_probs = dropout_backward(g_probs_dropped, s.probs_mask);
      const auto g_masked = em_.alloc(s.scores_bytes, 1);  // _softmax_backward_data
      em_.release(g_probs);
      em_.release(s.probs);
      // + mask passes the gradient through; / sqrt(head size) makes a new one.
      const auto g_raw = em_.alloc(s.scores_bytes, 1);
      em_.release(g_masked);
      const auto g_q = em_.alloc(em_.bytes(s.q.out), 1);  // Q·Kᵀ backward
      const auto g_k = em_.alloc(em_.bytes(s.k.out), 1);
      em_.release(g_raw);
      em_.release(s.q.out);
      em_.release(s.k.out);
      auto g_x = g_attn_sum;
      g_x = sum(g_x, linear_backward(s.v, g_v, first));
      g_x = sum(g_x, linear_backward(s.k, g_k, first));
      g_x = sum(g_x, linear_backward(s.q, g_q, first));
      g = g_x;
    }

    // ---- embeddings ----
    {
      const auto g_norm = dropout_backward(g, emb_mask);
      const auto g_sum = norm_backward(emb_norm, g_norm, first);
      const auto g_position = em_.alloc(seq * hidden_ * e_);  // summed over the batch
      embedding_backward(*rows_.position, seq, first);  // position ids are [1, L]
      em_.free(g_position);
      embedding_backward(*rows_.token_type, t, first);
      embedding_backward(*rows_.word, t, false);  // summed into the decoder's `.grad`
      em_.release(g_sum);
    }

    // ---- optimizer.step(): every parameter with a gradient (not the pooler's) ----
    for (const auto& r : table_.layers) {
      if (&r == rows_.pooler) continue;
      for (auto p : bert_param_tensors(r)) optimizer_step(em_, o_, p, master_e_, first);
    }
  }

  // The loop's references: 0-2 the batch (ids, mask, labels), 3 logits, 4 loss, 5 pooled output,
  // 6 the encoder output the pooler's graph holds.
  void replace_loop(std::size_t k, tensor_id id) { rebind(em_, loop_, k, id); }

  const layer_table& table_;
  bert_rows rows_;
  const training_options& o_;
  emitter em_;
  std::size_t e_{4};
  std::size_t master_e_{4};
  bool amp_{false};
  std::size_t hidden_{0};
  std::size_t vocab_{0};
  std::size_t max_positions_{0};
  std::vector<tensor_id> loop_;
};

}  // namespace

bool is_bert_table(const layer_table& table) {
  return std::any_of(table.layers.begin(), table.layers.end(), [](const layer_row& r) { return r.op == "embedding"; });
}

void run_bert_model(const layer_table& table, const training_options& o, trace& t) {
  bert_model model{table, o, t};
  model.run();
}

}  // namespace mgm::tracegen_detail
