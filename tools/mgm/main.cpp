// `mgm`: one view of all GPUs, their logs, topology, leaks, plans and allocation replays.
#include "mgm_tool.hpp"

#include <mgm/bytes.hpp>
#include <mgm/error.hpp>
#include <mgm/topology/topology.hpp>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#ifndef MGM_VERSION
#define MGM_VERSION "0.0.0"
#endif

namespace mgm_tool {

std::string for_people(const std::string& what) {
  // mgm::logic_error's text ends " at /path/file.cpp:123": the place is for developers.
  const std::size_t at = what.rfind(" at ");
  if (at == std::string::npos) return what;
  const std::string place = what.substr(at + 4);
  const std::size_t colon = place.rfind(':');
  const bool is_place = colon != std::string::npos && colon + 1 < place.size() &&
                        place.find_first_not_of("0123456789", colon + 1) == std::string::npos &&
                        (place.find('/') != std::string::npos || place.find(".cpp") != std::string::npos ||
                         place.find(".hpp") != std::string::npos);
  return is_place ? what.substr(0, at) : what;
}

void require_file(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) throw tool_error{exit_bad_input, path + ": no such file"};
  if (std::filesystem::is_directory(st)) throw tool_error{exit_bad_input, path + ": a directory, not a file"};
  if (!std::filesystem::is_regular_file(st) && !std::filesystem::is_fifo(st) && !std::filesystem::is_character_file(st)) {
    throw tool_error{exit_bad_input, path + ": not a regular file"};
  }
}

namespace {

bool names_a_file(const std::string& what) {
  std::error_code ec;
  return std::filesystem::is_regular_file(what, ec);
}

// The GPUs `--sim-devices` gives, one per GPU of the file, in its order.
std::vector<mgm::sim::device_spec> read_sim_devices(const context& ctx, std::size_t gpus) {
  std::vector<mgm::sim::device_spec> given;
  try {
    given = mgm::sim::parse_device_list(ctx.sim_devices);
  } catch (const std::exception& e) {
    throw tool_error{exit_bad_input, "--sim-devices: " + std::string{e.what()}};
  }
  if (given.size() != gpus) {
    throw tool_error{exit_bad_input, "--sim-devices gives " + std::to_string(given.size()) + " GPU" +
                                         (given.size() == 1 ? "" : "s") + " but " + ctx.sim + " has " +
                                         std::to_string(gpus) + " (give one per GPU, in GPU order: " +
                                         std::to_string(gpus) + "x24GiB:RTX 3090, or a list such as "
                                         "1x32GiB:RTX 5090,1x24GiB:RTX 4090)"};
  }
  return given;
}

[[noreturn]] void unknown_preset(const std::string& what) {
  std::string names;
  for (const auto n : mgm::sim::machine::preset_names()) names += (names.empty() ? "" : ", ") + std::string{n};
  throw tool_error{exit_bad_input, "--sim " + what + ": unknown preset (the presets: " + names +
                                       "); or give a device list such as 4x80GiB or 2x24GiB:RTX 4090, or a "
                                       "topology file"};
}

bool is_preset(const std::string& what) {
  for (const auto n : mgm::sim::machine::preset_names()) {
    if (n == what) return true;
  }
  return false;
}

}  // namespace

void check_global_options(const context& ctx) {
  if (ctx.sim_devices.empty()) return;
  if (ctx.sim.empty() || !names_a_file(ctx.sim)) {
    throw tool_error{exit_usage, "--sim-devices names the GPUs of a topology file: use it with --sim TOPOLOGY_FILE" +
                                     (ctx.sim.empty() ? std::string{} : " (" + ctx.sim + " is not a file)")};
  }
}

