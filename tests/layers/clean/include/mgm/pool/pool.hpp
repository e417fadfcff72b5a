// Fixture for the layering gate: a pool header. Never compiled.
#pragma once
