// mgm_trace_gen: writes the allocation trace of training a network from its layer table, as RMM's
// CSV log, and compares a generated step with a real trace's.
//
//   mgm_trace_gen --model resnet50 --batch 32 --dtype fp32 --iterations 1 --no-persistent -o out.rmm_log.csv
//   mgm_trace_gen --model bert-base --batch 32 --seq 128 --optimizer adam
//   mgm_trace_gen --model gpt2-124m --batch 8 --seq 1024 --dtype bf16 --optimizer adamw --checkpointing
//   mgm_trace_gen --model gpt --layers 6 --hidden 512 --heads 8 --seq 256
//   mgm_trace_gen --model resnet50 --no-persistent --compare ../shared/data/traces/resnet50-bs32-v100/resnet50_bs32_w0.rmm_log.csv
//
// --model is a built-in table (resnet50, resnet152, bert-base), a GPT configuration (gpt2-124m,
// gpt-1.3b, gpt-2.7b; or gpt, shaped by --layers, --hidden, --heads, --vocab, --context), or a layer
// table CSV file; --seq is BERT's and GPT's sequence length.
#include <mgm/error.hpp>
#include <mgm/trace/generator.hpp>
#include <mgm/trace/gpt.hpp>
#include <mgm/trace/trace.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

namespace {

bool is_builtin(const std::string& model) {
  const auto names = mgm::builtin_layer_tables();
  return std::find(names.begin(), names.end(), model) != names.end();
}
bool is_gpt(const std::string& model) {
  const auto names = mgm::builtin_gpt_configs();
  return model == "gpt" || std::find(names.begin(), names.end(), model) != names.end();
}

void print_steps(const char* label, const std::vector<mgm::step_stats>& steps) {
  std::printf("%s: %zu step(s)\n", label, steps.size());
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const auto& s = steps[i];
    std::printf("  step %zu: %zu allocations, %zu frees, %zu bytes allocated (%.3f GB), in-step peak %zu bytes (%.3f GB)\n", i,
                s.allocations, s.frees, s.allocated_bytes, static_cast<double>(s.allocated_bytes) / 1e9, s.peak_bytes,
                static_cast<double>(s.peak_bytes) / 1e9);
  }
}

