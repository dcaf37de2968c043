// Where an op over plain rows of device memory runs, as its device says
// (Device::op_target): on the host, with the SIMD bodies of `isa` and a
// prefill's rows split across oneTBB's threads where `parallel_rows` (the
// CPU device; the host reference: scalar and serial), or on a CUDA stream.
//
// Such an op (a norm, RoPE, the activation, a row update, a method's
// readout, scoring) is written once for every device: its header declares
// its host body, its CUDA body (namespace cuda) and the entry the model
// calls, ops::<op>(const OpTarget&, ...), which its <op>_cpu.cpp defines as
// "the CUDA body on a CUDA target, else the host body". No device class
// names it. Ops over a device's own forms (its weights, its KV cache: the
// products, caching, attention) stay Device's virtuals.
#pragma once

#include <stdexcept>
#include <string>

#include "backends/engine/ops/dispatch.hpp"

namespace midtune::engine {

struct OpTarget {
  enum class Kind { host, cuda };
  Kind kind = Kind::host;
  Isa isa = Isa::scalar;       // host: the SIMD bodies' ISA
  bool parallel_rows = false;  // host: split a prefill's rows across threads
  void* stream = nullptr;      // cuda: the cudaStream_t the op is queued on

  static OpTarget host(Isa isa, bool parallel_rows) { return {Kind::host, isa, parallel_rows, nullptr}; }
  static OpTarget cuda(void* stream) { return {Kind::cuda, Isa::scalar, false, stream}; }
  bool on_cuda() const { return kind == Kind::cuda; }
};

// A CUDA target reached `op` in a build without CUDA (no device of that
// build can make one).
[[noreturn]] inline void no_cuda_body(const char* op) {
  throw std::logic_error(std::string(op) + ": a CUDA target in a build without CUDA");
}

}  // namespace midtune::engine

// In an ops::<op> entry: `return <the CUDA body's call>` in a build with
// CUDA, else no_cuda_body (the CUDA bodies are compiled only there).
#if defined(MIDTUNE_WITH_CUDA)
#define MIDTUNE_CUDA_BODY(call) return call
#else
#define MIDTUNE_CUDA_BODY(call) no_cuda_body(__func__)
#endif
