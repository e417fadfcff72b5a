// The CNN of the training-trace generator: a torchvision ResNet's forward, backward and optimizer
// step as PyTorch's caching allocator sees them (each rule names the behaviour it stands for).
#include "generator_parts.hpp"

namespace mgm::tracegen_detail {

namespace {

class training_model {
 public:
  training_model(const layer_table& table, const training_options& o, trace& t)
      : table_{table}, o_{o}, em_{t, o} {
    e_ = bytes_per_element(o.dtype);
    amp_ = o.dtype != training_dtype::fp32 && o.mixed_precision;
    master_e_ = amp_ ? 4 : e_;
    input_e_ = amp_ ? 4 : e_;
    for (const auto& r : table.layers) {
      if (r.op == "linear") classes_ = r.out_channels > 0 ? r.out_channels : r.out_elems_per_sample;
    }
    if (table.layers.empty() || table.layers.front().op != "input")
      throw logic_error{"mgm::generate_training_trace: the table '" + table.name + "' does not start with an input row"};
    if (classes_ == 0) throw logic_error{"mgm::generate_training_trace: the table '" + table.name + "' has no linear classifier"};
  }

  void run() {
    if (o_.persistent_state) setup();
    for (std::size_t i = 0; i < o_.iterations; ++i) step(i == 0);
    for (auto id : loop_) em_.release(id);  // the loop ends: its references go
  }

 private:
  std::size_t n() const { return o_.batch_size; }
  std::size_t act(std::size_t elems_per_sample) const { return n() * elems_per_sample * e_; }

  void setup() {
    // model.cuda(): parameters then buffers, module by module.
    for (const auto& r : table_.layers) {
      for (auto p : param_tensors(r)) em_.alloc(p * master_e_, 1);
      if (r.buffers > 0) {
        em_.alloc(r.buffers / 2 * 4, 1);                // running_mean
        em_.alloc((r.buffers - r.buffers / 2) * 4, 1);  // running_var
      }
      if (r.op == "bn") counters_[&r] = em_.alloc(8, 1);  // num_batches_tracked (int64)
    }
  }

  // Weight gradient: on the first step with persistent state it becomes `.grad`; otherwise it is
  // summed into the existing `.grad` and freed.
  void weight_gradient(std::size_t elems, std::size_t elem_bytes, bool first) {
    const auto g = em_.alloc(elems * elem_bytes);
    if (amp_ && elem_bytes != 4) {
      // AMP: the half gradient is cast to the fp32 master's dtype before accumulation.
      const auto g32 = em_.alloc(elems * 4);
      em_.free(g);
      keep_or_free(g32, first);
    } else {
      keep_or_free(g, first);
    }
  }
  void keep_or_free(tensor_id g, bool first) {
    if (o_.persistent_state && first) {
      em_.hold(g);
      grads_.push_back(g);
    } else {
      em_.free(g);
    }
  }

  conv_shape shape_of(const layer_row& r) const {
    conv_shape s{};
    s.c = r.in_channels;
    s.k_out = r.out_channels;
    s.kernel = r.kernel;
    s.stride = std::max<std::size_t>(r.stride, 1);
    s.ho = r.out_h;
    s.wo = r.out_w;
    s.n = n();
    s.e = e_;
    // The input's map: the output's times the stride (torchvision's padding keeps that exact).
    s.hi = s.ho * s.stride;
    s.wi = s.wo * s.stride;
    return s;
  }

