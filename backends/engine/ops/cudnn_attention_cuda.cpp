// cuDNN's fused attention as a prefill body (contract:
// cudnn_attention_cuda.hpp): one cudnn-frontend graph per call shape, built
// on first use with cuDNN's heuristics and kept; each call packs its inputs
// to bf16, executes the graph on the device's stream and widens the output.
#include "backends/engine/ops/cudnn_attention_cuda.hpp"

#include <cudnn.h>
#include <cuda_runtime_api.h>

#include <cudnn_frontend.h>

#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/engine/ops/cuda_ops.hpp"

namespace midtune::engine::cuda {

namespace fe = cudnn_frontend;

namespace {

// The graph's tensors by uid (the variant pack names them so).
constexpr fe::graph::Tensor_attributes::uid_t kQ = 1, kK = 2, kV = 3, kO = 4, kStats = 5, kSlopes = 6;

// Everything a graph is built for: the call's shape, masks and score shaping.
struct GraphKey {
  int tokens, keys, heads, kv_heads, head_dim, window;
  float scale, softcap, max_alibi_bias;
  bool stats;
  bool shaped() const { return softcap != 0.0f || max_alibi_bias != 0.0f; }
  bool operator<(const GraphKey& o) const {
    return std::tie(tokens, keys, heads, kv_heads, head_dim, window, scale, softcap, max_alibi_bias, stats) <
           std::tie(o.tokens, o.keys, o.heads, o.kv_heads, o.head_dim, o.window, o.scale, o.softcap, o.max_alibi_bias,
                    o.stats);
  }
};

std::string describe(const GraphKey& k) {
  return std::to_string(k.tokens) + " queries over " + std::to_string(k.keys) + " keys, heads " +
         std::to_string(k.heads) + "/" + std::to_string(k.kv_heads) + ", head_dim " + std::to_string(k.head_dim) +
         (k.window > 0 ? ", window " + std::to_string(k.window) : "") +
         (k.softcap != 0.0f ? ", soft-cap " + std::to_string(k.softcap) : "") +
         (k.max_alibi_bias != 0.0f ? ", ALiBi max bias " + std::to_string(k.max_alibi_bias) : "");
}

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

fe::graph::Pointwise_attributes pointwise(const char* name, fe::PointwiseMode_t mode) {
  return fe::graph::Pointwise_attributes().set_name(name).set_mode(mode);
}

// The shaped scores of elementwise::shape_score, as a cuDNN score modifier
// on the scaled scores [1, head, query, key]: the soft-cap, then ALiBi's
// slope(head) * (key - (past + query)) with the slopes an input tensor, then
// the causal band and window. cuDNN applies none of its own masks to a graph
// with a score modifier, so the band is built here with the frontend's own
// sliding_window_mask, as its sdpa node would build it.
TensorPtr shape_and_mask_scores(const GraphKey& key, const TensorPtr& slopes,
                                const std::shared_ptr<fe::graph::Graph>& sub, TensorPtr score) {
  if (key.softcap != 0.0f) {
    auto cap = std::make_shared<fe::graph::Tensor_attributes>(key.softcap);
    score = sub->pointwise(score, cap, pointwise("div_by_softcap", fe::PointwiseMode_t::DIV));
    score = sub->pointwise(score, pointwise("softcap_tanh", fe::PointwiseMode_t::TANH_FWD));
    score = sub->pointwise(score, cap, pointwise("mul_by_softcap", fe::PointwiseMode_t::MUL));
  }
  if (key.max_alibi_bias != 0.0f) {
    const auto index = [&](const char* name, std::int64_t axis) {
      auto out = sub->pointwise(
          score,
          pointwise(name, fe::PointwiseMode_t::GEN_INDEX).set_axis(axis).set_compute_data_type(fe::DataType_t::INT32));
      out->set_data_type(fe::DataType_t::INT32);
      return out;
    };
    const auto int_op = [&](const char* name, fe::PointwiseMode_t mode, const TensorPtr& a, const TensorPtr& b) {
      auto out = sub->pointwise(a, b, pointwise(name, mode).set_compute_data_type(fe::DataType_t::INT32));
      out->set_data_type(fe::DataType_t::INT32);
      return out;
    };
    auto key_minus_query =
        int_op("alibi_key_minus_query", fe::PointwiseMode_t::SUB, index("alibi_key", 3), index("alibi_query", 2));
    auto past = std::make_shared<fe::graph::Tensor_attributes>(static_cast<std::int32_t>(key.keys - key.tokens));
    auto minus_distance = int_op("alibi_minus_distance", fe::PointwiseMode_t::SUB, key_minus_query, past);
    auto bias = sub->pointwise(minus_distance, slopes, pointwise("alibi_times_slope", fe::PointwiseMode_t::MUL));
    score = sub->pointwise(score, bias, pointwise("alibi_add", fe::PointwiseMode_t::ADD));
  }
  return fe::graph::attn::score_modifiers::sliding_window_mask(
      sub, score, fe::DiagonalAlignment_t::BOTTOM_RIGHT,
      key.window > 0 ? std::optional<std::int64_t>(key.window) : std::nullopt, std::optional<std::int64_t>(0),
      key.tokens, key.keys, nullptr, nullptr);
}

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("attention (cudnn): ") + what + ": " + cudaGetErrorString(status));
  }
}

