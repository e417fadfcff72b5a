// The GPT-style generator (include/mgm/trace/gpt.hpp): the configurations, the parameter count and
// the walk of one training step through a decoder-only transformer.
#include "generator_parts.hpp"

#include <mgm/trace/gpt.hpp>

#include <array>
#include <string>
#include <vector>

namespace mgm {

std::size_t gpt_config::parameter_count() const noexcept {
  const std::size_t d = hidden;
  return vocabulary * d + context * d + layers * (12 * d * d + 13 * d) + 2 * d;
}

void gpt_config::validate() const {
  MGM_EXPECTS(layers > 0 && hidden > 0 && heads > 0 && vocabulary > 0 && context > 0,
              "gpt_config '" + name + "': every dimension must be positive");
  MGM_EXPECTS(hidden % heads == 0, "gpt_config '" + name + "': " + std::to_string(heads) +
                                       " heads do not divide the hidden size " + std::to_string(hidden));
}

namespace {
constexpr std::array<std::string_view, 3> gpt_names{"gpt2-124m", "gpt-1.3b", "gpt-2.7b"};
}  // namespace

std::span<const std::string_view> builtin_gpt_configs() noexcept { return gpt_names; }

gpt_config builtin_gpt_config(std::string_view name) {
  gpt_config c;
  c.name = std::string{name};
  if (name == "gpt2-124m") {
    c.layers = 12, c.hidden = 768, c.heads = 12, c.context = 1024;
  } else if (name == "gpt-1.3b") {
    c.layers = 24, c.hidden = 2048, c.heads = 16, c.context = 2048;
  } else if (name == "gpt-2.7b") {
    c.layers = 32, c.hidden = 2560, c.heads = 32, c.context = 2048;
  } else {
    throw logic_error{"mgm::builtin_gpt_config: no configuration '" + std::string{name} +
                      "' (gpt2-124m, gpt-1.3b, gpt-2.7b)"};
  }
  return c;
}

namespace tracegen_detail {
namespace {

constexpr std::size_t f32 = 4;
constexpr std::size_t i64 = 8;
constexpr std::size_t params_per_block = 12;  // ln_1 (w, b), c_attn (w, b), c_proj (w, b), ln_2, c_fc, mlp.c_proj

struct parameter {
  std::size_t elems{0};
  tensor_id grad{no_tensor};
};

// What one block keeps for its backward (no_tensor where checkpointing dropped it).
struct block_state {
  tensor_id x_in{no_tensor}, ln1{no_tensor}, mean1{no_tensor}, rstd1{no_tensor}, qkv{no_tensor}, w_attn{no_tensor};
  tensor_id att{no_tensor}, lse{no_tensor}, y{no_tensor}, w_proj{no_tensor}, x1{no_tensor}, ln2{no_tensor};
  tensor_id mean2{no_tensor}, rstd2{no_tensor}, h{no_tensor}, w_fc{no_tensor}, g{no_tensor}, w_mproj{no_tensor};
};

class gpt_walk {
 public:
  gpt_walk(const gpt_config& m, const training_options& o, trace& t)
      : m_{m},
        o_{o},
        em_{t, o},
        e_{bytes_per_element(o.dtype)},
        amp_{o.dtype != training_dtype::fp32 && o.mixed_precision},
        w_e_{amp_ ? f32 : e_},
        bt_{o.batch_size * o.sequence_length} {
    const std::size_t d = m.hidden;
    params_.push_back({m.vocabulary * d});  // wte (and the tied head)
    params_.push_back({m.context * d});     // wpe
    for (std::size_t l = 0; l < m.layers; ++l) {
      for (const std::size_t n : {d, d, 3 * d * d, 3 * d, d * d, d, d, d, 4 * d * d, 4 * d, 4 * d * d, d}) params_.push_back({n});
    }
    params_.push_back({d});  // ln_f
    params_.push_back({d});
  }

  void run() {
    if (o_.persistent_state) {
      for (const auto& p : params_) em_.alloc(p.elems * w_e_, 1);  // the weights, kept
    }
    std::vector<tensor_id> loop;
    for (std::size_t step = 0; step < o_.iterations; ++step) one_step(loop, step == 0);
    for (const auto id : loop) em_.release(id);
  }

 private:
  [[nodiscard]] std::size_t wte() const noexcept { return 0; }
  [[nodiscard]] std::size_t wpe() const noexcept { return 1; }
  [[nodiscard]] std::size_t block_param(std::size_t layer, std::size_t k) const noexcept {
    return 2 + layer * params_per_block + k;
  }
  [[nodiscard]] std::size_t ln_f() const noexcept { return 2 + m_.layers * params_per_block; }
  [[nodiscard]] std::size_t act(std::size_t per_token) const noexcept { return bt_ * per_token; }

  tensor_id alloc(std::size_t bytes) { return em_.alloc(bytes); }
  void free(tensor_id& id) {
    if (id != no_tensor) em_.free(id);
    id = no_tensor;
  }