  void step(bool first) {
    // ---- the loop: x, y = batch.to(gpu) ----
    const auto& in_row = table_.layers.front();
    const auto x = em_.alloc(n() * in_row.out_elems_per_sample * input_e_, 1);
    const auto y = em_.alloc(n() * 8, 1);  // int64 labels
    replace_loop(0, x);
    replace_loop(1, y);

    std::vector<node> nodes;
    tensor_id cur = x;
    tensor_id block_in = no_tensor;
    tensor_id shortcut_out = no_tensor;
    std::string block;
    bool stem = true;

    for (std::size_t i = 1; i < table_.layers.size(); ++i) {
      const auto& r = table_.layers[i];
      const std::string b = block_of(r.name);
      node nd;
      nd.row = &r;
      nd.block = b;
      if (!b.empty() && b != block) {
        block = b;
        block_in = cur;
        shortcut_out = no_tensor;
        nd.block_first = true;
      }
      const bool sc = !b.empty() && is_shortcut(r.name);
      nd.shortcut = sc;

      if (r.op == "conv") {
        tensor_id in = sc ? block_in : cur;
        if (stem && amp_) {
          // autocast casts the fp32 batch for the first conv; the copy is what conv saves.
          in = em_.alloc(em_.bytes(x) / 4 * e_);
        }
        nd.kind = node_kind::conv;
        nd.input = in;
        nd.input_bytes = em_.bytes(in);
        nd.input_needs_grad = !stem;
        if (amp_) nd.saved1 = em_.alloc(r.params * e_, 1);  // autocast's weight copy
        em_.hold(in);
        const auto out = em_.alloc(act(r.out_elems_per_sample));
        em_.temporary(forward_workspace(shape_of(r)));
        stem = false;
        if (sc) {
          shortcut_out = out;
        } else {
          em_.drop_if_unheld(cur);
          cur = out;
        }
      } else if (r.op == "bn") {
        // self.num_batches_tracked = self.num_batches_tracked + 1: a new 512-B tensor replaces the
        // old one (a temporary when the buffers are not in the trace).
        if (auto it = counters_.find(&r); it != counters_.end()) {
          const auto fresh = em_.alloc(8, 1);
          em_.release(it->second);
          it->second = fresh;
        } else {
          em_.temporary(8);
        }
        const tensor_id in = sc ? shortcut_out : cur;
        if (in == no_tensor) throw logic_error{"mgm::generate_training_trace: '" + r.name + "' has no input"};
        nd.kind = node_kind::bn;
        nd.input = in;
        nd.input_bytes = em_.bytes(in);
        em_.hold(in);
        const auto out = em_.alloc(act(r.out_elems_per_sample));
        nd.saved1 = em_.alloc(r.out_channels * 4, 1);  // save_mean (fp32)
        nd.saved2 = em_.alloc(r.out_channels * 4, 1);  // save_invstd (fp32)
        if (sc) {
          shortcut_out = out;
        } else {
          cur = out;
        }
      } else if (r.op == "relu_inplace" || r.op == "relu") {
        nd.kind = node_kind::relu;
        if (r.op == "relu") {
          const auto out = em_.alloc(act(r.out_elems_per_sample));
          em_.drop_if_unheld(cur);
          cur = out;
        }
        nd.input = cur;  // the result, which backward needs
        nd.input_bytes = em_.bytes(cur);
        em_.hold(cur);
      } else if (r.op == "maxpool") {
        nd.kind = node_kind::maxpool;
        nd.input = cur;
        nd.input_bytes = em_.bytes(cur);
        em_.hold(cur);
        const auto out = em_.alloc(act(r.out_elems_per_sample));
        cur = out;
      } else if (r.op == "maxpool_indices_int64") {
        if (nodes.empty() || nodes.back().kind != node_kind::maxpool)
          throw logic_error{"mgm::generate_training_trace: '" + r.name + "' does not follow a maxpool"};
        nodes.back().saved1 = em_.alloc(n() * r.out_elems_per_sample * 8, 1);
        continue;
      } else if (r.op == "add_inplace") {
        // out += shortcut: nothing new; the shortcut branch's output, saved by nobody, goes.
        nd.kind = node_kind::add;
        if (shortcut_out != no_tensor) em_.drop_if_unheld(shortcut_out);
        shortcut_out = no_tensor;
      } else if (r.op == "adaptive_avgpool") {
        nd.kind = node_kind::avgpool;
        nd.input_bytes = em_.bytes(cur);
        const auto out = em_.alloc(act(r.out_elems_per_sample));
        em_.drop_if_unheld(cur);
        cur = out;
      } else if (r.op == "view") {
        continue;
      } else if (r.op == "linear") {
        nd.kind = node_kind::linear;
        nd.input = cur;
        nd.input_bytes = em_.bytes(cur);
        em_.hold(cur);
        if (amp_) {
          const auto p = param_tensors(r);
          nd.saved1 = em_.alloc(p.front() * e_, 1);
          if (p.size() > 1) nd.saved2 = em_.alloc(p.back() * e_, 1);
        }
        const auto out = em_.alloc(act(r.out_elems_per_sample));
        // `out = model(x)` drops the previous step's logits.
        em_.hold(out);
        replace_loop(2, out);
        cur = out;
      } else if (r.op == "log_softmax") {
        continue;  // part of the loss below
      }
      nodes.push_back(std::move(nd));
    }

    // ---- the loss: cross_entropy = log_softmax + nll_loss (fp32 under autocast) ----
    const std::size_t loss_e = amp_ ? 4 : e_;
    if (amp_) em_.temporary(n() * classes_ * 4);  // the logits cast to fp32, consumed by log_softmax
    const auto log_probs = em_.alloc(n() * classes_ * loss_e, 1);  // saved result
    const auto loss = em_.alloc(loss_e, 1);
    const auto total_weight = em_.alloc(loss_e, 1);  // saved by nll_loss
    replace_loop(3, loss);

    // ---- backward ----
    const auto ones = em_.alloc(loss_e);  // ones_like(loss)
    auto g = em_.alloc(n() * classes_ * loss_e);  // nll_loss_backward
    em_.free(ones);
    em_.release(total_weight);
    {
      const auto g2 = em_.alloc(n() * classes_ * loss_e);  // log_softmax_backward
      em_.free(g);
      em_.release(log_probs);
      g = g2;
      if (amp_) {
        const auto gh = em_.alloc(n() * classes_ * e_);  // back to the linear's dtype
        em_.free(g);
        g = gh;
      }
    }
    tensor_id g_short = no_tensor;   // the shortcut branch's gradient of the block input
    tensor_id g_res = no_tensor;     // the gradient at the residual add (two consumers)
    tensor_id g_branch = no_tensor;  // the downsample branch's running gradient
    em_.hold(g);

    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      const auto& nd = *it;
      const auto& r = *nd.row;
      tensor_id& gin = nd.shortcut ? g_branch : g;
      switch (nd.kind) {
        case node_kind::linear: {
          const auto gi = em_.alloc(nd.input_bytes, 1);  // mm: grad of the input
          const auto p = param_tensors(r);
          weight_gradient(p.front(), e_, first);  // mm: grad of the weight
          em_.release(gin);
          for (std::size_t k = 1; k < p.size(); ++k) weight_gradient(p[k], e_, first);  // sum: bias
          em_.release(nd.input);
          em_.release(nd.saved1);
          em_.release(nd.saved2);
          gin = gi;
          break;
        }
        case node_kind::avgpool: {
          const auto gi = em_.alloc(nd.input_bytes, 1);  // the mean's gradient, expanded
          em_.release(gin);
          gin = gi;
          break;
        }
        case node_kind::relu: {
          const auto gi = em_.alloc(em_.bytes(gin), 1);  // threshold_backward
          em_.release(gin);
          em_.release(nd.input);
          gin = gi;
          break;
        }
        case node_kind::add: {
          // Both branches consume the gradient at the add: the main one (bn3) and the shortcut (the
          // downsample, or the sum at the block's input).
          g_res = g;
          em_.hold(g_res);
          g_branch = g_res;
          g_short = no_tensor;
          break;
        }
        case node_kind::bn: {
          const auto gi = em_.alloc(nd.input_bytes, 1);
          weight_gradient(r.out_channels, 4, first);  // weight (fp32)
          weight_gradient(r.out_channels, 4, first);  // bias
          em_.release(gin);
          em_.release(nd.input);
          em_.release(nd.saved1);
          em_.release(nd.saved2);
          gin = gi;
          break;
        }
        case node_kind::conv: {
          const auto s = shape_of(r);
          tensor_id gi = no_tensor;
          if (nd.input_needs_grad) {
            gi = em_.alloc(nd.input_bytes, 1);  // cudnn_convolution_backward_input
            em_.temporary(backward_data_workspace(s));
          }
          weight_gradient(r.params, e_, first);  // cudnn_convolution_backward_weight
          em_.temporary(backward_filter_workspace(s));
          em_.release(gin);
          em_.release(nd.input);
          em_.release(nd.saved1);
          if (nd.shortcut) {
            g_short = gi;
            g_branch = no_tensor;
          } else {
            gin = gi;
          }
          break;
        }
        case node_kind::maxpool: {
          const auto gi = em_.alloc(nd.input_bytes, 1);
          em_.release(gin);
          em_.release(nd.input);
          em_.release(nd.saved1);
          gin = gi;
          break;
        }
      }
      if (nd.block_first && g_res != no_tensor) {
        // The block's input gets two gradients: the main branch's and the shortcut's (the
        // downsample's, or the add's own); autograd sums them into a new tensor.
        const auto sum = em_.alloc(em_.bytes(g), 1);
        em_.release(g);
        em_.release(g_short != no_tensor ? g_short : g_res);
        g = sum;
        g_res = g_short = g_branch = no_tensor;
      }
    }
    em_.release(g);

    // ---- optimizer.step() ----
    for (const auto& r : table_.layers) {
      for (auto p : param_tensors(r)) optimizer_step(em_, o_, p, master_e_, first);
    }
  }

  // The loop's variables: 0 x, 1 y, 2 out, 3 loss.
  void replace_loop(std::size_t k, tensor_id id) { rebind(em_, loop_, k, id); }

  const layer_table& table_;
  const training_options& o_;
  emitter em_;
  std::size_t e_{4};
  std::size_t master_e_{4};
  std::size_t input_e_{4};
  bool amp_{false};
  std::size_t classes_{0};
  std::vector<tensor_id> loop_;
  std::vector<tensor_id> grads_;
  std::unordered_map<const layer_row*, tensor_id> counters_;
};

}  // namespace

void run_cnn_model(const layer_table& table, const training_options& o, trace& t) {
  training_model model{table, o, t};
  model.run();
}

}  // namespace mgm::tracegen_detail
