#include "backends/engine/devices/cuda/cuda_ops_device.hpp"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/engine/devices/cuda/devices.hpp"

#if defined(MIDTUNE_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "backends/engine/ops/block_gemv.hpp"
#include "backends/engine/ops/cuda_ops.hpp"
#include "backends/engine/ops/decode_split.hpp"
#include "backends/engine/ops/flash_attention_cuda.hpp"
#if defined(MIDTUNE_WITH_CUDNN)
#include "backends/engine/ops/cudnn_attention_cuda.hpp"
#endif
#endif

namespace midtune::engine::devices {

#if defined(MIDTUNE_WITH_CUDA)

namespace {

void check(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess) {
    throw std::runtime_error("cuda: " + what + ": " + cudaGetErrorName(status) + ": " + cudaGetErrorString(status));
  }
}

class CudaOps final : public DeviceOps {
 public:
  explicit CudaOps(int index) : index_(index) {
    check(cudaSetDevice(index), "select device " + std::to_string(index));
    cudaStream_t stream = nullptr;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "create stream");
    stream_ = stream;
    cublas_ = std::make_unique<cuda::CublasContext>();
    cudaDeviceProp props{};
    check(cudaGetDeviceProperties(&props, index), "device properties");
    name_ = std::string("cuda:") + std::to_string(index) + " (" + props.name + ")";
    splitting_.multiprocessors = props.multiProcessorCount;
    splitting_.max_splits = decode_splits_from_environment();
    // Flash unless the environment asks otherwise: on an H100 it keeps more
    // of the tensor cores' speed than the cuBLAS body at every prefill length
    // (the cuBLAS body writes, reads and rewrites every score).
    set_prefill_attention(PrefillAttention::flash);
    if (const char* body = std::getenv("MIDTUNE_CUDA_ATTENTION"); body != nullptr && *body != '\0') {
      set_prefill_attention(parse_prefill_attention(body, "MIDTUNE_CUDA_ATTENTION"));
    }
  }
  ~CudaOps() override {
    if (scores_ != nullptr) release(scores_);
    if (splitting_.workspace != nullptr) release(splitting_.workspace);
    if (bf16_ != nullptr) release(bf16_);
    if (float_ != nullptr) release(float_);
    if (weight_tile_ != nullptr) release(weight_tile_);
#if defined(MIDTUNE_WITH_CUDNN)
    cudnn_.reset();
#endif
    cublas_.reset();
    if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  }

  std::string name() const override { return name_; }
  OpTarget op_target() const override { return OpTarget::cuda(stream_); }

