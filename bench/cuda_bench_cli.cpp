// cuda_bench_cli: throughput of the batched engine (backend.device: cuda) on
// one device, as JSON lines for bench/cuda_bench.py, which runs HF
// transformers on the same GPU and shapes and prints the ratios.
//
//   peak       a plain bf16 product (cuBLAS, 8192^3) on the same device: the
//              denominator of "fraction of peak"
//   prefill    tokens/s for prompts of each length, packed in batches of
//              about --batch-tokens tokens, logits of the last row only;
//              achieved TFLOP/s (projections 2 * parameters per token,
//              attention 4 * keys * head_dim per head and token) and its
//              fraction of the peak
//   teacher    prompts/s of teacher-forced scoring: --tf-prompt tokens of
//              prompt + --tf-gold gold tokens, --tf-batch prompts a pass,
//              argmax and gold log-probability reduced on the device
//   generation seconds for one generation of an LPES search at the protocol
//              of --experiment (default experiments/lpes-kv-paper.yaml): the
//              first candidates its GA asks for, decoded by the experiment's
//              objective to per-layer RoPE scales (as EngineBackend's lpes
//              candidates are), each teacher-forced on prompts of
//              --gen-prompt tokens + --gen-gold gold tokens, packed in the
//              passes the batched backend makes (its batch_tokens, the
//              experiment's backend.batch_tokens when set, or
//              --gen-batch-tokens). Measured on
//              --gen-candidates x --gen-prompts (rounded up to whole passes),
//              projected to population x search prompts (search_samples x
//              gold positions); --generation-full runs all of them instead
//              (at 8 prompts/s, the paper's 32 x 600 prompts take ~40 min)
//   decode     tokens/s of greedy steps at each batch size after a
//              --decode-context prefill; each step's attention in one
//              batched op per layer (Device::decode_attention). With
//              --decode-per-sequence each batch size is measured again with
//              the per-sequence ops (Model::decode_batch_tokens 0: the path
//              before batching), a row with "path": "per_sequence", for a
//              before/after comparison in one run
//   memory     peak device memory in use (weights, caches, activations)
//   profile    (--profile) after each measure, the time of each op: every op
//              then waits for the one before, so the throughputs printed
//              beside it are lower than without --profile
//
// The model: --model FILE, or --shape llama7b (Llama-2-7B: 32 layers, hidden
// 4096, 32 heads, ffn 11008, vocab 32000) / llama70b (Llama-3-70B: 80
// layers, hidden 8192, 64 heads over 8 KV heads, ffn 28672, vocab 128256;
// with --weights q4_k_m --precision file its memory row says whether one
// GPU holds it) / tiny, random weights (--weights
// bf16; q8_0; q4_k_m: Q4_K with Q6_K for V, down and the output, as
// llama.cpp's Q4_K_M mostly stores them; random blocks with sane scales)
// written once by the tests' GGUF writer to --gguf (default
// /tmp/midtune-bench-SHAPE[-WEIGHTS].gguf; no download).
// --attention gemm,flash: the prefill attention body (DeviceOps::
// PrefillAttention; default flash, or MIDTUNE_CUDA_ATTENTION): the prefill and
// teacher-forced measures run once per body listed, in that order, each
// line naming its body ("attention"); the later measures take the first.
// --precision file keeps the matrices in their blocks on the device
// (backend.precision: file), bf16 widens them at load; its products of at
// most --file-gemv-rows rows (default DeviceOps::kBlockGemvRows: every
// decode step) read the blocks directly (ops/block_gemv_cuda.cu), the
// others go through a dequantised bf16 tile. --file-gemv off sends every
// product through the tile; --file-gemv both measures each decode batch
// both ways, a row with "file_gemv": true / false each, for a before/after
// comparison in one run. --kv-cache bf16
// stores the keys and values in bf16 (backend.kv_cache: bf16): the memory
// row's cache_bytes_per_token says what a token's cache takes. --device
// reference runs the same code on the host reference device: only to check
// this program on a machine without a GPU (its timings mean nothing).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <tbb/parallel_for.h>

