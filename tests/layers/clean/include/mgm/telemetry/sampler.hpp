// Fixture for the layering gate: telemetry including the pool, a downward edge. Never compiled.
#pragma once
#include <mgm/pool/pool.hpp>
#include <mgm/telemetry/registry.hpp>
