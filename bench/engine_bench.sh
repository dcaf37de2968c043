#!/usr/bin/env bash
# bench/engine_bench: our engine vs llama.cpp's own llama-bench (built natively
# by bench/build_llama_cpp.sh from the pinned llama-cpp-python source package;
# only the benchmarks use it) on the same GGUF, prompt lengths 512 and 2048,
# 2 threads. Extra arguments go to engine_bench.py.
# Then one row per method hook (bench/hook_cost): prefill with the hook as a
# ratio to the plain engine, same lengths and threads; and teacher_forced
# scoring under each hook, one decode step per gold token / one call.
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_BIN=$(bench/build_llama_cpp.sh)
BUILD_DIR="${BUILD_DIR:-build}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" --target engine_bench_cli hook_cost -j"$(nproc)" >/dev/null
export MIDTUNE_MODEL="${MIDTUNE_MODEL:-$(scripts/fetch_model.sh)}"
python3 bench/engine_bench.py --cli "$BUILD_DIR/bench/engine_bench_cli" --llama-bench "$LLAMA_BIN/llama-bench" "$@"
echo
"$BUILD_DIR/bench/hook_cost" --model "$MIDTUNE_MODEL" --prompt-tokens 512 2048 --threads "${THREADS:-2}"