// A [token][head][dim] bf16 buffer as the graph's [batch 1, head, token, dim] tensor.
fe::graph::Tensor_attributes token_major(const char* name, fe::graph::Tensor_attributes::uid_t uid, int heads,
                                         int tokens, int head_dim) {
  const std::int64_t h = heads, s = tokens, d = head_dim;
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_dim({1, h, s, d})
      .set_stride({s * h * d, d, h * d, 1});
}

}  // namespace

struct CudnnAttention::Impl {
  static constexpr std::size_t kMaxGraphs = 512;
  cudnnHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  std::map<GraphKey, std::shared_ptr<fe::graph::Graph>> graphs;
  std::set<GraphKey> refused;  // shapes cuDNN has no plan for: the flash body's
  // Device buffers, grown to the largest call so far.
  struct Buffer {
    void* p = nullptr;
    std::size_t bytes = 0;
  };
  Buffer q, k, v, o, stats, slopes, workspace;
  // The (heads, max bias) whose ALiBi slopes `slopes` holds: a model's
  // never change, so they are uploaded once, not at every call.
  std::pair<int, float> slopes_of{0, 0.0f};

  void* grow(Buffer& b, std::size_t bytes) {
    if (bytes > b.bytes) {
      if (b.p != nullptr) cudaFree(b.p);
      b.p = nullptr;
      b.bytes = 0;
      check_cuda(cudaMalloc(&b.p, bytes), "allocate a buffer");
      b.bytes = bytes;
    }
    return b.p;
  }

