// Runtime CPU dispatch: which instruction sets this machine (and OS) offers,
// which family the engine uses, and the one rule every op picks its body by.
// MIDTUNE_ISA=scalar|avx2|avxvnni|avx512|avx512bf16 caps the choice (tests
// and benchmarks compare the paths that way).
//
// The families, each an instruction set a body may use:
//   scalar; avx2 (AVX2, FMA, F16C); avxvnni (avx2 plus AVX-VNNI: vpdpbusd
//   on 256-bit registers, as Intel's AVX2 client and E-core server CPUs
//   have without AVX-512); avx512vnni (AVX-512 F/BW/VL/VNNI, F16C);
//   avx512bf16 (avx512vnni plus AVX512-BF16: the bf16 dot product
//   vdpbf16ps, which only the float matmul of BF16 weights uses).
// They are ordered as listed, and each includes every lower one except
// that avx512vnni need not include avxvnni (Ice Lake has AVX-512 VNNI but
// not AVX-VNNI): an avx512vnni CPU runs its avx512 bodies, and never falls
// to an avxvnni one it cannot run.
//
// Every op (ops/<op>.hpp) has a scalar reference body and may have SIMD
// bodies (ops/cpu/, compiled with that ISA's flags only). The dispatch rule,
// the same for every op (select_body below):
//   1. asking for an ISA this CPU (or OS) does not offer throws
//      std::invalid_argument naming the op and the ISA;
//   2. otherwise the op runs its body for the highest ISA at or below the one
//      asked for that this build has and this CPU offers (an op without an
//      AVX2 body runs its scalar body under Isa::avx2; the scalar body
//      always exists);
//   3. a SIMD body may hand an argument shape it has no vector path for to
//      the scalar reference; the op's header says which shapes.
// A later GPU body slots in beside these without touching the model code.
#pragma once

#include <array>
#include <stdexcept>
#include <string>

namespace midtune::engine {

enum class Isa { scalar = 0, avx2 = 1, avxvnni = 2, avx512vnni = 3, avx512bf16 = 4 };

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512vnni = false;
  bool avxvnni = false;
  bool avx512bf16 = false;
};

const CpuFeatures& cpu_features();
// Is this kernel family runnable here?
bool isa_available(Isa isa);
// Best available family up to avx512vnni, or up to MIDTUNE_ISA when set
// (avx512bf16 runs only when asked for; throws std::invalid_argument for an
// unknown value).
Isa best_isa();
const char* to_string(Isa isa);
// scalar, avx2, avxvnni, avx512 (= avx512vnni), avx512vnni, avx512bf16; throws
// std::invalid_argument naming `what` and the accepted values otherwise.
Isa parse_isa(const std::string& value, const std::string& what);

inline constexpr int kIsaCount = 5;
// Every family, lowest first (tests loop over the available ones).
inline constexpr Isa kAllIsas[kIsaCount] = {Isa::scalar, Isa::avx2, Isa::avxvnni, Isa::avx512vnni, Isa::avx512bf16};

// Rule 1: throws std::invalid_argument "<op>: ISA <isa> is not available ..."
// unless isa_available(isa).
void require_isa(const char* op, Isa isa);

// Rules 1 and 2: `bodies[i]` is the op's body for Isa i (nullptr = none in
// this build; an initialiser list that stops early leaves the higher ones
// nullptr); bodies[scalar] must exist. A lower family's body runs only
// where the CPU offers that family too (avxvnni under avx512vnni).
template <typename Fn>
Fn select_body(const char* op, Isa isa, const std::array<Fn, kIsaCount>& bodies) {
  require_isa(op, isa);
  for (int i = static_cast<int>(isa); i >= 0; --i) {
    if (bodies[static_cast<std::size_t>(i)] != nullptr && isa_available(static_cast<Isa>(i)))
      return bodies[static_cast<std::size_t>(i)];
  }
  throw std::logic_error(std::string(op) + ": no scalar body");
}

}  // namespace midtune::engine