  // A weight's gradient: in the dtype and cast to the fp32 `.grad` under AMP. The first one becomes
  // the `.grad`; a later one (the tied embedding) is summed into it and freed.
  void gradient(std::size_t p) {
    auto& prm = params_[p];
    tensor_id g = no_tensor;
    if (amp_) {
      tensor_id low = alloc(prm.elems * e_);
      g = alloc(prm.elems * f32);
      free(low);
    } else {
      g = alloc(prm.elems * w_e_);
    }
    if (prm.grad == no_tensor) {
      prm.grad = g;
    } else {
      free(g);
    }
  }

  // A linear layer's forward: under AMP the weight's cast copy first (kept for backward), then the
  // output in the dtype.
  tensor_id linear(std::size_t weight, std::size_t out_per_token, tensor_id& weight_copy) {
    if (amp_) weight_copy = alloc(params_[weight].elems * e_);
    return alloc(act(out_per_token) * e_);
  }
  // Its backward: the input gradient (in_per_token elements per token), the weight's gradient, the
  // bias's (when it has one); the weight copy goes.
  tensor_id linear_backward(std::size_t weight, std::size_t bias, bool has_bias, std::size_t in_per_token,
                            tensor_id& weight_copy) {
    const tensor_id dx = alloc(act(in_per_token) * e_);
    gradient(weight);
    if (has_bias) gradient(bias);
    free(weight_copy);
    return dx;
  }
  // LayerNorm keeps its input (the caller's), mean and rstd (fp32).
  tensor_id layer_norm(tensor_id& mean, tensor_id& rstd) {
    const tensor_id out = alloc(act(m_.hidden) * w_e_);
    mean = alloc(bt_ * f32);
    rstd = alloc(bt_ * f32);
    return out;
  }
  tensor_id layer_norm_backward(std::size_t weight, tensor_id& mean, tensor_id& rstd) {
    const tensor_id dx = alloc(act(m_.hidden) * w_e_);
    gradient(weight);
    gradient(weight + 1);
    free(mean);
    free(rstd);
    return dx;
  }

  // One block's forward from `x_in`; returns x2 and fills `s`.
  tensor_id block_forward(std::size_t l, tensor_id x_in, block_state& s) {
    const std::size_t d = m_.hidden;
    s.x_in = x_in;
    s.ln1 = layer_norm(s.mean1, s.rstd1);
    s.qkv = linear(block_param(l, 2), 3 * d, s.w_attn);
    // Flash attention: the output (B, h, T, d/h) and its log-sum-exp (B, h, T) in fp32.
    s.att = alloc(act(d) * e_);
    s.lse = alloc(bt_ * m_.heads * f32);
    s.y = alloc(act(d) * e_);  // .transpose(1, 2).contiguous()
    tensor_id proj = linear(block_param(l, 4), d, s.w_proj);
    s.x1 = alloc(act(d) * w_e_);  // x + attn(...)
    free(proj);
    s.ln2 = layer_norm(s.mean2, s.rstd2);
    s.h = linear(block_param(l, 8), 4 * d, s.w_fc);
    s.g = alloc(act(4 * d) * e_);  // GELU keeps its input h
    tensor_id mlp = linear(block_param(l, 10), d, s.w_mproj);
    const tensor_id x2 = alloc(act(d) * w_e_);
    free(mlp);
    return x2;
  }
  void drop_saved(block_state& s) {  // all but the block's input: checkpointing
    for (tensor_id* id : {&s.ln1, &s.mean1, &s.rstd1, &s.qkv, &s.w_attn, &s.att, &s.lse, &s.y, &s.w_proj, &s.x1, &s.ln2,
                          &s.mean2, &s.rstd2, &s.h, &s.w_fc, &s.g, &s.w_mproj}) {
      free(*id);
    }
  }

  // One block's backward from the gradient of its output; returns the gradient of its input.
  tensor_id block_backward(std::size_t l, block_state& s, tensor_id dx2) {
    const std::size_t d = m_.hidden;
    tensor_id dg = linear_backward(block_param(l, 10), block_param(l, 11), true, 4 * d, s.w_mproj);
    free(s.g);
    tensor_id dh = alloc(act(4 * d) * e_);  // GELU's backward
    free(dg);
    free(s.h);
    tensor_id dln2 = linear_backward(block_param(l, 8), block_param(l, 9), true, d, s.w_fc);
    free(dh);
    free(s.ln2);
    tensor_id dx1_branch = layer_norm_backward(block_param(l, 6), s.mean2, s.rstd2);
    free(dln2);
    free(s.x1);
    tensor_id dx1 = alloc(act(d) * w_e_);  // the residual's two gradients summed
    free(dx1_branch);
    free(dx2);
    tensor_id dy = linear_backward(block_param(l, 4), block_param(l, 5), true, d, s.w_proj);
    free(s.y);
    std::array<tensor_id, 3> dqkv_parts{alloc(act(d) * e_), alloc(act(d) * e_), alloc(act(d) * e_)};  // dQ, dK, dV
    free(dy);
    free(s.att);
    free(s.lse);
    tensor_id dqkv = alloc(act(3 * d) * e_);  // the split's backward: one tensor again
    for (auto& part : dqkv_parts) free(part);
    free(s.qkv);
    tensor_id dln1 = linear_backward(block_param(l, 2), block_param(l, 3), true, d, s.w_attn);
    free(dqkv);
    free(s.ln1);
    tensor_id dx_branch = layer_norm_backward(block_param(l, 0), s.mean1, s.rstd1);
    free(dln1);
    free(s.x_in);
    tensor_id dx_in = alloc(act(d) * w_e_);
    free(dx_branch);
    free(dx1);
    return dx_in;
  }

