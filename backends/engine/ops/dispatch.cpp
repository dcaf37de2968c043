#include "backends/engine/ops/dispatch.hpp"

#include <cstdlib>
#include <stdexcept>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace midtune::engine {

namespace {
CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  // __builtin_cpu_supports also checks that the OS saves the wide registers.
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
  f.avx512bf16 = __builtin_cpu_supports("avx512bf16");
  // F16C and AVX-VNNI from CPUID itself: clang before 16 knows neither name
  // in __builtin_cpu_supports (the sanitizer tree builds with clang). Both
  // work on ymm registers, whose OS support the AVX2 check above covers, and
  // every ISA that uses them requires AVX2 or AVX-512 too.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx)) f.f16c = (ecx & bit_F16C) != 0;
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) f.avxvnni = (eax & bit_AVXVNNI) != 0;
#endif
  return f;
}
}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

bool isa_available(Isa isa) {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case Isa::scalar: return true;
    case Isa::avx2: return f.avx2 && f.fma && f.f16c;
    case Isa::avxvnni: return isa_available(Isa::avx2) && f.avxvnni;
    case Isa::avx512vnni: return f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni && f.f16c;
    case Isa::avx512bf16: return isa_available(Isa::avx512vnni) && f.avx512bf16;
  }
  return false;
}

const char* to_string(Isa isa) {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avxvnni: return "avxvnni";
    case Isa::avx512vnni: return "avx512vnni";
    case Isa::avx512bf16: return "avx512bf16";
  }
  return "?";
}

Isa parse_isa(const std::string& value, const std::string& what) {
  if (value == "avx512") return Isa::avx512vnni;
  for (Isa isa : kAllIsas) {
    if (value == to_string(isa)) return isa;
  }
  throw std::invalid_argument(what + ": unknown value '" + value +
                              "' (expected scalar, avx2, avxvnni, avx512 (= avx512vnni) or avx512bf16)");
}

void require_isa(const char* op, Isa isa) {
  if (!isa_available(isa)) {
    throw std::invalid_argument(std::string(op) + ": ISA " + to_string(isa) +
                                " is not available on this machine or build");
  }
}

Isa best_isa() {
  // avx512bf16 only when asked for: its one body (BF16 weights by vdpbf16ps)
  // rounds activations to bf16 and was no faster than the fp32 AVX-512 body
  // where measured (bench/RESULTS.md), so by default BF16 models keep fp32
  // activations.
  Isa cap = Isa::avx512vnni;
  if (const char* env = std::getenv("MIDTUNE_ISA"); env != nullptr && *env != '\0') {
    cap = parse_isa(env, "MIDTUNE_ISA");
  }
  for (int i = static_cast<int>(cap); i > 0; --i) {
    if (isa_available(static_cast<Isa>(i))) return static_cast<Isa>(i);
  }
  return Isa::scalar;
}

}  // namespace midtune::engine
