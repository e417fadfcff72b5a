// The start-up of every program linked to the telemetry layer: telemetry's pool observer is
// installed before main, so that MGM_PUBLISH=1 publishes from the first pool on. A static in a
// static library is linked only when something names it: CMakeLists.txt names this one
// (-Wl,--undefined=mgm_telemetry_startup) in the link of every user of the library.
#include <mgm/telemetry/pool_registry.hpp>

extern "C" {
// NOLINTNEXTLINE(cppcoreguidelines-avoid-non-const-global-variables): read by nobody; the linker keeps it
extern const int mgm_telemetry_startup;
const int mgm_telemetry_startup = [] {
  mgm::telemetry::install_pool_observer();
  return 1;
}();
}
