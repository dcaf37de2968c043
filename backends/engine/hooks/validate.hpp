// Model-aware validation of an Intervention before the engine runs it. Each
// method's module checks its own field (methods/<method>.cpp) and the
// registry runs them all: midtune::validate_intervention(intervention,
// ModelShape), visible here for the engine's hooks.
#pragma once

#include "methods/registry.hpp"
