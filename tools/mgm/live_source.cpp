// The live machine for `mgm status` and `mgm log` (see live_source.hpp).
#include "live_source.hpp"

#include <csignal>

namespace mgm_tool {

namespace tel = mgm::telemetry;

std::atomic<bool> g_interrupted{false};

namespace {
extern "C" void on_interrupt(int) { g_interrupted.store(true); }
}  // namespace

void stop_on_interrupt() {
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
}

std::unique_ptr<tel::source> open_source(const context& ctx, std::optional<sim_choice>& holder) {
  if (ctx.simulated()) {
    holder.emplace(make_sim_machine(ctx));
    return tel::make_sim_source(holder->machine);
  }
  std::string why;
  auto src = tel::make_system_source(&why);
  if (!src) no_gpu(why);
  return src;
}

}  // namespace mgm_tool