  // The graph of this shape, built on first use; nullptr where cuDNN
  // refuses it (said once).
  fe::graph::Graph* graph(const GraphKey& key) {
    if (auto found = graphs.find(key); found != graphs.end()) return found->second.get();
    if (refused.contains(key)) return nullptr;
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto Q = g->tensor(token_major("Q", kQ, key.heads, key.tokens, key.head_dim));
    auto K = g->tensor(token_major("K", kK, key.kv_heads, key.keys, key.head_dim));
    auto V = g->tensor(token_major("V", kV, key.kv_heads, key.keys, key.head_dim));
    auto options = fe::graph::SDPA_attributes()
                       .set_name("midtune_prefill_attention")
                       .set_generate_stats(key.stats)
                       .set_attn_scale(key.scale);
    if (key.shaped()) {
      TensorPtr slopes_in;
      if (key.max_alibi_bias != 0.0f) {
        const std::int64_t h = key.heads;
        slopes_in = g->tensor(fe::graph::Tensor_attributes()
                                  .set_name("alibi_slopes")
                                  .set_uid(kSlopes)
                                  .set_dim({1, h, 1, 1})
                                  .set_stride({h, 1, 1, 1})
                                  .set_data_type(fe::DataType_t::FLOAT));
      }
      options.set_score_mod([key, slopes_in](std::shared_ptr<fe::graph::Graph> sub, TensorPtr score) {
        return shape_and_mask_scores(key, slopes_in, sub, std::move(score));
      });
    } else {
      // Query t is position past + t of keys [0, past + tokens): the causal
      // diagonal aligned to the bottom right.
      options.set_diagonal_alignment(fe::DiagonalAlignment_t::BOTTOM_RIGHT).set_diagonal_band_right_bound(0);
      if (key.window > 0) options.set_diagonal_band_left_bound(key.window);
    }
    auto [O, Stats] = g->sdpa(Q, K, V, options);
    const std::int64_t h = key.heads, s = key.tokens, d = key.head_dim;
    O->set_output(true).set_dim({1, h, s, d}).set_stride({s * h * d, d, h * d, 1}).set_uid(kO);
    if (key.stats) Stats->set_output(true).set_data_type(fe::DataType_t::FLOAT).set_uid(kStats);
    fe::error_t built = g->build(handle, {fe::HeurMode_t::A});
    if (built.is_bad()) {
      std::fprintf(stderr, "attention (cudnn): no plan for %s (%s); the flash body runs it\n", describe(key).c_str(),
                   built.get_message().c_str());
      refused.insert(key);
      return nullptr;
    }
    // Prompts of many lengths would keep a graph each for good: past a few
    // hundred (a search's prompts span a hundred or so) start again.
    if (graphs.size() >= kMaxGraphs) graphs.clear();
    return graphs.emplace(key, std::move(g)).first->second.get();
  }

  template <typename Kv>
  bool run(const float* q_in, std::size_t q_ld, const Kv* keys, const Kv* values, std::size_t kv_ld, int tokens,
           int past, int heads, int kv_heads, int head_dim, int window, float scale,
           const elementwise::ScoreShaping& shaping, float* out, std::size_t out_ld, float* key0_weight,
           float* last_row) {
    if (tokens <= 0) return true;
    const int key_count = past + tokens;
    const GraphKey key{tokens,
                       key_count,
                       heads,
                       kv_heads,
                       head_dim,
                       window,
                       scale,
                       shaping.softcap,
                       shaping.max_alibi_bias,
                       key0_weight != nullptr};
    fe::graph::Graph* g = graph(key);
    if (g == nullptr) return false;
    const std::size_t q_elements = static_cast<std::size_t>(tokens) * heads * head_dim;
    const std::size_t kv_elements = static_cast<std::size_t>(key_count) * kv_heads * head_dim;
    auto* qb = static_cast<std::uint16_t*>(grow(q, q_elements * 2));
    auto* kb = static_cast<std::uint16_t*>(grow(k, kv_elements * 2));
    auto* vb = static_cast<std::uint16_t*>(grow(v, kv_elements * 2));
    auto* ob = static_cast<std::uint16_t*>(grow(o, q_elements * 2));
    pack_queries_bf16(q_in, q_ld, tokens, heads, head_dim, qb, stream);
    pack_kv_bf16(keys, kv_ld, key_count, kv_heads, head_dim, kb, stream);
    pack_kv_bf16(values, kv_ld, key_count, kv_heads, head_dim, vb, stream);
    std::unordered_map<fe::graph::Tensor_attributes::uid_t, void*> pack = {{kQ, qb}, {kK, kb}, {kV, vb}, {kO, ob}};
    if (key.max_alibi_bias != 0.0f) {
      if (slopes_of != std::pair{heads, key.max_alibi_bias}) {
        std::vector<float> host(static_cast<std::size_t>(heads));
        for (int h = 0; h < heads; ++h) host[h] = elementwise::alibi_slope(key.max_alibi_bias, h, heads);
        void* device = grow(slopes, host.size() * sizeof(float));
        // From pageable memory: the copy has taken the host's values when it returns.
        check_cuda(cudaMemcpyAsync(device, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice, stream),
                   "copy ALiBi slopes");
        slopes_of = {heads, key.max_alibi_bias};
      }
      pack[kSlopes] = slopes.p;
    }
    float* lse = nullptr;
    if (key.stats) {
      lse = static_cast<float*>(grow(stats, static_cast<std::size_t>(heads) * tokens * sizeof(float)));
      pack[kStats] = lse;
    }
    std::int64_t workspace_bytes = 0;
    if (fe::error_t sized = g->get_workspace_size(workspace_bytes); sized.is_bad()) {
      throw std::runtime_error("attention (cudnn): workspace size for " + describe(key) + ": " + sized.get_message());
    }
    void* work = workspace_bytes > 0 ? grow(workspace, static_cast<std::size_t>(workspace_bytes)) : nullptr;
    if (fe::error_t ran = g->execute(handle, pack, work); ran.is_bad()) {
      throw std::runtime_error("attention (cudnn): " + describe(key) + ": " + ran.get_message());
    }
    unpack_output(ob, tokens, heads, head_dim, out, out_ld, stream);
    if (key0_weight != nullptr) {
      key0_weights_from_lse(qb, kb, lse, tokens, past, heads, kv_heads, head_dim, window, scale, shaping, key0_weight,
                            stream);
    }
    if (last_row != nullptr) {
      // The last query again, alone, as the flash body does: its full row
      // normalised, and its output from the same computation.
      const std::size_t last = static_cast<std::size_t>(tokens) - 1;
      attention(q_in + last * q_ld, q_ld, keys, values, kv_ld, 1, key_count - 1, heads, kv_heads, head_dim, window,
                scale, shaping, out + last * out_ld, out_ld, nullptr, last_row, nullptr, stream);
    }
    return true;
  }
};

