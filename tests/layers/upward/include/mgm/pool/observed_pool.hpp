// Fixture for the layering gate: the pool including telemetry, an upward edge. Never compiled.
#pragma once
#include <mgm/telemetry/registry.hpp>