#include "backends/engine/engine_backend.hpp"
#include "backends/engine/model.hpp"
#include "backends/engine/devices/cuda/cuda_ops_device.hpp"
#include "backends/engine/devices/reference/reference_ops.hpp"
#include "backends/engine/ops/elementwise.hpp"
#include "core/cli/run_setup.hpp"
#include "core/experiment/experiment.hpp"
#include "core/ga/factory.hpp"
#include "objectives/objective.hpp"
#include "tests/engine/random_blocks.hpp"
#include "tests/engine/tiny_arch_gguf.hpp"

namespace {

using midtune::ggml_type_info;
using midtune::GgmlType;
using midtune::engine::SequenceScales;
using namespace midtune::engine;
using namespace midtune::engine::devices;
using Clock = std::chrono::steady_clock;

struct Shape {
  std::uint32_t layers, hidden, heads, kv_heads, ffn, vocab;
};

Shape shape_named(const std::string& name) {
  if (name == "llama7b") return {32, 4096, 32, 32, 11008, 32000};
  // Llama-3-70B: 8:1 grouped-query attention; in Q4_K_M ~40 GB of weights,
  // the size that decides whether one 80 GB GPU holds a 70B search.
  if (name == "llama70b") return {80, 8192, 64, 8, 28672, 128256};
  // 4 layers: the fewest a degree-3 LPES curve (4 control points) fits.
  if (name == "tiny") return {4, 256, 4, 2, 512, 1000};
  throw std::invalid_argument("--shape: '" + name + "' is not one of llama7b, llama70b, tiny");
}

// Uniform [-bound, bound) BF16 values from the tests' counter-based
// generator, in parallel chunks (the values only need to be of the right size).
std::vector<std::uint8_t> random_bf16(std::size_t count, float bound, std::uint64_t seed) {
  std::vector<std::uint8_t> out(count * 2);
  constexpr std::size_t kChunk = 1 << 20;
  tbb::parallel_for(std::size_t{0}, (count + kChunk - 1) / kChunk, [&](std::size_t chunk) {
    midtune::testing::TinyWeights rng(seed * 0x9E3779B97F4A7C15ull + chunk);
    for (std::size_t i = chunk * kChunk; i < std::min(count, (chunk + 1) * kChunk); ++i) {
      const std::uint16_t bits = midtune::engine::elementwise::bf16_bits(rng.next(bound));
      std::memcpy(&out[i * 2], &bits, 2);
    }
  });
  return out;
}

std::vector<std::uint8_t> ones_bf16(std::size_t count) {
  std::vector<std::uint8_t> out(count * 2);
  for (std::size_t i = 0; i < count; ++i) out[i * 2 + 1] = 0x3F, out[i * 2] = 0x80;  // 1.0 in bf16, little-endian
  return out;
}

// Random blocks of a quantised type, rows in parallel chunks.
std::vector<std::uint8_t> random_quant(GgmlType type, std::size_t rows, std::size_t cols, std::uint64_t seed) {
  constexpr std::size_t kRows = 256;
  const std::size_t row_bytes = ggml_type_info(type).block_bytes * (cols / ggml_type_info(type).block_elems);
  std::vector<std::uint8_t> out(rows * row_bytes);
  tbb::parallel_for(std::size_t{0}, (rows + kRows - 1) / kRows, [&](std::size_t chunk) {
    const std::size_t first = chunk * kRows, count = std::min(kRows, rows - first);
    const std::vector<std::uint8_t> part = midtune::testing::random_blocks(type, count, cols, seed * 1000003 + chunk);
    std::copy(part.begin(), part.end(), out.begin() + static_cast<std::ptrdiff_t>(first * row_bytes));
  });
  return out;
}

// --weights: the type of each matrix (`wide`: V, down and the output, which
// Q4_K_M keeps at Q6_K) and the data.
struct WeightTypes {
  std::string name;
  GgmlType plain, wide;
};

WeightTypes weight_types_named(const std::string& name) {
  if (name == "bf16") return {name, GgmlType::BF16, GgmlType::BF16};
  if (name == "q8_0") return {name, GgmlType::Q8_0, GgmlType::Q8_0};
  if (name == "q4_k_m") return {name, GgmlType::Q4_K, GgmlType::Q6_K};
  throw std::invalid_argument("--weights: '" + name + "' is not one of bf16, q8_0, q4_k_m");
}

void write_random_model(const Shape& s, const WeightTypes& types, const std::filesystem::path& path) {
  midtune::testing::TinyGgufWriter w;
  const std::string a = "llama.";
  w.add_string("general.architecture", "llama");
  w.add_string("general.name", "midtune-random-bench");
  w.add_u32(a + "block_count", s.layers);
  w.add_u32(a + "context_length", 8192);
  w.add_u32(a + "embedding_length", s.hidden);
  w.add_u32(a + "feed_forward_length", s.ffn);
  w.add_u32(a + "attention.head_count", s.heads);
  w.add_u32(a + "attention.head_count_kv", s.kv_heads);
  w.add_u32(a + "vocab_size", s.vocab);
  w.add_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  const std::uint64_t hidden = s.hidden, ffn = s.ffn, head_dim = s.hidden / s.heads;
  const std::uint64_t q_rows = s.heads * head_dim, kv_rows = s.kv_heads * head_dim;
  const auto bound = [](std::uint64_t fan_in) { return std::sqrt(3.0f / static_cast<float>(fan_in)); };
  constexpr std::uint32_t kBf16 = 30;
  std::uint64_t seed = 1;
  // A matrix of `rows` x `cols` in `type` (BF16: uniform within `bound`),
  // made when the file is written: one matrix in memory at a time (a 70B
  // shape's weights are larger than a machine's memory).
  const auto matrix = [&](const std::string& name, std::uint64_t cols, std::uint64_t rows, GgmlType type, float bound) {
    const std::uint64_t bytes = rows * (cols / ggml_type_info(type).block_elems) * ggml_type_info(type).block_bytes;
    const std::uint64_t matrix_seed = seed++;
    w.add_tensor_made_later(name, {cols, rows}, static_cast<std::uint32_t>(type), bytes, [=] {
      return type == GgmlType::BF16 ? random_bf16(cols * rows, bound, matrix_seed)
                                    : random_quant(type, rows, cols, matrix_seed);
    });
  };
  matrix("token_embd.weight", hidden, s.vocab, types.plain, 0.5f);
  w.add_tensor("output_norm.weight", {hidden}, kBf16, ones_bf16(hidden));
  matrix("output.weight", hidden, s.vocab, types.wide, bound(hidden));
  for (std::uint32_t l = 0; l < s.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    w.add_tensor(p + "attn_norm.weight", {hidden}, kBf16, ones_bf16(hidden));
    w.add_tensor(p + "ffn_norm.weight", {hidden}, kBf16, ones_bf16(hidden));
    matrix(p + "attn_q.weight", hidden, q_rows, types.plain, bound(hidden));
    matrix(p + "attn_k.weight", hidden, kv_rows, types.plain, bound(hidden));
    matrix(p + "attn_v.weight", hidden, kv_rows, types.wide, bound(hidden));
    matrix(p + "attn_output.weight", q_rows, hidden, types.plain, bound(q_rows));
    matrix(p + "ffn_gate.weight", hidden, ffn, types.plain, bound(hidden));
    matrix(p + "ffn_up.weight", hidden, ffn, types.plain, bound(hidden));
    matrix(p + "ffn_down.weight", ffn, hidden, types.wide, bound(ffn));
  }
  // Under another name until whole, so an interrupted write is never taken
  // for the model.
  const std::filesystem::path partial = path.string() + ".partial";
  w.write_streamed(partial);
  std::filesystem::rename(partial, path);
}

std::vector<std::int32_t> tokens_for(int count, int vocab, std::uint64_t seed) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(count));
  std::uint64_t state = seed;
  for (auto& t : out) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<std::int32_t>(3 + (state >> 33) % static_cast<std::uint64_t>(vocab - 3));
  }
  return out;
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// What the generation measure takes from the experiment file.
struct GenerationPlan {
  std::string experiment;
  std::vector<SequenceScales> candidates;  // the GA's first generation, decoded
  int prompts_per_evaluation = 0;      // search_samples x gold positions
  std::size_t batch_tokens = 0;        // the experiment's backend.batch_tokens; 0 = the backend's default
};

