// PI, position interpolation (the LPES paper's uniform baseline): one RoPE
// scale for every layer and head, written to the `rope_scale` field that LPES
// owns (methods/lpes.hpp). Its one gene `scale` is set by the experiment's
// objective.pi section; the paper's value is the search itself.
#pragma once

#include "methods/lpes.hpp"

namespace midtune {

// PI decode: a single row with a single value applies everywhere.
RopeScale uniform_rope_scale(double scale);

const MethodModule& pi_method();

}  // namespace midtune
