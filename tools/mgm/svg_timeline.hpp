// The timeline chart of `mgm plot`: memory over time per GPU as SVG, with each GPU's fitted slope
// and verdict.
#pragma once

#include <mgm/telemetry/leak_analysis.hpp>
#include <mgm/telemetry/sample.hpp>

#include <string>
#include <vector>

namespace mgm_tool {

/// @brief The SVG document: one line per GPU (broken where the readings stop), its fit dashed, a
/// legend wrapped by words beside the plot, the time axis in seconds, minutes, hours or days.
[[nodiscard]] std::string svg_timeline(const std::string& title, const mgm::telemetry::gpu_log& log,
                                       const std::vector<mgm::telemetry::gpu_leak_report>& reports);

}  // namespace mgm_tool