GenerationPlan plan_generation(const std::string& path, const midtune::ModelConfig& config) {
  const midtune::Experiment e = midtune::load_experiment(path);
  if (e.objective.kind != "lpes") {
    throw std::invalid_argument(path + ": objective.kind is '" + e.objective.kind +
                                "'; the generation measure runs LPES candidates");
  }
  if (e.dataset.metric != "teacher_forced") {
    throw std::invalid_argument(path + ": dataset.metric is '" + e.dataset.metric +
                                "'; the generation measure times teacher-forced scoring");
  }
  const auto objective = midtune::make_objective(e.objective, static_cast<int>(config.layers));
  const auto strategy = midtune::make_strategy(objective->space(), midtune::strategy_config(e.search), e.seed);
  GenerationPlan plan;
  plan.experiment = e.name;
  for (const midtune::Candidate& candidate : strategy->ask()) {
    const midtune::Intervention intervention = objective->decode(candidate.genome);
    // The batched backend runs these in one pass per group; a candidate that
    // read the whole prompt would need the two-pass path this does not time.
    if (reads_whole_prompt(intervention)) {
      throw std::invalid_argument(path + ": an LPES candidate reads the whole prompt; not timed here");
    }
    plan.candidates.push_back(intervention_sequence_scales(config, intervention));
  }
  plan.prompts_per_evaluation =
      e.dataset.search_samples * static_cast<int>(e.dataset.gold_positions.size());
  plan.batch_tokens = static_cast<std::size_t>(std::max(e.backend.batch_tokens, 0));
  return plan;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cuda_bench_cli: throughput of the batched engine (device: cuda)"};
  std::string device_name = "cuda", shape_name = "llama7b", model_path;
  std::string gguf_path, experiment_path = "experiments/lpes-kv-paper.yaml";
  std::string weights = "bf16", precision = "bf16", kv_cache = "fp32";
  int gpu = 0, repeats = 3, batch_tokens = 16384, tf_prompt = 3000, tf_gold = 8, tf_batch = 8;
  int decode_context = 512, decode_steps = 32;
  bool decode_per_sequence = false;
  std::string file_gemv = "on";
  int file_gemv_rows = DeviceOps::kBlockGemvRows;
  // A 50-pair KV prompt (datasets/prompts.cpp) is 3611-3638 tokens in Llama-2's
  // SentencePiece vocabulary and its UUID answer 32-35 (llama.cpp's
  // llama-tokenize on ggml-vocab-llama-spm.gguf, 5 generated items).
  int gen_prompt = 3625, gen_gold = 34, gen_candidates = 2, gen_prompts = 16, gen_batch_tokens = 0;
  bool profile = false, no_generation = false, generation_full = false;
  std::vector<int> prefill_lengths = {512, 2048, 4096}, decode_batches = {1, 32};
  std::vector<std::string> attention_bodies;
  app.add_option("--device", device_name, "cuda | reference (the host reference: checks this program only)");
  app.add_option("--gpu", gpu, "CUDA device index");
  app.add_option("--model", model_path, "a GGUF to measure instead of a random one");
  app.add_option("--shape", shape_name, "random model shape: llama7b | llama70b | tiny");
  app.add_option("--gguf", gguf_path,
                 "where the random model is written (kept and reused; default /tmp/midtune-bench-SHAPE[-WEIGHTS].gguf)");
  app.add_option("--weights", weights, "random model's matrices: bf16 | q8_0 | q4_k_m");
  app.add_option("--precision", precision, "bf16 (widened at load) | file (kept in their blocks)");
  app.add_option("--file-gemv", file_gemv,
                 "precision file: products of few rows straight from the blocks: on | off (through the tile) | both "
                 "(decode measured both ways)");
  app.add_option("--file-gemv-rows", file_gemv_rows, "precision file: the most rows read straight from the blocks");
  app.add_option("--kv-cache", kv_cache, "fp32 | bf16 (keys and values stored in bf16: half the cache memory)");
  app.add_option(
         "--attention", attention_bodies,
         "prefill attention bodies, each measured: gemm | flash | cudnn (default: flash, or MIDTUNE_CUDA_ATTENTION)")
      ->delimiter(',');
  app.add_option("--prefill", prefill_lengths, "prompt lengths");
  app.add_option("--batch-tokens", batch_tokens, "tokens per prefill pass (prompts per pass = this / length)");
  app.add_option("--tf-prompt", tf_prompt, "teacher-forced prompt tokens");
  app.add_option("--tf-gold", tf_gold, "teacher-forced gold tokens");
  app.add_option("--tf-batch", tf_batch, "teacher-forced prompts per pass");
  app.add_option("--decode-batches", decode_batches, "decode batch sizes");
  app.add_option("--decode-context", decode_context, "prompt tokens before decoding");
  app.add_option("--decode-steps", decode_steps, "greedy steps timed");
  app.add_option("--repeats", repeats, "repeats (best is reported)");
  app.add_option("--experiment", experiment_path, "the LPES experiment whose search generation is timed");
  app.add_option("--gen-prompt", gen_prompt, "generation: prompt tokens of each item");
  app.add_option("--gen-gold", gen_gold, "generation: gold tokens of each item");
  app.add_option("--gen-candidates", gen_candidates, "generation: candidates measured (the projection's sample)");
  app.add_option("--gen-prompts", gen_prompts, "generation: prompts per candidate measured (rounded up to whole passes)");
  app.add_option("--gen-batch-tokens", gen_batch_tokens,
                 "generation: tokens a pass (0: the experiment's backend.batch_tokens, else the backend's default)");
  app.add_flag("--generation-full", generation_full, "generation: every candidate on every search prompt (no projection)");
  app.add_flag("--no-generation", no_generation, "skip the generation measure");
  app.add_flag("--decode-per-sequence", decode_per_sequence,
               "also measure decode with the per-sequence attention ops (the path before batching)");
  app.add_flag("--profile", profile, "time every op (slows every measure; see above)");
  CLI11_PARSE(app, argc, argv);
  try {
    if (precision != "bf16" && precision != "file") {
      throw std::invalid_argument("--precision: '" + precision + "' is not one of bf16, file");
    }
    if (file_gemv != "on" && file_gemv != "off" && file_gemv != "both") {
      throw std::invalid_argument("--file-gemv: '" + file_gemv + "' is not one of on, off, both");
    }
    if (file_gemv_rows < 0) throw std::invalid_argument("--file-gemv-rows: " + std::to_string(file_gemv_rows) + " < 0");
    const int gemv_rows_on = file_gemv == "off" ? 0 : file_gemv_rows;
    const KvForm kv_form = parse_kv_form(kv_cache, "--kv-cache");
    const WeightTypes types = weight_types_named(weights);
    std::unique_ptr<DeviceOps> device =
        device_name == "reference" ? std::unique_ptr<DeviceOps>(std::make_unique<ReferenceOps>()) : make_cuda_ops(gpu);
    device->set_weight_form(precision == "file" ? WeightForm::file : WeightForm::bf16);
    device->set_block_gemv_rows(gemv_rows_on);
    device->set_kv_form(kv_form);
    std::vector<PrefillAttention> attentions;
    for (const std::string& body : attention_bodies) attentions.push_back(parse_prefill_attention(body, "--attention"));
    if (attentions.empty()) attentions.push_back(device->prefill_attention());
    OpProfile op_profile;
    OpProfile* profiler = profile ? &op_profile : nullptr;
    const bool random_model = model_path.empty();
    if (random_model) {
      model_path = gguf_path.empty()
                       ? "/tmp/midtune-bench-" + shape_name + (weights == "bf16" ? "" : "-" + weights) + ".gguf"
                       : gguf_path;
      if (!std::filesystem::exists(model_path)) write_random_model(shape_named(shape_name), types, model_path);
    }
    const std::size_t free_at_start = device->free_bytes();
    std::size_t least_free = free_at_start;
    const auto note_memory = [&] { least_free = std::min(least_free, device->free_bytes()); };
    auto emit = [&](nlohmann::json j) {
      j["device"] = device->name();
      j["precision"] = device->precision();
      j["attention"] = to_string(device->prefill_attention());
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
    };
    // The ops' times since the last call, for the measure just emitted.
    const auto emit_profile = [&](const std::string& of) {
      if (profiler == nullptr) return;
      nlohmann::json ops = nlohmann::json::array();
      for (const OpProfile::Row& row : profiler->rows()) {
        ops.push_back({{"op", row.op}, {"calls", row.calls}, {"seconds", row.seconds}});
      }
      emit({{"measure", "profile"}, {"of", of}, {"ops", ops}});
      profiler->reset();
    };

    // The peak: a plain bf16 product of 8192^3 (256^3 on the host reference).
    const int n = device_name == "reference" ? 256 : 8192;
    double peak_tflops = 0.0;
    {
      DeviceBuffer<std::uint16_t> a(*device, std::size_t(n) * n), b(*device, std::size_t(n) * n);
      DeviceBuffer<float> c(*device, std::size_t(n) * n);
      std::vector<std::uint16_t> ones(std::size_t(n) * n, 0x3F80);
      device->upload(a.data(), ones.data(), ones.size() * 2);
      device->upload(b.data(), ones.data(), ones.size() * 2);
      for (int r = 0; r < repeats + 1; ++r) {
        device->synchronize();
        const auto start = Clock::now();
        for (int k = 0; k < 10; ++k) device->matmul_bf16(a.data(), n, n, n, b.data(), n, c.data(), n);
        device->synchronize();
        if (r > 0) peak_tflops = std::max(peak_tflops, 10 * 2.0 * n * double(n) * n / seconds_since(start) / 1e12);
      }
      emit({{"measure", "peak"}, {"size", n}, {"tflops", peak_tflops}});
    }
    const auto load_start = Clock::now();
    Model model(model_path, *device);
    model.set_op_profile(profiler);
    note_memory();
    const auto& c = model.config();
    if (random_model) {
      const Shape want = shape_named(shape_name);
      if (c.layers != want.layers || c.hidden != want.hidden || c.heads != want.heads || c.kv_heads != want.kv_heads ||
          c.ffn != want.ffn) {
        throw std::invalid_argument(model_path + ": holds a model of another shape than --shape " + shape_name +
                                    " (an older run's file?): delete it or pass --gguf");
      }
    }
    // As the batched backend picks it, right after its model is loaded.
    const std::size_t backend_batch_tokens = default_batch_tokens(model, *device);
    emit({{"measure", "load"}, {"seconds", seconds_since(load_start)}, {"weight_bytes", model.weight_bytes()},
          {"layers", c.layers}, {"hidden", c.hidden}, {"heads", c.heads}, {"kv_heads", c.kv_heads}, {"ffn", c.ffn},
          {"vocab", c.vocab}});
    const double matrix_params = double(c.layers) *
                                     (double(c.hidden) * (c.heads + 2.0 * c.kv_heads) * c.head_dim +
                                      double(c.heads) * c.head_dim * c.hidden + 3.0 * c.hidden * c.ffn);
    const SequenceScales ones = SequenceScales::ones(static_cast<int>(c.layers), static_cast<int>(c.heads));

    // One pass over the prompts (each its last `rows_per_prompt` rows
    // scored), with `scales`; seconds. With `time_sequences` the sequences
    // (their KV caches) are made inside the timing, as the batched backend
    // makes them per pass; the throughput measures leave them out.
    const auto timed_pass = [&](const std::vector<std::vector<std::int32_t>>& prompts, int rows_per_prompt, bool score,
                                const SequenceScales& scales, bool time_sequences) {
      const int count = static_cast<int>(prompts.size());
      std::vector<std::vector<int>> rows(prompts.size());
      for (int i = 0; i < count; ++i) {
        const int length = static_cast<int>(prompts[i].size());
        for (int r = length - rows_per_prompt; r < length; ++r) rows[i].push_back(r);
      }
      std::vector<std::int32_t> gold(static_cast<std::size_t>(count) * rows_per_prompt, 5), argmax;
      std::vector<double> logprob;
      std::vector<std::unique_ptr<Sequence>> seqs;
      std::vector<SequenceCall> calls;
      const auto make_sequences = [&] {
        for (int i = 0; i < count; ++i) {
          seqs.push_back(std::make_unique<Sequence>(model, static_cast<int>(prompts[i].size()), scales));
          calls.push_back({seqs[i].get(), prompts[i], {}, rows[i], nullptr});
        }
      };
      if (!time_sequences) make_sequences();
      device->synchronize();
      const auto start = Clock::now();
      if (time_sequences) make_sequences();
      model.forward(calls);
      if (score) model.score(gold, argmax, logprob);
      device->synchronize();
      double s = seconds_since(start);
      note_memory();
      if (time_sequences) {  // the backend frees them inside its timing too
        const auto freeing = Clock::now();
        seqs.clear();
        s += seconds_since(freeing);
      }
      return s;
    };
    const auto pass = [&](int count, int length, int rows_per_prompt, bool score) {
      std::vector<std::vector<std::int32_t>> prompts;
      for (int i = 0; i < count; ++i) prompts.push_back(tokens_for(length, static_cast<int>(c.vocab), 17 + i));
      return timed_pass(prompts, rows_per_prompt, score, ones, false);
    };

    for (const PrefillAttention attention : attentions) {
      device->set_prefill_attention(attention);
      for (int length : prefill_lengths) {
        const int count = std::max(1, batch_tokens / length);
        double best = 1e300;
        for (int r = 0; r < repeats; ++r) best = std::min(best, pass(count, length, 1, false));
        const double tokens = double(count) * length;
        const double attention = 4.0 * c.layers * c.heads * c.head_dim * (length + 1) / 2.0 * tokens;
        const double tflops = (2.0 * matrix_params * tokens + attention) / best / 1e12;
        emit({{"measure", "prefill"}, {"length", length}, {"prompts", count}, {"tokens_per_s", tokens / best},
              {"tflops", tflops}, {"fraction_of_peak", tflops / peak_tflops}});
        emit_profile("prefill " + std::to_string(length) + " (" + std::to_string(repeats) + " passes)");
      }
      {
        double best = 1e300;
        for (int r = 0; r < repeats; ++r) best = std::min(best, pass(tf_batch, tf_prompt + tf_gold - 1, tf_gold, true));
        emit({{"measure", "teacher_forced"}, {"prompt", tf_prompt}, {"gold", tf_gold}, {"prompts", tf_batch},
              {"prompts_per_s", tf_batch / best}});
        emit_profile("teacher-forced (" + std::to_string(repeats) + " passes)");
      }
    }
    device->set_prefill_attention(attentions.front());
    if (!no_generation) {
      if (gen_prompt < 1 || gen_gold < 1 || gen_candidates < 1 || gen_prompts < 1 || gen_batch_tokens < 0) {
        throw std::invalid_argument(
            "--gen-prompt, --gen-gold, --gen-candidates and --gen-prompts must be >= 1, --gen-batch-tokens >= 0");
      }
      const GenerationPlan plan = plan_generation(experiment_path, c);
      const std::size_t pass_tokens = gen_batch_tokens > 0    ? static_cast<std::size_t>(gen_batch_tokens)
                                      : plan.batch_tokens > 0 ? plan.batch_tokens
                                                              : backend_batch_tokens;
      const int item_tokens = gen_prompt + gen_gold - 1;  // the last gold token is never an input
      const int population = static_cast<int>(plan.candidates.size());
      const int per_pass = std::max<int>(1, static_cast<int>(pass_tokens / static_cast<std::size_t>(item_tokens)));
      const int candidates = generation_full ? population : std::min(gen_candidates, population);
      const int prompts = generation_full ? plan.prompts_per_evaluation
                                          : std::min(plan.prompts_per_evaluation, (gen_prompts + per_pass - 1) / per_pass * per_pass);
      std::vector<std::vector<std::int32_t>> inputs;
      for (int i = 0; i < prompts; ++i) inputs.push_back(tokens_for(item_tokens, static_cast<int>(c.vocab), 1000 + i));
      const std::vector<std::size_t> sizes(inputs.size(), static_cast<std::size_t>(item_tokens));
      const auto groups = pass_groups(sizes, pass_tokens);
      double seconds = 0.0;
      for (int k = 0; k < candidates; ++k) {
        for (const auto& [begin, end] : groups) {
          const std::vector<std::vector<std::int32_t>> group(inputs.begin() + static_cast<std::ptrdiff_t>(begin),
                                                             inputs.begin() + static_cast<std::ptrdiff_t>(end));
          seconds += timed_pass(group, gen_gold, true, plan.candidates[static_cast<std::size_t>(k)], true);
        }
      }
      const double per_evaluation = seconds / candidates * plan.prompts_per_evaluation / prompts;
      nlohmann::json scale_ranges = nlohmann::json::array();  // each measured candidate's RoPE scales
      for (int k = 0; k < candidates; ++k) {
        const std::vector<float>& v = plan.candidates[static_cast<std::size_t>(k)].scale;
        scale_ranges.push_back({*std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())});
      }
      emit({{"measure", "generation"}, {"experiment", plan.experiment}, {"full", generation_full},
            {"population", population}, {"prompts_per_evaluation", plan.prompts_per_evaluation},
            {"prompt", gen_prompt}, {"gold", gen_gold}, {"batch_tokens", pass_tokens},
            {"passes_per_candidate", groups.size()}, {"candidates_measured", candidates},
            {"candidate_scale_ranges", scale_ranges},
            {"prompts_measured", prompts}, {"seconds_measured", seconds},
            {"prompts_per_s", double(candidates) * prompts / seconds}, {"seconds_per_evaluation", per_evaluation},
            {"generation_seconds", generation_full ? seconds : per_evaluation * population}});
      emit_profile("generation (" + std::to_string(candidates) + " candidates x " + std::to_string(prompts) +
                   " prompts)");
    }
    const int batched_tokens = model.decode_batch_tokens;
    struct DecodeRun {
      int batch, decode_batch_tokens, gemv_rows;
    };
    std::vector<DecodeRun> decode_runs;
    const bool both_gemv = precision == "file" && file_gemv == "both";
    for (int batch : decode_batches) {
      decode_runs.push_back({batch, batched_tokens, gemv_rows_on});
      if (both_gemv) decode_runs.push_back({batch, batched_tokens, 0});
      if (decode_per_sequence) decode_runs.push_back({batch, 0, gemv_rows_on});
      if (decode_per_sequence && both_gemv) decode_runs.push_back({batch, 0, 0});
    }
    for (const auto& [batch, decode_batch_tokens, gemv_rows] : decode_runs) {
      model.decode_batch_tokens = decode_batch_tokens;
      device->set_block_gemv_rows(gemv_rows);
      std::vector<std::unique_ptr<Sequence>> seqs;
      std::vector<std::vector<std::int32_t>> prompts;
      std::vector<SequenceCall> calls;
      const int last = decode_context - 1, zero = 0;
      for (int i = 0; i < batch; ++i) {
        prompts.push_back(tokens_for(decode_context, static_cast<int>(c.vocab), 99 + i));
        seqs.push_back(std::make_unique<Sequence>(model, decode_context + decode_steps, ones));
        calls.push_back({seqs[i].get(), prompts[i], {}, std::span<const int>(&last, 1), nullptr});
      }
      model.forward(calls);
      std::vector<std::int32_t> next;
      std::vector<double> unused;
      model.score({}, next, unused);
      device->synchronize();
      if (profiler != nullptr) profiler->reset();
      const auto start = Clock::now();
      for (int step = 0; step < decode_steps; ++step) {
        calls.clear();
        for (int i = 0; i < batch; ++i) calls.push_back({seqs[i].get(), std::span<const std::int32_t>(&next[i], 1), {},
                                                         std::span<const int>(&zero, 1), nullptr});
        model.forward(calls);
        std::vector<std::int32_t> step_tokens;
        model.score({}, step_tokens, unused);
        next = step_tokens;
      }
      device->synchronize();
      const double s = seconds_since(start);
      note_memory();
      const std::string path = decode_batch_tokens > 0 ? "batched" : "per_sequence";
      nlohmann::json row = {{"measure", "decode"}, {"batch", batch}, {"context", decode_context}, {"path", path},
                            {"tokens_per_s", double(batch) * decode_steps / s}};
      if (precision == "file") {
        row["file_gemv"] = gemv_rows > 0;
        row["file_gemv_rows"] = gemv_rows;
      }
      emit(row);
      emit_profile("decode batch " + std::to_string(batch) + " " + path +
                   (precision == "file" ? (gemv_rows > 0 ? " file-gemv" : " tiles") : "") + " (" +
                   std::to_string(decode_steps) + " steps)");
    }
    model.decode_batch_tokens = batched_tokens;
    device->set_block_gemv_rows(gemv_rows_on);
    emit({{"measure", "memory"}, {"peak_bytes", free_at_start - least_free}, {"weight_bytes", model.weight_bytes()},
          {"kv_cache", kv_cache}, {"cache_bytes_per_token", Sequence::cache_bytes(c, *device, 1)}});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_bench_cli: %s\n", e.what());
    return 1;
  }
  return 0;
}
