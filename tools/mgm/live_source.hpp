// `mgm status` and `mgm log`: the GPUs the options name (NVML, else CUDA; or the simulated
// machine), and Ctrl-C as a request to stop.
#pragma once

#include "mgm_tool.hpp"

#include <mgm/telemetry/source.hpp>

#include <atomic>
#include <memory>
#include <optional>

namespace mgm_tool {

/// @brief The source for the machine the options name; a simulated machine is kept alive by
/// `holder`. @throws tool_error (3) when there is no GPU and no --sim.
[[nodiscard]] std::unique_ptr<mgm::telemetry::source> open_source(const context& ctx, std::optional<sim_choice>& holder);

/// @brief Set by SIGINT and SIGTERM once `stop_on_interrupt()` is called.
extern std::atomic<bool> g_interrupted;

/// @brief Ctrl-C (and SIGTERM) set `g_interrupted` instead of ending the process.
void stop_on_interrupt();

}  // namespace mgm_tool
