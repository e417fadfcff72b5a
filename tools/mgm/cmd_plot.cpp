// mgm plot: memory over time per GPU, as an SVG chart.
#include "log_input.hpp"
#include "mgm_tool.hpp"
#include "svg_timeline.hpp"

#include <mgm/telemetry/leak_analysis.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace mgm_tool {

namespace tel = mgm::telemetry;

void add_plot(CLI::App& app, context& ctx) {
  auto* cmd = app.add_subcommand("plot", "Memory over time per GPU, with the fitted slope, as an SVG chart");
  auto file = std::make_shared<std::string>();
  auto output = std::make_shared<std::string>();
  auto title = std::make_shared<std::string>();
  auto lo = std::make_shared<log_options>();
  cmd->add_option("file", *file, "The log")->required();
  cmd->add_option("-o,--output", *output, "The SVG file to write")->required();
  cmd->add_option("--title", *title, "The chart's title (default: the log's name)");
  add_log_options(cmd, *lo);
  cmd->footer("Example: mgm plot gpus.csv -o timeline.svg");
  cmd->callback([&ctx, file, output, title, lo] {
    const auto log = read_log(*file, *lo);
    report_issues(*file, log);
    if (log.samples.empty()) throw tool_error{exit_bad_input, *file + ": no readings to plot"};
    const auto reports = tel::analyse_log(log);
    const std::string t = title->empty() ? "GPU memory: " + std::filesystem::path{*file}.filename().string() : *title;
    std::ofstream out{*output, std::ios::trunc};
    out << svg_timeline(t, log, reports);
    if (!out) throw tool_error{exit_bad_input, "cannot write " + *output};
    if (ctx.json) {
      const auto gpus = std::count_if(reports.begin(), reports.end(), [](const auto& r) { return !r.pid; });
      std::printf("%s\n", nlohmann::ordered_json{{"output", *output}, {"gpus", gpus}}.dump().c_str());
    } else {
      std::printf("wrote %s\n", output->c_str());
    }
  });
}

}  // namespace mgm_tool