sim_choice make_sim_machine(const context& ctx) {
  const std::string& what = ctx.sim;
  if (std::filesystem::is_directory(what)) throw tool_error{exit_bad_input, "--sim " + what + ": a directory, not a topology file"};
  if (names_a_file(what)) {
    mgm::topology links = read_topology_file(what);
    const auto& gpus = links.gpus();
    std::vector<mgm::sim::device_spec> given;
    std::string source = "the topology file (its GPUs' PCI device IDs)";
    if (!ctx.sim_devices.empty()) {
      given = read_sim_devices(ctx, gpus.size());
      source = "--sim-devices";
    } else {
      for (const auto& g : gpus) {
        if (g.memory_bytes == 0) {
          throw tool_error{exit_usage, what + " gives links, not memory: add --sim-devices with each GPU's memory "
                                              "and name, for example --sim-devices '" +
                                              std::to_string(gpus.size()) + "x80GiB:H100'"};
        }
      }
    }
    std::vector<mgm::sim::device_spec> specs;
    for (std::size_t i = 0; i < gpus.size(); ++i) {
      const auto& g = gpus[i];
      mgm::sim::device_spec s;
      s.name = !given.empty() ? given[i].name : g.name.empty() ? "GPU" : g.name;
      s.memory_bytes = !given.empty() ? given[i].memory_bytes : g.memory_bytes;
      s.compute_capability = g.compute_capability != 0 ? g.compute_capability : 90;
      s.numa_node = g.numa_node;
      s.pcie_p2p = g.pcie_p2p;
      specs.push_back(std::move(s));
    }
    return {mgm::sim::machine{std::move(specs), std::move(links), std::filesystem::path{what}.filename().string()},
            source};
  }
  // Not a file, and no digit to start a device list: a preset's name, or a mistyped one.
  const bool preset = is_preset(what);
  if (!preset && (what.empty() || std::isdigit(static_cast<unsigned char>(what.front())) == 0)) unknown_preset(what);
  try {
    return {mgm::sim::machine::from_string(what), preset ? "preset " + what : std::string{"the device list"}};
  } catch (const std::exception& e) {
    throw tool_error{exit_bad_input, "--sim " + what + ": " + e.what() +
                                         " (give a preset, a device list such as 4x80GiB, or a topology file)"};
  }
}

sim_links make_sim_links(const context& ctx) {
  if (!std::filesystem::is_directory(ctx.sim) && names_a_file(ctx.sim)) {
    sim_links v;
    v.name = "sim:" + std::filesystem::path{ctx.sim}.filename().string();
    v.links = read_topology_file(ctx.sim);
    const auto given = ctx.sim_devices.empty() ? std::vector<mgm::sim::device_spec>{}
                                               : read_sim_devices(ctx, v.links.gpus().size());
    for (std::size_t i = 0; i < v.links.gpus().size(); ++i) {
      const auto& g = v.links.gpus()[i];
      v.gpu_names.push_back(!given.empty() ? given[i].name : g.name.empty() ? "GPU" : g.name);
    }
    return v;
  }
  auto m = make_sim_machine(ctx).machine;
  sim_links v;
  v.name = "sim:" + m.name();
  v.links = m.links();
  for (int d = 0; d < m.device_count(); ++d) v.gpu_names.push_back(m.spec(mgm::device_id{d}).name);
  return v;
}

void no_gpu(const std::string& why) {
  throw tool_error{exit_no_gpu, "no GPU can be used on this machine (" + why +
                                    ").\nTry a simulated machine instead, for example: mgm --sim dgx-h100 status"};
}

std::chrono::duration<double> parse_duration(const std::string& text) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    used = 0;
  }
  const std::string unit = used == 0 ? std::string{} : text.substr(used);
  double scale = -1;
  if (unit.empty() || unit == "s") scale = 1;
  else if (unit == "ms") scale = 1e-3;
  else if (unit == "m" || unit == "min") scale = 60;
  else if (unit == "h") scale = 3600;
  else if (unit == "d") scale = 86400;
  if (used == 0 || scale < 0 || !std::isfinite(v) || v < 0) {
    throw tool_error{exit_bad_input, "'" + text + "' is not a duration (write 5s, 500ms, 10m, 1h or 2d)"};
  }
  if (v * scale > 366.0 * 86400) throw tool_error{exit_bad_input, "'" + text + "' is too long (at most a year)"};
  return std::chrono::duration<double>{v * scale};
}

