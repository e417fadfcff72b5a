// The `mgm` command line: what the commands share. Each command only presents what the library
// computes (DESIGN.md §6-§7: exit codes 0 ok, 1 usage, 2 bad input, 3 no GPU or driver).
#pragma once

#include <mgm/sim/machine.hpp>
#include <mgm/topology/topology.hpp>

#include <CLI/CLI.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace mgm_tool {

inline constexpr int exit_ok = 0;
inline constexpr int exit_usage = 1;
inline constexpr int exit_bad_input = 2;
inline constexpr int exit_no_gpu = 3;

/// @brief A failure with its exit code and a message for people.
struct tool_error : std::runtime_error {
  tool_error(int code, const std::string& message) : std::runtime_error{message}, exit_code{code} {}
  int exit_code;
};

/// @brief A count option: a whole number from `min` up, never negative (CLI11 would wrap -1 around
/// for an unsigned option). Its failure is a usage error (exit 1).
inline CLI::Validator count_at_least(unsigned long long min) {
  return CLI::Validator{[min](std::string& text) -> std::string {
                          std::size_t used = 0;
                          unsigned long long v = 0;
                          const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
                          try {
                            v = digits ? std::stoull(text, &used) : 0;
                          } catch (...) {
                            return "'" + text + "' is too large";
                          }
                          if (!digits) return "'" + text + "' is not a whole number of " + std::to_string(min) + " or more";
                          if (v < min) return "must be at least " + std::to_string(min) + ", not " + text;
                          return {};
                        },
                        "INT>=" + std::to_string(min)};
}

/// @brief A message for people: an internal error's " at FILE:LINE" suffix taken off.
std::string for_people(const std::string& what);

/// @brief `path` is a readable regular file. @throws tool_error (exit 2) saying what it is instead.
void require_file(const std::string& path);

/// @brief The global options.
struct context {
  std::string sim;          ///< `--sim PRESET|DEVICE_LIST|TOPOLOGY_FILE`; empty: the real machine
  std::string sim_devices;  ///< `--sim-devices SPEC`: the GPUs of a topology file (names, memory)
  bool json{false};
  [[nodiscard]] bool simulated() const { return !sim.empty(); }
};

/// @brief A simulated machine and where its GPUs' memory sizes come from, for the output to say.
struct sim_choice {
  mgm::sim::machine machine;
  std::string capacity_source;  ///< "preset dgx-h100", "the device list", "--sim-devices", ...
};

/// @brief The simulated machine `--sim` names: a preset, a device list (`4x80GiB`), or a topology
/// file (`nvidia-smi topo -m` text or NCCL XML) whose GPUs `--sim-devices` names and sizes. A size
/// is never invented: a file that gives links but no memory, without `--sim-devices`, is refused.
/// @throws tool_error: 1 when `--sim-devices` is missing or misplaced, 2 for bad input.
[[nodiscard]] sim_choice make_sim_machine(const context& ctx);

/// @brief The links (and GPU names, when known) `--sim` names, for commands that need no memory
/// sizes (`mgm topo`): a topology file needs no `--sim-devices` here.
struct sim_links {
  std::string name;
  std::vector<std::string> gpu_names;
  mgm::topology links;
};
[[nodiscard]] sim_links make_sim_links(const context& ctx);

/// @brief Checks the global options together (`--sim-devices` only with `--sim FILE`).
/// @throws tool_error (1).
void check_global_options(const context& ctx);

/// @brief The reason no GPU can be used and the hint to try `--sim`, as a tool_error (3).
[[noreturn]] void no_gpu(const std::string& why);

/// @brief `5s`, `500ms`, `2m`, `1h`, or plain seconds. @throws tool_error (2).
[[nodiscard]] std::chrono::duration<double> parse_duration(const std::string& text);

/// @brief Words into lines of at most `width` characters; a longer word is cut (ending "~"), and
/// no word is broken to fill a line.
[[nodiscard]] std::vector<std::string> wrap_words(const std::string& text, std::size_t width);

/// @brief `mgm.1 GiB` style sizes; "--" for none.
[[nodiscard]] std::string size_or_dash(const std::optional<std::uint64_t>& bytes);

/// @brief A topology file: `nvidia-smi topo -m` text or NCCL XML.
/// @throws tool_error (2) naming the file and line.
[[nodiscard]] mgm::topology read_topology_file(const std::string& path);

/// @brief The whole file, binary. @throws tool_error (2) naming the path.
[[nodiscard]] std::string read_file(const std::string& path);

void add_status(CLI::App& app, context& ctx);
void add_log(CLI::App& app, context& ctx);
void add_topo(CLI::App& app, context& ctx);
void add_plan(CLI::App& app, context& ctx);
void add_leak(CLI::App& app, context& ctx);
void add_plot(CLI::App& app, context& ctx);
void add_replay(CLI::App& app, context& ctx);
void add_serve(CLI::App& app, context& ctx);

}  // namespace mgm_tool
