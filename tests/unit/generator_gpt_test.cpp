// The GPT-style training-trace generator: parameter counts against the published tables, the
// trace's invariants, and what activation checkpointing, AMP and the optimizer change.
#include <mgm/error.hpp>
#include <mgm/trace/gpt.hpp>
#include <mgm/trace/replay.hpp>

#include "trace_pairing.hpp"
#include "sizes.hpp"

#include <catch2/catch.hpp>

#include <string>

namespace {

mgm::training_options gpt_options(std::size_t batch, std::size_t seq, mgm::training_dtype dtype, std::size_t iterations,
                                  bool persistent = true) {
  mgm::training_options o;
  o.batch_size = batch;
  o.sequence_length = seq;
  o.dtype = dtype;
  o.iterations = iterations;
  o.persistent_state = persistent;
  o.optimizer = mgm::optimizer_kind::adam;  // AdamW's buffers
  return o;
}

// Live bytes after the last event of each step of `t`: the steps start at the idx allocation
// (batch × seq int64, rounded), two of them per step.
std::size_t live_at_end(const mgm::trace& t) {
  std::size_t live = 0;
  for (const auto& e : t.events) {
    live = e.action == mgm::trace_event::action_type::allocate ? live + e.bytes : live - e.bytes;
  }
  return live;
}

}  // namespace

TEST_CASE("gpt: the configurations have the published parameter counts", "[generator][gpt]") {
  // GPT-2 small: 124,439,808 with the head tied to the token embedding (the number Hugging Face's
  // GPT2LMHeadModel and nanoGPT print). GPT-3 Table 2.1: 1.3B and 2.7B ("n_params"), 2048 positions.
  REQUIRE(mgm::builtin_gpt_config("gpt2-124m").parameter_count() == 124'439'808);
  const auto c13 = mgm::builtin_gpt_config("gpt-1.3b");
  REQUIRE(c13.parameter_count() == 1'315'723'264);
  REQUIRE(c13.parameter_count() == Approx(1.3e9).epsilon(0.02));
  const auto c27 = mgm::builtin_gpt_config("gpt-2.7b");
  REQUIRE(c27.parameter_count() == 2'651'553'280);
  REQUIRE(c27.parameter_count() == Approx(2.7e9).epsilon(0.02));
  REQUIRE(c27.hidden / c27.heads == 80);  // d_head of the table
  REQUIRE(mgm::builtin_gpt_configs().size() == 3);
  REQUIRE_THROWS_AS(mgm::builtin_gpt_config("gpt-175b"), mgm::logic_error);
  mgm::gpt_config bad;
  bad.heads = 7;
  REQUIRE_THROWS_AS(bad.validate(), mgm::logic_error);
}

TEST_CASE("gpt: a step is paired, rounded, and keeps weights and AdamW state only", "[generator][gpt]") {
  auto m = mgm::builtin_gpt_config("gpt2-124m");
  m.layers = 2;  // small enough to replay in a unit test
  const auto o = gpt_options(2, 64, mgm::training_dtype::fp32, 3);
  const auto t = mgm::generate_gpt_trace(m, o);
  REQUIRE(t.name == "gpt2-124m");
  REQUIRE(mgm_test::check_pairing(t) > 0);
  // What outlives the steps: the weights, exp_avg and exp_avg_sq (fp32, each tensor rounded to
  // 512 B); every .grad was freed by zero_grad(set_to_none=True); the loop's idx, targets, logits,
  // loss are freed at the end.
  const std::size_t tensors = 2 + 12 * m.layers + 2;
  const std::size_t params = m.vocabulary * m.hidden + m.context * m.hidden + m.layers * (12 * m.hidden * m.hidden + 13 * m.hidden) +
                             2 * m.hidden;
  const std::size_t live = live_at_end(t);
  REQUIRE(live >= 3 * 4 * params);
  REQUIRE(live <= 3 * 4 * params + 3 * tensors * 512);
  // Each step starts with idx and targets (batch × seq int64), one after the other.
  REQUIRE(mgm::gpt_input_bytes(o) == 2 * 64 * 8);
  const auto steps = mgm::training_step_stats(t, mgm::gpt_input_bytes(o), 2);
  REQUIRE(steps.size() == 3);
  REQUIRE(steps[1].allocations == steps[2].allocations);
  REQUIRE(steps[1].peak_bytes == steps[2].peak_bytes);
  // Deterministic, and it replays on the simulator through the pool, judged.
  const auto again = mgm::generate_gpt_trace(m, o);
  REQUIRE(again.events.size() == t.events.size());
  const auto c = t.compile();
  mgm::replay_options ro;
  ro.capacity_bytes = std::size_t{8} << 30;
  const auto pool = mgm::replay_on_sim(c, "pool", ro);
  REQUIRE(pool.hazards == 0u);
  REQUIRE(pool.peak_reserved_bytes >= c.peak_live_bytes);
  // Without persistent state every step is net zero.
  REQUIRE(mgm_test::check_pairing(mgm::generate_gpt_trace(m, gpt_options(2, 64, mgm::training_dtype::fp32, 2, false))) == 0);
}

TEST_CASE("gpt: checkpointing, AMP and the sequence length move the peak the right way", "[generator][gpt]") {
  auto m = mgm::builtin_gpt_config("gpt2-124m");
  m.layers = 4;
  const auto peak = [&](const mgm::gpt_config& model, const mgm::training_options& o) {
    return mgm::generate_gpt_trace(model, o).compile().peak_live_bytes;
  };
  const auto base = gpt_options(4, 256, mgm::training_dtype::fp32, 1, false);
  const std::size_t plain = peak(m, base);
  auto ckpt_model = m;
  ckpt_model.activation_checkpointing = true;
  const std::size_t ckpt = peak(ckpt_model, base);
  INFO("peak " << plain / MiB << " MiB, checkpointed " << ckpt / MiB << " MiB");
  REQUIRE(ckpt < plain);
  // Checkpointing recomputes each block's forward in backward: more events for the same step.
  REQUIRE(mgm::generate_gpt_trace(ckpt_model, base).events.size() > mgm::generate_gpt_trace(m, base).events.size());
  // bf16 activations under AMP: a lower peak than fp32 (logits and the stream of the blocks shrink).
  auto amp = base;
  amp.dtype = mgm::training_dtype::bf16;
  REQUIRE(peak(m, amp) < plain);
  // Twice the tokens: more than 1.5× the activations (the logits alone are tokens × vocabulary).
  auto longer = base;
  longer.sequence_length = 512;
  REQUIRE(static_cast<double>(peak(m, longer)) > 1.5 * static_cast<double>(plain));
  // Bad input.
  auto too_long = base;
  too_long.sequence_length = m.context + 1;
  REQUIRE_THROWS_AS(mgm::generate_gpt_trace(m, too_long), mgm::logic_error);
  auto no_batch = base;
  no_batch.batch_size = 0;
  REQUIRE_THROWS_AS(mgm::generate_gpt_trace(m, no_batch), mgm::logic_error);
}
