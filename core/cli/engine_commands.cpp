#include "core/cli/engine_commands.hpp"

#include <cstdio>
#include <memory>
#include <string>

#include "backends/engine/gguf/chat_template.hpp"
#include "backends/engine/devices/cuda/devices.hpp"
#include "backends/engine/engine_factory.hpp"
#include "backends/engine/engine_backend.hpp"
#include "backends/engine/model_bench.hpp"

namespace midtune {

namespace {

struct GenerateArgs {
  std::string model;
  std::string prompt;
  bool chat = false;
  int max_tokens = 100;
  engine::EngineDeviceOptions device;
};

void run_generate(const GenerateArgs& args) {
  const std::unique_ptr<Backend> backend = engine::make_engine_backend(args.model, args.device);
  BatchItem item;
  item.id = "cli";
  item.prompt_text = args.chat ? ChatTemplate::from_gguf(*engine::engine_model_file(*backend)).render_user(args.prompt).text
                               : args.prompt;
  RunOptions run;
  run.mode = Mode::generate;
  run.max_new_tokens = args.max_tokens;
  const auto out = backend->run(Intervention{}, {item}, run);
  std::printf("%s\n", out.at(0).output_text.c_str());
}

}  // namespace

void add_engine_commands(CLI::App& app) {
  CLI::App* devices = app.add_subcommand("devices", "List the CUDA devices this machine has (or say why there are none)");
  devices->callback([] { std::printf("%s", engine::describe(engine::cuda_devices()).c_str()); });

  auto generate_args = std::make_shared<GenerateArgs>();
  CLI::App* generate = app.add_subcommand("generate", "Greedy continuation of a prompt with the in-tree engine");
  generate->add_option("--model", generate_args->model, "GGUF model path")->required()->check(CLI::ExistingFile);
  generate->add_option("--prompt", generate_args->prompt, "prompt text (special tokens are parsed)")->required();
  generate->add_flag("--chat", generate_args->chat, "wrap the prompt in the model's chat template as a user turn");
  generate->add_option("--max-tokens", generate_args->max_tokens, "most tokens to generate")
      ->check(CLI::PositiveNumber);
  generate->add_option("--threads", generate_args->device.threads, "threads (default: all cores)");
  generate->add_option("--device", generate_args->device.device, "cpu | cuda (the batched engine on a GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  generate->add_option("--gpu", generate_args->device.gpu, "device cuda: which GPU (ga-run devices)");
  generate->add_option("--precision", generate_args->device.precision,
                       "native | fp32 (device cpu: fp32 matrices) | file (device cuda: weights kept in their blocks)")
      ->check(CLI::IsMember({"native", "fp32", "file"}));
  generate->add_option("--kv-cache", generate_args->device.kv_cache,
                       "fp32 | bf16 (keys and values stored in bf16: half the cache memory, other numbers)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  generate
      ->add_option("--attention", generate_args->device.attention,
                   "device cuda: the prefill attention body, flash | gemm | cudnn (default flash, or "
                   "MIDTUNE_CUDA_ATTENTION)")
      ->check(CLI::IsMember({"flash", "gemm", "cudnn"}));
  generate->callback([generate_args] { run_generate(*generate_args); });

  auto bench_path = std::make_shared<std::string>();
  auto bench_options = std::make_shared<engine::ModelBenchOptions>();
  CLI::App* bench = app.add_subcommand("bench-model", "Prefill and decode tokens/s of the in-tree engine (one JSON line)");
  bench->add_option("--model", *bench_path, "GGUF model path")->required()->check(CLI::ExistingFile);
  bench->add_option("--prompt-tokens", bench_options->prompt_tokens, "prompt length")->required()
      ->check(CLI::PositiveNumber);
  bench->add_option("--threads", bench_options->threads, "threads")->check(CLI::PositiveNumber);
  bench->add_option("--decode-tokens", bench_options->decode_tokens, "tokens decoded after the prompt");
  bench->add_option("--repeats", bench_options->repeats, "prefill repeats (best is reported)")
      ->check(CLI::PositiveNumber);
  bench->callback([bench_path, bench_options] {
    const auto result = engine::bench_model(*bench_path, *bench_options);
    std::printf("%s\n", result.to_json(*bench_options).dump().c_str());
  });
}

}  // namespace midtune