  void one_step(std::vector<tensor_id>& loop, bool first) {
    const std::size_t d = m_.hidden;
    const std::size_t t = o_.sequence_length;
    const tensor_id idx = em_.alloc(bt_ * i64, 1);  // `idx, targets = batch`: both arrive, then the old ones go
    const tensor_id targets = em_.alloc(bt_ * i64, 1);
    rebind(em_, loop, 0, idx);
    rebind(em_, loop, 1, targets);
    tensor_id pos = alloc(t * i64);
    tensor_id tok = alloc(act(d) * w_e_);
    tensor_id pe = alloc(t * d * w_e_);
    tensor_id x = alloc(act(d) * w_e_);
    free(tok);
    free(pe);
    free(pos);

    std::vector<block_state> blocks(m_.layers);
    for (std::size_t l = 0; l < m_.layers; ++l) {
      const tensor_id next = block_forward(l, x, blocks[l]);
      if (m_.activation_checkpointing) drop_saved(blocks[l]);
      x = next;
    }
    tensor_id mean_f = no_tensor, rstd_f = no_tensor, head_copy = no_tensor;
    tensor_id lnf = layer_norm(mean_f, rstd_f);
    if (amp_) head_copy = alloc(params_[wte()].elems * e_);  // the tied head's weight, cast
    const tensor_id logits = em_.alloc(act(m_.vocabulary) * e_, 1);  // kept by the loop: `logits, loss = model(...)`
    tensor_id logp = no_tensor;
    if (amp_) {  // cross-entropy runs in fp32 under autocast
      tensor_id wide = alloc(act(m_.vocabulary) * f32);
      logp = alloc(act(m_.vocabulary) * f32);
      free(wide);
    } else {
      logp = alloc(act(m_.vocabulary) * f32);
    }
    rebind(em_, loop, 2, logits);
    rebind(em_, loop, 3, em_.alloc(f32, 1));  // loss

    // loss.backward()
    tensor_id seed = alloc(f32);
    tensor_id dlogp = alloc(act(m_.vocabulary) * f32);
    free(seed);
    tensor_id dlogits = alloc(act(m_.vocabulary) * f32);  // log-softmax's backward
    free(dlogp);
    free(logp);
    if (amp_) {
      tensor_id narrow = alloc(act(m_.vocabulary) * e_);
      free(dlogits);
      dlogits = narrow;
    }
    tensor_id dlnf = linear_backward(wte(), 0, false, d, head_copy);
    free(dlogits);
    free(lnf);
    tensor_id dx = layer_norm_backward(ln_f(), mean_f, rstd_f);
    free(dlnf);
    free(x);  // the last block's output, LayerNorm's input
    for (std::size_t l = m_.layers; l-- > 0;) {
      if (m_.activation_checkpointing) {
        const tensor_id x_in = blocks[l].x_in;
        tensor_id again = block_forward(l, x_in, blocks[l]);  // recomputed; its output is not needed
        free(again);
      }
      dx = block_backward(l, blocks[l], dx);
    }
    gradient(wpe());  // summed over the batch
    gradient(wte());  // the embedding's gradient, summed into the head's
    free(dx);

    // optimizer.step(), then zero_grad(set_to_none=True).
    for (const auto& p : params_) optimizer_step(em_, o_, p.elems, w_e_, first);
    for (auto& p : params_) free(p.grad);
  }

  const gpt_config& m_;
  const training_options& o_;
  emitter em_;
  std::size_t e_;
  bool amp_;
  std::size_t w_e_;  // bytes per element of weights, .grad and optimizer state; of the residual stream
  std::size_t bt_;   // tokens per step
  std::vector<parameter> params_;
};

}  // namespace
}  // namespace tracegen_detail

std::size_t gpt_input_bytes(const training_options& options) {
  return tracegen_detail::round_block(options.batch_size * options.sequence_length * tracegen_detail::i64);
}

trace generate_gpt_trace(const gpt_config& model, const training_options& options) {
  model.validate();
  MGM_EXPECTS(options.batch_size > 0, "mgm::generate_gpt_trace: the batch size is 0");
  MGM_EXPECTS(options.iterations > 0, "mgm::generate_gpt_trace: the iteration count is 0");
  MGM_EXPECTS(options.sequence_length > 0 && options.sequence_length <= model.context,
              "mgm::generate_gpt_trace: the sequence length must be 1 to " + std::to_string(model.context) + ", not " +
                  std::to_string(options.sequence_length));
  trace t;
  t.name = model.name;
  tracegen_detail::gpt_walk{model, options, t}.run();
  return t;
}

}  // namespace mgm