CudnnAttention::CudnnAttention(void* stream) : impl_(std::make_unique<Impl>()) {
  impl_->stream = static_cast<cudaStream_t>(stream);
  if (const cudnnStatus_t made = cudnnCreate(&impl_->handle); made != CUDNN_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cuDNN: cudnnCreate: ") + cudnnGetErrorString(made));
  }
  if (const cudnnStatus_t set = cudnnSetStream(impl_->handle, impl_->stream); set != CUDNN_STATUS_SUCCESS) {
    cudnnDestroy(impl_->handle);
    throw std::runtime_error(std::string("cuDNN: cudnnSetStream: ") + cudnnGetErrorString(set));
  }
}

CudnnAttention::~CudnnAttention() {
  impl_->graphs.clear();
  for (Impl::Buffer* b :
       {&impl_->q, &impl_->k, &impl_->v, &impl_->o, &impl_->stats, &impl_->slopes, &impl_->workspace}) {
    if (b->p != nullptr) cudaFree(b->p);
  }
  if (impl_->handle != nullptr) cudnnDestroy(impl_->handle);
}

bool CudnnAttention::takes(int head_dim) { return head_dim > 0 && head_dim <= 256 && head_dim % 8 == 0; }

bool CudnnAttention::run(const float* q, std::size_t q_ld, const float* keys, const float* values, std::size_t kv_ld,
                         int tokens, int past, int heads, int kv_heads, int head_dim, int window, float scale,
                         const elementwise::ScoreShaping& shaping, float* out, std::size_t out_ld, float* key0_weight,
                         float* last_row) {
  return impl_->run(q, q_ld, keys, values, kv_ld, tokens, past, heads, kv_heads, head_dim, window, scale, shaping, out,
                    out_ld, key0_weight, last_row);
}

bool CudnnAttention::run(const float* q, std::size_t q_ld, const std::uint16_t* keys, const std::uint16_t* values,
                         std::size_t kv_ld, int tokens, int past, int heads, int kv_heads, int head_dim, int window,
                         float scale, const elementwise::ScoreShaping& shaping, float* out, std::size_t out_ld,
                         float* key0_weight, float* last_row) {
  return impl_->run(q, q_ld, keys, values, kv_ld, tokens, past, heads, kv_heads, head_dim, window, scale, shaping, out,
                    out_ld, key0_weight, last_row);
}

}  // namespace midtune::engine::cuda
