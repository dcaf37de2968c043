// Runtime CPU dispatch: which instruction sets this machine (and OS) offers,
// and which kernel family the engine uses. MIDTUNE_ISA=scalar|avx2|avx512
// caps the choice (tests and benchmarks compare the paths that way).
#pragma once

#include <string>

namespace midtune::engine {

enum class Isa { scalar = 0, avx2 = 1, avx512vnni = 2 };

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512vnni = false;
  bool avxvnni = false;
};

const CpuFeatures& cpu_features();
// Is this kernel family runnable here?
bool isa_available(Isa isa);
// Best available family, capped by MIDTUNE_ISA when set (throws
// std::invalid_argument for an unknown value).
Isa best_isa();
const char* to_string(Isa isa);

}  // namespace midtune::engine