double percent(std::size_t generated, std::size_t real) {
  return real == 0 ? 0.0 : (static_cast<double>(generated) - static_cast<double>(real)) / static_cast<double>(real) * 100.0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Generates the allocation trace of training a network from its layer table (RMM CSV log)"};
  std::string model = "resnet50";
  std::string dtype = "fp32";
  std::string optimizer = "sgd";
  std::string output;
  std::string compare;
  mgm::training_options o;
  bool no_persistent = false;
  bool pure_half = false;
  mgm::gpt_config gpt;
  app.add_option("--model", model, "resnet50, resnet152, bert-base, gpt2-124m, gpt-1.3b, gpt-2.7b, gpt (shaped by --layers ...), or a layer table CSV file")->capture_default_str();
  app.add_option("--batch", o.batch_size, "batch size")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--dtype", dtype, "fp32, fp16 or bf16")->capture_default_str();
  app.add_option("--seq", o.sequence_length, "tokens per sample (BERT and GPT)")->capture_default_str()->check(CLI::PositiveNumber);
  auto* layers = app.add_option("--layers", gpt.layers, "--model gpt: decoder blocks")->check(CLI::PositiveNumber);
  auto* hidden = app.add_option("--hidden", gpt.hidden, "--model gpt: the model width")->check(CLI::PositiveNumber);
  auto* heads = app.add_option("--heads", gpt.heads, "--model gpt: attention heads (dividing --hidden)")->check(CLI::PositiveNumber);
  auto* vocab = app.add_option("--vocab", gpt.vocabulary, "--model gpt: the vocabulary")->check(CLI::PositiveNumber);
  auto* context = app.add_option("--context", gpt.context, "--model gpt: positions")->check(CLI::PositiveNumber);
  bool checkpointing = false;
  app.add_flag("--checkpointing", checkpointing, "GPT: activation checkpointing of every block");
  app.add_option("--iterations", o.iterations, "training steps")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_flag("--no-persistent", no_persistent, "leave weights, .grad and optimizer state out of the trace");
  app.add_flag("--pure-half", pure_half, "fp16/bf16 without AMP: the weights are half too");
  app.add_option("--optimizer", optimizer, "sgd (momentum), adam or adamw (Adam's buffers)")->capture_default_str();
  app.add_option("--stream", o.stream, "the stream of every event")->capture_default_str();
  app.add_option("-o,--output", output, "the RMM CSV log to write");
  app.add_option("--compare", compare, "a real RMM CSV log: per-step allocations, bytes and in-step peak of both");
  CLI11_PARSE(app, argc, argv);

  try {
    o.dtype = mgm::parse_training_dtype(dtype);
    o.persistent_state = !no_persistent;
    o.mixed_precision = !pure_half;
    if (optimizer == "sgd" || optimizer == "sgd-momentum") {
      o.optimizer = mgm::optimizer_kind::sgd_momentum;
    } else if (optimizer == "adam" || optimizer == "adamw") {
      o.optimizer = mgm::optimizer_kind::adam;
    } else {
      throw mgm::logic_error{"unknown optimizer '" + optimizer + "' (sgd, adam, adamw)"};
    }
    const bool shaped = !layers->empty() || !hidden->empty() || !heads->empty() || !vocab->empty() || !context->empty();
    if (shaped && model != "gpt") throw mgm::logic_error{"--layers, --hidden, --heads, --vocab and --context shape --model gpt"};
    if (checkpointing && !is_gpt(model)) throw mgm::logic_error{"--checkpointing is for the GPT models"};
    mgm::trace t;
    std::size_t layer_count = 0;
    std::size_t parameters = 0;
    std::size_t step_marker = 0;
    std::size_t markers = 1;
    if (is_gpt(model)) {
      if (model != "gpt") gpt = mgm::builtin_gpt_config(model);
      gpt.activation_checkpointing = checkpointing;
      t = mgm::generate_gpt_trace(gpt, o);
      layer_count = gpt.layers;
      parameters = gpt.parameter_count();
      step_marker = mgm::gpt_input_bytes(o);  // idx, then targets
      markers = 2;
    } else {
      const auto table = is_builtin(model) ? mgm::builtin_layer_table(model) : mgm::read_layer_table_file(model);
      t = mgm::generate_training_trace(table, o);
      layer_count = table.layers.size();
      parameters = table.parameter_count();
      step_marker = mgm::training_input_bytes(table, o);
      markers = mgm::training_step_markers(table);
    }
    const auto c = t.compile();
    std::printf("%s: %zu layers, %zu parameters; %zu events, %zu allocations, peak live %zu bytes (%.3f GB)\n", t.name.c_str(),
                layer_count, parameters, t.events.size(), c.allocations, c.peak_live_bytes,
                static_cast<double>(c.peak_live_bytes) / 1e9);
    if (!output.empty()) {
      std::ofstream out{output};
      if (!out) throw mgm::logic_error{"cannot write '" + output + "'"};
      mgm::write_rmm_csv(out, t);
      std::printf("wrote %s\n", output.c_str());
    }
    const auto generated = mgm::training_step_stats(t, step_marker, markers);
    print_steps("generated", generated);
    if (!compare.empty()) {
      const auto real_trace = mgm::read_rmm_csv_file(compare);
      std::size_t marker = 0;
      for (const auto& e : real_trace.events) {
        if (e.action == mgm::trace_event::action_type::allocate) {
          marker = e.bytes;
          break;
        }
      }
      const auto real = mgm::training_step_stats(real_trace, marker);
      print_steps("real", real);
      if (!generated.empty() && !real.empty()) {
        // Last steps against each other: a trace's first step misses the frees of the loop's
        // references from the step before it (the input batch, labels, logits, loss).
        const auto& g = generated.back();
        const auto& r = real.back();
        std::printf("per step, generated vs real:\n");
        std::printf("  allocations      %12zu %12zu  %+7.2f %%\n", g.allocations, r.allocations, percent(g.allocations, r.allocations));
        std::printf("  bytes allocated  %12zu %12zu  %+7.2f %%\n", g.allocated_bytes, r.allocated_bytes,
                    percent(g.allocated_bytes, r.allocated_bytes));
        std::printf("  in-step peak     %12zu %12zu  %+7.2f %%\n", g.peak_bytes, r.peak_bytes, percent(g.peak_bytes, r.peak_bytes));
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mgm_trace_gen: %s\n", e.what());
    return 1;
  }
  return 0;
}
