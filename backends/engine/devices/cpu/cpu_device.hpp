// The CPU body of Device (device.hpp): the CPU engine's kernels behind the
// one forward pass. Weights keep the form their GGUF type calls for
// (ops/weight_matrix.hpp: the packed int8 path per ISA, the float paths;
// every part F32 with `precision: fp32`); the embedding rows are
// dequantised from the mapped file as they are read; keys are cached
// rotated and transposed in 16-key blocks per slot, values per KV head, for
// the tiled attention bodies (ops/attention.hpp), in fp32 or bf16. Ops run on the calling
// thread's TBB arena (EngineOptions::threads), the row-wise ones in
// parallel only for prefill-sized calls. "Device memory" is host memory.
#pragma once

#include <memory>
#include <string>

#include "backends/engine/devices/device.hpp"
#include "backends/engine/devices/host_memory.hpp"
#include "backends/engine/ops/dispatch.hpp"

namespace midtune::engine {

class CpuDevice final : public HostMemoryDevice<Device> {
 public:
  // Throws std::invalid_argument when `isa` is not available on this CPU.
  // fp32_weights: every matrix dequantised to F32 (backend.precision: fp32);
  // kv_form: the caches' element (backend.kv_cache).
  explicit CpuDevice(Isa isa = best_isa(), bool fp32_weights = false, KvForm kv_form = KvForm::fp32);
  ~CpuDevice() override;

  Isa isa() const { return isa_; }
  std::string name() const override;
  std::uint32_t max_head_dim() const override { return 512; }
  bool loads_in_parallel() const override { return true; }
  std::size_t kv_value_bytes() const override { return kv_form_ == KvForm::bf16 ? 2 : sizeof(float); }

  // The ops over rows: ops/'s host bodies with this ISA's SIMD bodies, a
  // prefill's rows across the threads.
  OpTarget op_target() const override { return OpTarget::host(isa_, true); }

  std::unique_ptr<DeviceMatrix> load_matrix(const std::vector<MatrixPart>& parts, int cols) override;
  std::unique_ptr<DeviceEmbedding> load_embedding(const MatrixPart& table, int width, std::size_t row_bytes) override;

  void embed(const DeviceEmbedding& table, const std::int32_t* tokens, int count, float scale, float* out) override;
  void matmul(const DeviceMatrix& w, const float* x, std::size_t ld_x, int rows, float* y,
              std::size_t ld_y) override;

  std::unique_ptr<LayerKv> make_layer_kv(int capacity, int slots, int kv_heads, int head_dim) override;
  void cache_keys(LayerKv& kv, int start, const float* keys, std::size_t ld, int tokens, int rope_dims,
                  RopePairing pairing, const float* cos_sin, std::size_t slot_table_stride) override;
  void cache_values(LayerKv& kv, int start, const float* values, std::size_t ld, int tokens) override;
  void attention(const float* q, std::size_t q_ld, const LayerKv& kv, int tokens, int past, int heads, int window,
                 float scale, const ScoreShaping& shaping, float* out, std::size_t out_ld,
                 const AttentionReadouts& readouts) override;
  void add_key0_correction(float* out, std::size_t out_ld, int tokens, int heads, const LayerKv& kv,
                           const float* key0_weight, const float* factors) override;

 private:
  struct Scratch;
  Isa isa_;
  bool fp32_weights_;
  KvForm kv_form_;
  std::unique_ptr<Scratch> scratch_;
};

}  // namespace midtune::engine
