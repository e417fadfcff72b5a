// Fixture for the layering gate: see a.hpp. Never compiled.
#pragma once
#include <mgm/pool/a.hpp>
