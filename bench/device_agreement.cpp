// The batched engine (backend.device: cuda) against the CPU engine on an
// experiment's own prompts: its search (or held-out) split, wrapped as ga-run
// wraps it, under the plain model and any intervention files given. Prints,
// per intervention, how many teacher-forced decisions (or generated texts)
// agree, the gold log-probability differences, and each engine's prompts/s.
// The acceptance check of the GPU engine: decisions equal on at least 99 %
// of the shipped KV experiment's prompts.
//
// The two engines round differently (int8 activations on the CPU for
// integer types, bf16 weights and activations on the GPU), so neither is the
// truth. --fp32-arbiter also runs the experiment's model on the CPU engine
// with every matrix dequantised to fp32 (backend.precision: fp32), and
// counts each engine's decisions against that; --arbiter F32.gguf does the
// same with an F32 copy of the weights made elsewhere (`llama-quantize
// --allow-requantize MODEL OUT F32`).
//
//   build/bench/device_agreement experiments/lpes-kv-smollm2.yaml [--device cuda|reference] [--gpu 0]
//       [--split search|heldout] [--intervention FILE.json ...] [--threads 2] [--fp32-arbiter | --arbiter F32.gguf]
//       [--precision bf16|file] [--kv-cache fp32|bf16]
// --precision file keeps the batched engine's matrices in the file's blocks
// (backend.precision: file); its agreement with the arbiter is the measure
// that it answers as the bf16 form does. --kv-cache bf16 stores its keys and
// values in bf16 (backend.kv_cache: bf16), measured the same way.
// --device reference runs the batched model on the host (slow; small
// experiments such as quickstart only). Exit status 1 below 99 %.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <vector>

#include <CLI/CLI.hpp>

#include "backends/engine/devices/cuda/cuda_ops_device.hpp"
#include "backends/engine/engine_factory.hpp"
#include "backends/engine/devices/reference/reference_ops.hpp"
#include "backends/engine/engine_backend.hpp"
#include "core/cli/run_setup.hpp"
#include "core/experiment/experiment.hpp"

using namespace midtune;