std::vector<std::string> wrap_words(const std::string& text, std::size_t width) {
  std::vector<std::string> lines;
  std::istringstream words{text};
  std::string line;
  for (std::string w; words >> w;) {
    if (w.size() > width) w = w.substr(0, width - 1) + "~";
    if (!line.empty() && line.size() + 1 + w.size() > width) {
      lines.push_back(line);
      line.clear();
    }
    line += (line.empty() ? "" : " ") + w;
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

mgm::topology read_topology_file(const std::string& path) {
  const std::string text = read_file(path);
  try {
    return text.find("<system") != std::string::npos ? mgm::parse_nccl_topology_xml(text)
                                                     : mgm::parse_smi_topology(text);
  } catch (const mgm::parse_error& e) {
    throw tool_error{exit_bad_input, path + ":" + std::to_string(e.line()) + ": " + e.what()};
  }
}

std::string size_or_dash(const std::optional<std::uint64_t>& bytes) {
  return bytes ? mgm::format_bytes(static_cast<std::size_t>(*bytes)) : std::string{"--"};
}

std::string read_file(const std::string& path) {
  require_file(path);
  std::ifstream in{path, std::ios::binary};
  if (!in) throw tool_error{exit_bad_input, "cannot read " + path};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace mgm_tool

int main(int argc, char** argv) {
  using namespace mgm_tool;
  CLI::App app{"mgm: memory, topology, logs, leaks, plans and allocation replays across all the GPUs of a machine.\n"
               "Without a GPU, --sim PRESET runs every command on a simulated machine.",
               "mgm"};
  app.set_version_flag("--version", std::string{"mgm "} + MGM_VERSION);
  app.require_subcommand(1);
  app.fallthrough();
  context ctx;
  app.add_option("--sim", ctx.sim,
                 "A simulated machine: a preset (dgx1-v100, dgx-a100, dgx-h100, hgx-h200, pcie-4gpu-mixed), a device "
                 "list (2x24GiB:RTX 4090) or a topology file (nvidia-smi topo -m text, NCCL XML)");
  app.add_option("--sim-devices", ctx.sim_devices,
                 "The GPUs of a --sim topology file, in GPU order, as a device list: 8x80GiB:H100, or "
                 "1x32GiB:RTX 5090,1x24GiB:RTX 4090 (a topology file gives links, not memory)");
  app.add_flag("--json", ctx.json, "Machine-readable output");
  app.parse_complete_callback([&ctx] { check_global_options(ctx); });
  app.footer("Exit codes: 0 ok, 1 usage, 2 bad input, 3 no GPU or driver.\nExample: mgm --sim dgx-h100 status");
  add_status(app, ctx);
  add_log(app, ctx);
  add_topo(app, ctx);
  add_plan(app, ctx);
  add_leak(app, ctx);
  add_plot(app, ctx);
  add_replay(app, ctx);
  add_serve(app, ctx);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? exit_ok : exit_usage;
  } catch (const tool_error& e) {
    std::fprintf(stderr, "mgm: %s\n", for_people(e.what()).c_str());
    return e.exit_code;
  } catch (const mgm::parse_error& e) {
    std::fprintf(stderr, "mgm: line %zu: %s\n", e.line(), for_people(e.what()).c_str());
    return exit_bad_input;
  } catch (const mgm::cuda_error& e) {
    std::fprintf(stderr, "mgm: %s\n", for_people(e.what()).c_str());
    const bool no_gpu = e.code() == cudaErrorNoDevice || e.code() == cudaErrorInsufficientDriver;
    return no_gpu ? exit_no_gpu : exit_bad_input;
  } catch (const mgm::logic_error& e) {
    std::fprintf(stderr, "mgm: %s\n", for_people(e.what()).c_str());
    return exit_bad_input;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mgm: %s\n", for_people(e.what()).c_str());
    return exit_bad_input;
  }
  return exit_ok;
}