  void* allocate(std::size_t bytes) override {
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, std::max<std::size_t>(bytes, 1));
    if (status != cudaSuccess) {
      throw std::runtime_error(name_ + ": cannot allocate " + std::to_string(bytes) + " bytes (" +
                               std::to_string(free_bytes()) + " free): " + cudaGetErrorString(status));
    }
    return p;
  }
  void release(void* pointer) noexcept override { cudaFree(pointer); }
  void upload(void* device, const void* host, std::size_t bytes) override {
    if (bytes == 0) return;
    check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream()), "upload");
    // The host buffer may be freed as soon as this returns.
    check(cudaStreamSynchronize(stream()), "upload");
  }
  void download(void* host, const void* device, std::size_t bytes) override {
    if (bytes == 0) return;
    check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream()), "download");
    check(cudaStreamSynchronize(stream()), "download");
  }
  void copy_rows(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch, std::size_t row_bytes,
                 int rows) override {
    if (rows <= 0 || row_bytes == 0) return;
    check(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, static_cast<std::size_t>(rows),
                            cudaMemcpyDeviceToDevice, stream()),
          "copy rows");
  }
  void synchronize() override { check(cudaStreamSynchronize(stream()), "synchronize"); }
  std::size_t free_bytes() const override {
    std::size_t free = 0, total = 0;
    return cudaMemGetInfo(&free, &total) == cudaSuccess ? free : 0;
  }

  void embed_rows(const float* table, int width, const std::int32_t* tokens, int count, float scale,
                  float* out) override {
    cuda::embed(table, width, tokens, count, scale, out, stream_);
  }
  void to_bf16(const float* x, std::size_t count, std::uint16_t* out) override { cuda::to_bf16(x, count, out, stream_); }
  void matmul_bf16(const std::uint16_t* x, std::size_t ld_x, int rows, int inputs, const std::uint16_t* w,
                   int outputs, float* y, std::size_t ld_y) override {
    cuda::matmul_bf16(*cublas_, x, ld_x, rows, inputs, w, outputs, y, ld_y, stream_);
  }
  void attention_rows(const float* q, std::size_t q_ld, const float* keys, const float* values, std::size_t kv_ld,
                      int tokens, int past, int heads, int kv_heads, int head_dim, int window, float scale,
                      const ScoreShaping& shaping, float* out, std::size_t out_ld,
                      const AttentionReadouts& readouts) override {
    attend(q, q_ld, keys, values, kv_ld, tokens, past, heads, kv_heads, head_dim, window, scale, shaping, out, out_ld,
           readouts);
  }
  void attention_rows_bf16(const float* q, std::size_t q_ld, const std::uint16_t* keys, const std::uint16_t* values,
                           std::size_t kv_ld, int tokens, int past, int heads, int kv_heads, int head_dim, int window,
                           float scale, const ScoreShaping& shaping, float* out, std::size_t out_ld,
                           const AttentionReadouts& readouts) override {
    attend(q, q_ld, keys, values, kv_ld, tokens, past, heads, kv_heads, head_dim, window, scale, shaping, out, out_ld,
           readouts);
  }
  // Decode steps and short calls take the one-block-per-query kernel; a
  // prefill the cuBLAS body, the flash body or cuDNN's (prefill_attention()),
  // whose products use the tensor cores (the kernel would re-read every key
  // once per query); calls cuDNN's body does not take go to the flash body.
  // Kv: the cache's element (float, or bf16 bits). Only the kernel reads out
  // each query's log-sum-exp (a remapped attention's two parts,
  // merge_attention.hpp), so such calls take it at any length.
  template <typename Kv>
  void attend(const float* q, std::size_t q_ld, const Kv* keys, const Kv* values, std::size_t kv_ld, int tokens,
              int past, int heads, int kv_heads, int head_dim, int window, float scale, const ScoreShaping& shaping,
              float* out, std::size_t out_ld, const AttentionReadouts& readouts) {
    float* const key0_weight = readouts.key0_weight;
    float* const last_row = readouts.last_row;
    if (tokens < kGemmAttentionTokens || heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0 ||
        readouts.log_sum_exp != nullptr) {
      cuda::attention(q, q_ld, keys, values, kv_ld, tokens, past, heads, kv_heads, head_dim, window, scale, shaping,
                      out, out_ld, key0_weight, last_row, readouts.log_sum_exp, stream_);
      return;
    }
#if defined(MIDTUNE_WITH_CUDNN)
    if (prefill_attention() == PrefillAttention::cudnn && cuda::CudnnAttention::takes(head_dim)) {
      if (!cudnn_) cudnn_ = std::make_unique<cuda::CudnnAttention>(stream_);
      if (cudnn_->run(q, q_ld, keys, values, kv_ld, tokens, past, heads, kv_heads, head_dim, window, scale, shaping,
                      out, out_ld, key0_weight, last_row)) {
        ran_prefill_attention(PrefillAttention::cudnn);
        return;
      }
    }
#endif
    if (prefill_attention() != PrefillAttention::gemm) {
      ran_prefill_attention(PrefillAttention::flash);
      grow(scores_, scores_capacity_, cuda::attention_flash_workspace(tokens, past, kv_heads, head_dim));
      cuda::attention_flash(q, q_ld, keys, values, kv_ld, tokens, past, heads, kv_heads, head_dim, window, scale,
                            shaping, out, out_ld, key0_weight, last_row, scores_, scores_capacity_, stream_);
      return;
    }
    ran_prefill_attention(PrefillAttention::gemm);
    const int group = heads / kv_heads;
    constexpr bool bf16 = std::is_same_v<Kv, std::uint16_t>;
    const std::size_t least = cuda::attention_gemm_workspace(tokens, past, kv_heads, head_dim, group, bf16);
    const std::size_t all = cuda::attention_gemm_workspace(tokens, past, kv_heads, head_dim, heads, bf16);
    // Every head at once where that stays under kScoresBytes, else whole GQA groups.
    const std::size_t wanted = std::max(least, std::min(all, kScoresBytes));
    grow(scores_, scores_capacity_, wanted);
    cuda::attention_gemm(*cublas_, q, q_ld, keys, values, kv_ld, tokens, past, heads, kv_heads, head_dim, window,
                         scale, shaping, out, out_ld, key0_weight, last_row, scores_, scores_capacity_, stream_);
  }
  // Every sequence's caching, rotation and attention in two launches (per
  // 64 sequences), the sequences' caches and lengths in the launch itself.
  void decode_attention(const DecodeBatch& b) override {
    entries_.clear();
    for (const DecodeSequence& s : b.sequences) {
      if (s.kv == nullptr || s.tokens < 0 || s.past < 0 || s.past + s.tokens > s.kv->capacity) {
        throw std::invalid_argument("decode_attention (cuda): a sequence's " + std::to_string(s.past) + " + " +
                                    std::to_string(s.tokens) + " tokens do not fit its cache");
      }
      if (s.kv->kv_heads != b.kv_heads || s.kv->head_dim != b.head_dim) {
        throw std::invalid_argument("decode_attention (cuda): a cache of another layer shape");
      }
      const KvRows rows = rows_of(*s.kv);
      entries_.push_back(
          {rows.keys, rows.values, s.scales, s.row, s.tokens, s.past, s.kv->slots, rows.form == KvForm::bf16});
    }
    if (splitting_.max_splits > 1 && splitting_.workspace == nullptr) {
      splitting_.workspace_bytes = cuda::decode_split_workspace_bytes(splitting_.multiprocessors);
      splitting_.workspace = static_cast<float*>(allocate(splitting_.workspace_bytes));
    }
    cuda::decode_attention(entries_.data(), static_cast<int>(entries_.size()), b.qkv, b.qkv_ld, b.positions,
                           b.inverse_frequencies, b.rope_dims, b.pairing, b.heads, b.kv_heads, b.head_dim, b.window,
                           b.scale, b.shaping, b.q_rot, b.q_rot_ld, b.out, b.out_ld, splitting_, stream_);
  }
  void add_key0_correction_rows(float* out, std::size_t out_ld, int tokens, int heads, int kv_heads, int head_dim,
                                const float* key0_weight, const float* factors, const float* values,
                                std::size_t kv_ld) override {
    (void)kv_ld;  // only row 0 of the values is read
    cuda::add_key0_correction(out, out_ld, tokens, heads, kv_heads, head_dim, key0_weight, factors, values, stream_);
  }
  void dequantize_bf16(GgmlType type, const void* blocks, std::size_t row_bytes, int rows, int cols,
                       std::uint16_t* out) override {
    cuda::dequantize_bf16(static_cast<std::uint32_t>(type), blocks, row_bytes, rows, cols, out, stream_);
  }
  void matmul_blocks(GgmlType type, const void* blocks, std::size_t row_bytes, int outputs, int cols,
                     const std::uint16_t* x, std::size_t ld_x, int rows, float* y, std::size_t ld_y) override {
    cuda::block_gemv(static_cast<std::uint32_t>(type), blocks, row_bytes, outputs, cols, x, ld_x, rows, y, ld_y,
                     stream_);
  }
  std::uint16_t* weight_scratch(std::size_t count) override {
    return static_cast<std::uint16_t*>(grow(weight_tile_, weight_tile_capacity_, count * sizeof(std::uint16_t)));
  }
  void from_bf16(const std::uint16_t* x, std::size_t count, float* out) override {
    cuda::from_bf16(x, count, out, stream_);
  }
  float* float_scratch(std::size_t count) override {
    return static_cast<float*>(grow(float_, float_capacity_, count * sizeof(float)));
  }
  std::uint16_t* bf16_scratch(std::size_t count) override {
    return static_cast<std::uint16_t*>(grow(bf16_, bf16_capacity_, count * sizeof(std::uint16_t)));
  }

 private:
  cudaStream_t stream() const { return static_cast<cudaStream_t>(stream_); }
  // A workspace of at least `bytes` (contents lost when it grows).
  void* grow(void*& buffer, std::size_t& capacity, std::size_t bytes) {
    if (capacity < bytes) {
      if (buffer != nullptr) release(buffer);
      buffer = nullptr;
      capacity = 0;
      buffer = allocate(bytes);
      capacity = bytes;
    }
    return buffer;
  }
  // A decode step's most key parts a query (cuda::DecodeSplitting):
  // MIDTUNE_CUDA_DECODE_SPLITS=N (1 never splits, to measure against),
  // else as many as pay.
  static int decode_splits_from_environment() {
    const char* text = std::getenv("MIDTUNE_CUDA_DECODE_SPLITS");
    if (text == nullptr || *text == '\0') return decode_split::kMaxSplits;
    char* end = nullptr;
    const long n = std::strtol(text, &end, 10);
    if (*end != '\0' || n < 1 || n > decode_split::kMaxSplits) {
      throw std::invalid_argument(std::string("MIDTUNE_CUDA_DECODE_SPLITS: '") + text + "': must be 1.." +
                                  std::to_string(decode_split::kMaxSplits) + " (1: never split a decode step's keys)");
    }
    return static_cast<int>(n);
  }
  static constexpr int kGemmAttentionTokens = 32;
  static constexpr std::size_t kScoresBytes = std::size_t{1} << 30;
  int index_ = 0;
  std::vector<cuda::DecodeEntry> entries_;  // decode_attention's, kept for the next step
  cuda::DecodeSplitting splitting_;         // its workspace made at the first decode step
  void* scores_ = nullptr;  // the prefill attention bodies' workspace (cuBLAS: scores; flash: fp16 K, V)
  void* bf16_ = nullptr;    // a product's input in bf16
  std::size_t bf16_capacity_ = 0;  // bytes
  void* float_ = nullptr;  // rows on their way into a bf16 KV cache
  std::size_t float_capacity_ = 0;  // bytes
  void* weight_tile_ = nullptr;  // a `file` product's weights in bf16
  std::size_t weight_tile_capacity_ = 0;  // bytes
  std::size_t scores_capacity_ = 0;  // bytes
  void* stream_ = nullptr;
  std::unique_ptr<cuda::CublasContext> cublas_;
#if defined(MIDTUNE_WITH_CUDNN)
  std::unique_ptr<cuda::CudnnAttention> cudnn_;  // made at the first call it takes
#endif
  std::string name_;
};

}  // namespace

std::unique_ptr<DeviceOps> make_cuda_ops(int index) {
  const CudaDeviceReport report = cuda_devices();
  if (report.devices.empty()) {
    throw std::invalid_argument("backend.device: 'cuda': no CUDA device on this machine (" + report.why_none + ")");
  }
  if (index < 0 || index >= static_cast<int>(report.devices.size())) {
    throw std::invalid_argument("backend.gpu: " + std::to_string(index) + " but this machine has " +
                                std::to_string(report.devices.size()) + " CUDA device(s): " + describe(report));
  }
  return std::make_unique<CudaOps>(index);
}

#else

std::unique_ptr<DeviceOps> make_cuda_ops(int index) {
  (void)index;
  throw std::invalid_argument("backend.device: 'cuda': " + cuda_devices().why_none);
}

#endif

}  // namespace midtune::engine::devices