int main(int argc, char** argv) {
  std::string file, device = "cuda", split = "search", arbiter_path, precision = "bf16", kv_cache = "fp32";
  std::vector<std::string> intervention_files;
  int gpu = 0, threads = 0;
  CLI::App app{"device_agreement: the batched engine vs the CPU engine on an experiment's prompts"};
  app.add_option("experiment", file, "experiment YAML with an engine backend")->required();
  app.add_option("--device", device, "cuda | reference")->check(CLI::IsMember({"cuda", "reference"}));
  app.add_option("--gpu", gpu, "CUDA device index");
  app.add_option("--precision", precision, "bf16 (matrices widened at load) | file (kept in their blocks)")
      ->check(CLI::IsMember({"bf16", "file"}));
  app.add_option("--kv-cache", kv_cache, "fp32 | bf16 (keys and values stored in bf16)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--split", split, "search | heldout")->check(CLI::IsMember({"search", "heldout"}));
  app.add_option("--intervention", intervention_files, "Intervention JSON files (the plain model always runs)");
  app.add_option("--threads", threads, "CPU engine threads (0 = all)");
  bool fp32_arbiter = false;
  auto* fp32_flag = app.add_flag("--fp32-arbiter", fp32_arbiter, "the model itself in fp32 on the CPU engine as the arbiter");
  app.add_option("--arbiter", arbiter_path, "the model's weights as an F32 GGUF, run in fp32 by the CPU engine")
      ->excludes(fp32_flag);
  CLI11_PARSE(app, argc, argv);
  try {
    const Experiment experiment = load_experiment(file);
    if (experiment.backend.kind != "engine") throw std::invalid_argument(file + ": backend.kind must be engine");
    engine::EngineOptions cpu_options;
    cpu_options.threads = threads;
    engine::EngineBackend cpu(experiment.backend.model, cpu_options);
    std::unique_ptr<engine::EngineBackend> arbiter;
    if (fp32_arbiter) {
      engine::EngineOptions fp32_options = cpu_options;
      fp32_options.fp32 = true;
      arbiter = std::make_unique<engine::EngineBackend>(experiment.backend.model, fp32_options);
    } else if (!arbiter_path.empty()) {
      arbiter = std::make_unique<engine::EngineBackend>(arbiter_path, cpu_options);
    }
    std::unique_ptr<engine::devices::DeviceOps> ops =
        device == "reference" ? std::unique_ptr<engine::devices::DeviceOps>(std::make_unique<engine::devices::ReferenceOps>())
                              : engine::devices::make_cuda_ops(gpu);
    ops->set_weight_form(precision == "file" ? engine::devices::WeightForm::file : engine::devices::WeightForm::bf16);
    ops->set_kv_form(engine::parse_kv_form(kv_cache, "--kv-cache"));
    const std::string device_name = ops->name() + ", " + ops->precision();
    const std::unique_ptr<engine::EngineBackend> batched_engine =
        engine::make_device_ops_backend(experiment.backend.model, std::move(ops));
    engine::EngineBackend& batched = *batched_engine;
    const auto prepared =
        prepare_split(experiment, cpu, split == "search" ? datasets::Split::search : datasets::Split::heldout);
    const std::vector<BatchItem>& items = prepared->inputs.items;
    const RunOptions options = prepared->inputs.run_options;

    std::vector<std::pair<std::string, Intervention>> interventions = {{"plain", Intervention{}}};
    for (const std::string& path : intervention_files) {
      std::ifstream in(path);
      if (!in) throw std::invalid_argument(path + ": cannot read");
      interventions.emplace_back(path, Intervention::from_json(nlohmann::json::parse(in)));
    }
    std::printf("%s, %s split: %zu prompts, metric %s; batched engine on %s (batch_tokens %zu)\n", file.c_str(),
                split.c_str(), items.size(), to_string(options.mode), device_name.c_str(), batched.batch_tokens());
    std::printf("| intervention | decisions equal | worst / median abs d gold log-prob | CPU prompts/s | batched prompts/s |%s\n",
                arbiter ? " CPU = fp32 | batched = fp32 | fp32 prompts/s |" : "");
    std::printf("|---|---|---|---|---|%s\n", arbiter ? "---|---|---|" : "");
    std::size_t equal_all = 0, total_all = 0;
    for (const auto& [name, iv] : interventions) {
      const auto t0 = std::chrono::steady_clock::now();
      const auto expected = cpu.run(iv, items, options);
      const auto t1 = std::chrono::steady_clock::now();
      const auto got = batched.run(iv, items, options);
      const auto t2 = std::chrono::steady_clock::now();
      const auto same = [&](const SampleOutput& a, const SampleOutput& b) {
        return options.mode == Mode::generate ? a.output_text == b.output_text
                                              : a.gold_emitted_first == b.gold_emitted_first;
      };
      std::size_t equal = 0;
      std::vector<double> diffs;
      for (std::size_t i = 0; i < items.size(); ++i) {
        equal += same(got[i], expected[i]);
        diffs.push_back(std::fabs(got[i].gold_logprob - expected[i].gold_logprob));
      }
      std::string versus_fp32;
      if (arbiter) {
        const auto t3 = std::chrono::steady_clock::now();
        const auto truth = arbiter->run(iv, items, options);
        const double arbiter_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t3).count();
        std::size_t cpu_right = 0, batched_right = 0;
        for (std::size_t i = 0; i < items.size(); ++i) {
          cpu_right += same(expected[i], truth[i]);
          batched_right += same(got[i], truth[i]);
        }
        char rate[32];
        std::snprintf(rate, sizeof rate, "%.2f", items.size() / arbiter_s);
        versus_fp32 = " " + std::to_string(cpu_right) + " / " + std::to_string(items.size()) + " | " +
                      std::to_string(batched_right) + " / " + std::to_string(items.size()) + " | " + rate + " |";
      }
      std::sort(diffs.begin(), diffs.end());
      const double cpu_s = std::chrono::duration<double>(t1 - t0).count();
      const double batched_s = std::chrono::duration<double>(t2 - t1).count();
      std::printf("| %s | %zu / %zu (%.1f %%) | %.3f / %.3f | %.2f | %.2f |%s\n", name.c_str(), equal, items.size(),
                  100.0 * equal / std::max<std::size_t>(items.size(), 1), diffs.empty() ? 0.0 : diffs.back(),
                  diffs.empty() ? 0.0 : diffs[diffs.size() / 2], items.size() / cpu_s, items.size() / batched_s,
                  versus_fp32.c_str());
      equal_all += equal;
      total_all += items.size();
    }
    const double share = total_all == 0 ? 1.0 : static_cast<double>(equal_all) / static_cast<double>(total_all);
    std::printf("all: %zu of %zu equal (%.1f %%; goal >= 99 %%)\n", equal_all, total_all, 100.0 * share);
    return share >= 0.99 ? 0 : 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "device_agreement: %s\n", error.what());
    return 2;
  }
}
