#!/usr/bin/env bash
# bench/cuda_bench: the batched engine on a GPU against HF transformers
# (bench/cuda_bench.py says what is measured). Needs a CUDA device, and
# PyTorch + transformers for the peer (--no-peer without them).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" --target cuda_bench_cli -j"$(nproc)" >/dev/null
python3 bench/cuda_bench.py --cli "$BUILD_DIR/bench/cuda_bench_cli" "$@"
