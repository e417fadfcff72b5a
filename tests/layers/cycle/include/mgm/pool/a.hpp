// Fixture for the layering gate: two headers of one layer including each other. Never compiled.
#pragma once
#include <mgm/pool/b.hpp>
