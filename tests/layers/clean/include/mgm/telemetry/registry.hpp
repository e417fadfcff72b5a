// Fixture for the layering gate: a telemetry header. Never compiled.
#pragma once
