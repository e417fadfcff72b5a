// mgm_trace_gen: writes the allocation trace of training a network from its layer table, as RMM's
// CSV log, and compares a generated step with a real trace's.
//
//   mgm_trace_gen --model resnet50 --batch 32 --dtype fp32 --iterations 1 --no-persistent -o out.rmm_log.csv
//   mgm_trace_gen --model bert-base --batch 32 --seq 128 --optimizer adam
//   mgm_trace_gen --model resnet50 --no-persistent --compare ../shared/data/traces/resnet50-bs32-v100/resnet50_bs32_w0.rmm_log.csv
//
// --model is a built-in table (resnet50, resnet152, bert-base) or a layer table CSV file; --seq is
// BERT's sequence length.
#include <mgm/error.hpp>
#include <mgm/trace/generator.hpp>
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
  app.add_option("--model", model, "resnet50, resnet152, bert-base, or a layer table CSV file")->capture_default_str();
  app.add_option("--batch", o.batch_size, "batch size")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--dtype", dtype, "fp32, fp16 or bf16")->capture_default_str();
  app.add_option("--seq", o.sequence_length, "tokens per sample (BERT only)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--iterations", o.iterations, "training steps")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_flag("--no-persistent", no_persistent, "leave weights, .grad and optimizer state out of the trace");
  app.add_flag("--pure-half", pure_half, "fp16/bf16 without AMP: the weights are half too");
  app.add_option("--optimizer", optimizer, "sgd (momentum) or adam")->capture_default_str();
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
    } else if (optimizer == "adam") {
      o.optimizer = mgm::optimizer_kind::adam;
    } else {
      throw mgm::logic_error{"unknown optimizer '" + optimizer + "' (sgd, adam)"};
    }
    const auto table = is_builtin(model) ? mgm::builtin_layer_table(model) : mgm::read_layer_table_file(model);
    const auto t = mgm::generate_training_trace(table, o);
    const auto c = t.compile();
    std::printf("%s: %zu layers, %zu parameters; %zu events, %zu allocations, peak live %zu bytes (%.3f GB)\n", t.name.c_str(),
                table.layers.size(), table.parameter_count(), t.events.size(), c.allocations, c.peak_live_bytes,
                static_cast<double>(c.peak_live_bytes) / 1e9);
    if (!output.empty()) {
      std::ofstream out{output};
      if (!out) throw mgm::logic_error{"cannot write '" + output + "'"};
      mgm::write_rmm_csv(out, t);
      std::printf("wrote %s\n", output.c_str());
    }
    const auto generated = mgm::training_step_stats(t, mgm::training_input_bytes(table, o), mgm::training_step_markers(table));
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
