// EngineBackend's packed schedule (engine_backend.hpp): consecutive items
// packed into passes of at most batch_tokens tokens through
// Model::forward(calls), the argmax and gold log-probability reduced on the
// device:
//   teacher_forced  one pass over every item's prompt + gold tokens (items
//                   whose intervention reads the whole prompt: their prompts
//                   in that pass, their gold tokens in a second, as the
//                   per_sequence schedule does);
//   generate        the prompts in one pass, then greedy decode steps for
//                   every unfinished item at once; an item leaves the pass
//                   at its end-of-generation token or max_new_tokens.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>

#include "backends/engine/engine_backend.hpp"
#include "backends/engine/engine_schedule.hpp"

namespace midtune::engine {

std::size_t default_batch_tokens(const Model& model, const Device& device) {
  const std::size_t per_token = model.activation_bytes_per_token() + Sequence::cache_bytes(model.config(), device, 1);
  return std::clamp<std::size_t>(device.free_bytes() / 4 / per_token, 256, 65536);
}

std::vector<std::pair<std::size_t, std::size_t>> pass_groups(std::span<const std::size_t> item_tokens,
                                                             std::size_t batch_tokens) {
  std::vector<std::pair<std::size_t, std::size_t>> groups;
  std::size_t begin = 0;
  while (begin < item_tokens.size()) {
    std::size_t end = begin, tokens = 0;
    while (end < item_tokens.size() && (end == begin || tokens + item_tokens[end] <= batch_tokens)) {
      tokens += item_tokens[end++];
    }
    groups.emplace_back(begin, end);
    begin = end;
  }
  return groups;
}

void EngineBackend::run_packed(std::vector<Item>& items, const RunOptions& options) {
  std::vector<std::size_t> item_tokens;
  for (const Item& it : items) item_tokens.push_back(it.tokens);
  for (const auto& [begin, end] : pass_groups(item_tokens, batch_tokens_)) {
    std::vector<Item> group(std::make_move_iterator(items.begin() + static_cast<std::ptrdiff_t>(begin)),
                            std::make_move_iterator(items.begin() + static_cast<std::ptrdiff_t>(end)));
    const auto started = std::chrono::steady_clock::now();
    try {
      for (Item& it : group) {
        it.sequence = std::make_unique<Sequence>(*model_, static_cast<int>(std::max<std::size_t>(it.tokens, 1)),
                                                 *it.scales);
      }
      if (options.mode == Mode::teacher_forced) {
        run_packed_teacher_forced(group);
      } else if (options.max_new_tokens > 0) {
        run_packed_generate(group, options.max_new_tokens);
      }
    } catch (const BackendError&) {
      throw;
    } catch (const std::domain_error& e) {  // NaN / infinity in the forward pass: the input overflows
      throw InvalidInputError(std::string("engine: ") + e.what());
    } catch (const std::exception& e) {
      throw BackendError(std::string("engine (") + model_->device().name() + "): " + e.what());
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    for (std::size_t k = 0; k < group.size(); ++k) {
      group[k].out.wall_ms = ms / static_cast<double>(group.size());
      group[k].sequence.reset();
      items[begin + k] = std::move(group[k]);
    }
  }
}

// Plain items: prompt + gold inputs in one call, logits at the last prompt
// token and every gold input. Hooked items: the prompt alone first (the hooks
// read its last query), then the gold inputs, as one decode step per token.
void EngineBackend::run_packed_teacher_forced(std::vector<Item>& group) {
  std::vector<std::vector<std::int32_t>> inputs(group.size());
  std::vector<std::vector<int>> rows(group.size());
  std::vector<SequenceCall> calls;
  std::vector<std::int32_t> gold_of_row;
  std::vector<std::size_t> item_of_row;
  for (std::size_t i = 0; i < group.size(); ++i) {
    Item& it = group[i];
    const int P = static_cast<int>(it.prompt.tokens.size());
    inputs[i] = it.prompt.tokens;
    if (it.hooked) {
      rows[i] = {P - 1};
    } else {
      inputs[i].insert(inputs[i].end(), it.gold.begin(), it.gold.end() - 1);  // the last gold token is never an input
      for (std::size_t g = 0; g < it.gold.size(); ++g) rows[i].push_back(P - 1 + static_cast<int>(g));
    }
    for (std::size_t r = 0; r < rows[i].size(); ++r) {
      gold_of_row.push_back(it.gold[r]);
      item_of_row.push_back(i);
    }
    calls.push_back({it.sequence.get(), inputs[i], it.positions(), rows[i], it.hooks()});
  }
  for (Item& it : group) {
    it.out.gold_emitted_first = true;
    it.out.gold_logprob = 0.0;
  }
  auto score_pass = [&] {
    std::vector<std::int32_t> argmax;
    std::vector<double> logprob;
    model_->score(gold_of_row, argmax, logprob);
    for (std::size_t r = 0; r < argmax.size(); ++r) {
      SampleOutput& out = group[item_of_row[r]].out;
      if (!std::isfinite(logprob[r])) {
        throw std::domain_error("item '" + group[item_of_row[r]].item->id +
                                "': non-finite logits (the input overflows the model's arithmetic)");
      }
      out.gold_emitted_first = out.gold_emitted_first && argmax[r] == gold_of_row[r];
      out.gold_logprob += logprob[r];
    }
  };
  model_->forward(calls);
  ++last_stats_.passes;
  score_pass();

  // The hooked items' gold inputs, every row its own decode step.
  calls.clear();
  gold_of_row.clear();
  item_of_row.clear();
  for (std::size_t i = 0; i < group.size(); ++i) {
    Item& it = group[i];
    if (!it.hooked || it.gold.size() < 2) continue;
    inputs[i].assign(it.gold.begin(), it.gold.end() - 1);
    rows[i].clear();
    for (std::size_t g = 1; g < it.gold.size(); ++g) {
      rows[i].push_back(static_cast<int>(g - 1));
      gold_of_row.push_back(it.gold[g]);
      item_of_row.push_back(i);
    }
    calls.push_back({it.sequence.get(), inputs[i], {}, rows[i], it.hooks()});
  }
  if (calls.empty()) return;
  model_->forward(calls);
  ++last_stats_.passes;
  score_pass();
}

void EngineBackend::run_packed_generate(std::vector<Item>& group, int max_new_tokens) {
  std::vector<std::vector<std::int32_t>> inputs(group.size());
  std::vector<int> last_row(group.size());
  std::vector<SequenceCall> calls;
  std::vector<std::size_t> active;
  for (std::size_t i = 0; i < group.size(); ++i) {
    Item& it = group[i];
    last_row[i] = static_cast<int>(it.prompt.tokens.size()) - 1;
    calls.push_back({it.sequence.get(), it.prompt.tokens, it.positions(), std::span<const int>(&last_row[i], 1),
                     it.hooks()});
    active.push_back(i);
  }
  const int zero = 0;
  for (int step = 0; !active.empty(); ++step) {
    model_->forward(calls);
    ++last_stats_.passes;
    std::vector<std::int32_t> argmax;
    std::vector<double> unused;
    model_->score({}, argmax, unused);
    std::vector<std::size_t> still;
    calls.clear();
    for (std::size_t k = 0; k < active.size(); ++k) {
      Item& it = group[active[k]];
      const std::int32_t next = argmax[k];
      if (next < 0 || next >= model_->vocab()) {
        throw std::domain_error("item '" + it.item->id + "': no greedy token (non-finite logits)");
      }
      if (tokenizer_.is_end_of_generation(next)) continue;
      it.generated.push_back(next);
      if (step + 1 == max_new_tokens) continue;
      inputs[active[k]] = {next};
      still.push_back(active[k]);
      calls.push_back({it.sequence.get(), inputs[active[k]], {}, std::span<const int>(&zero, 1), it.hooks()});
    }
    active = std::move(still);
  }
}

}  // namespace midtune::engine
