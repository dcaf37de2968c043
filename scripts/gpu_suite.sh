#!/usr/bin/env bash
# The GPU checks in one call, for a machine with an NVIDIA GPU, a CUDA
# toolkit, CMake and a compiler but without midtune's Debian libraries or a
# network (a lent GPU machine). Unpacks the carried .deb files into a prefix
# (never into /: that would replace the machine's own sqlite, zlib, pcre2),
# builds the GPU targets in build-gpu/ for the GPU at hand, runs the GPU tests
# (the model's cuda cases with each prefill attention body: flash, cuBLAS,
# and cuDNN's where the machine's PyTorch environment has cuDNN),
# the decisions against the CPU engine on the KV experiment's held-out
# prompts (plain and one intervention of each method, bench/interventions/),
# one GPU evaluator under MPI against one process (bench/mpi_engine.sh,
# where the machine has an MPI) and bench/cuda_bench.py (every prefill
# attention body built); the log goes to $OUT/gpu_suite.log (or ./).
#   scripts/gpu_suite.sh DEB_DIR [--no-bench] [--no-agreement] [--no-mpi] [--llama70b]
# --llama70b: also the 70B shape (cuda_bench_cli --shape llama70b, random
# Q4_K_M weights kept in their blocks: ~40 GB written to /tmp and removed
# after, a few minutes): its load time, peak memory, prefill, teacher-forced
# and decode rates.
# DEB_DIR: scripts/fetch_gpu_debs.sh's download. MIDTUNE_VOCAB_DIR (the
# tokenizer vocabularies: the tiny-architecture cases) and MIDTUNE_MODEL or
# ~/.cache/midtune/SmolLM2-135M-Instruct.Q4_1.gguf (the SmolLM2 cases and
# the agreement run) are optional: what needs them says it is skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
debs=${1:?usage: scripts/gpu_suite.sh DEB_DIR [--no-bench] [--no-agreement] [--no-mpi] [--llama70b]}
shift
bench=1 agreement=1 mpi=1 llama70b=0
for arg in "$@"; do
  case $arg in
    --no-bench) bench=0 ;;
    --llama70b) llama70b=1 ;;
    --no-mpi) mpi=0 ;;
    --no-agreement) agreement=0 ;;
    *) echo "gpu_suite: unknown option $arg" >&2; exit 2 ;;
  esac
done
out=${OUT:-.}
. scripts/lib/gpu_deps.sh
gpu_deps_unpack "$debs"
model=${MIDTUNE_MODEL:-$HOME/.cache/midtune/SmolLM2-135M-Instruct.Q4_1.gguf}
tests=build-gpu/tests/engine
failed=0
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
  gpu_configure || exit 1
  cmake --build build-gpu -j"$(nproc)" --target ga-run device_bodies_test batched_model_test \
    cuda_devices_test cuda_bench_cli device_agreement >build-gpu.build.log 2>&1 || { tail -50 build-gpu.build.log; exit 1; }
  build-gpu/ga-run devices
  for t in cuda_devices_test device_bodies_test; do
    $tests/$t || { echo "FAILED: $t"; failed=1; }
  done
  # The cuda cases only (and the engine factory's, which reach the GPU by
  # device name): the host reference ones run in the suite everywhere.
  $tests/batched_model_test --gtest_filter='*cuda*:EngineFactory.*' || { echo "FAILED: batched_model_test"; failed=1; }
  # Again with the cuBLAS prefill attention (the default is the flash body).
  MIDTUNE_CUDA_ATTENTION=gemm $tests/batched_model_test --gtest_filter='*cuda*' \
    || { echo "FAILED: batched_model_test (MIDTUNE_CUDA_ATTENTION=gemm)"; failed=1; }
  # And with cuDNN's fused attention, where the build found cuDNN (the
  # machine's PyTorch environment) and the carried cudnn-frontend headers.
  attention_bodies=gemm,flash
  if grep -q 'midtune: cuDNN found' build-gpu.configure.log 2>/dev/null; then
    attention_bodies=gemm,flash,cudnn
    MIDTUNE_CUDA_ATTENTION=cudnn $tests/batched_model_test --gtest_filter='*cuda*' \
      || { echo "FAILED: batched_model_test (MIDTUNE_CUDA_ATTENTION=cudnn)"; failed=1; }
  else
    echo "cudnn attention: not built (no cuDNN in python3's nvidia.cudnn, or no cudnn-frontend in $debs)"
  fi
  if [ $agreement = 1 ]; then
    if [ -f "$model" ]; then
      sed "s|~/.cache/midtune/SmolLM2-135M-Instruct.Q4_1.gguf|$model|" experiments/lpes-kv-smollm2.yaml >/tmp/gpu-suite-kv.yaml
      ivs=(); for f in bench/interventions/*.json; do ivs+=(--intervention "$f"); done
      build-gpu/bench/device_agreement /tmp/gpu-suite-kv.yaml --device cuda --split heldout "${ivs[@]}" \
        || echo "device_agreement: below its 99 % goal (or failed), see above"
    else
      echo "device_agreement: skipped, no model at $model"
    fi
  fi
  # One GPU evaluator under MPI against one process (where the machine has
  # an MPI the build found): quickstart on device: cuda, the stored samples
  # compared row by row.
  if [ $mpi = 1 ]; then
    if [ -f "$model" ] && command -v mpirun >/dev/null && command -v sqlite3 >/dev/null; then
      sed -e 's|device: cpu|device: cuda|' -e '/^  threads:/d' -e "s|~/.cache/midtune/SmolLM2-135M-Instruct.Q4_1.gguf|$model|" \
        -e 's/search_samples: 3$/search_samples: 60/' -e 's/generations: 2,/generations: 3,/' \
        experiments/quickstart.yaml >/tmp/gpu-suite-quickstart-cuda.yaml
      OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 EXPERIMENT=/tmp/gpu-suite-quickstart-cuda.yaml THREADS=1 \
        bench/mpi_engine.sh build-gpu "$out/mpi-gpu" || { echo "FAILED: mpi_engine"; failed=1; }
    else
      echo "mpi_engine: skipped (needs the model at $model, mpirun and sqlite3)"
    fi
  fi
  if [ $bench = 1 ]; then
    PYTHONUNBUFFERED=1 python3 bench/cuda_bench.py --cli build-gpu/bench/cuda_bench_cli --attention "$attention_bodies" \
      || { echo "FAILED: cuda_bench"; failed=1; }
    # Weights kept in their blocks: decode from the blocks against the tile
    # path in one run (where it loses, lower DeviceOps::kBlockGemvRows).
    build-gpu/bench/cuda_bench_cli --weights q4_k_m --precision file --file-gemv both --decode-batches 1 8 16 32 \
      --no-generation --prefill 512 || { echo "FAILED: cuda_bench_cli file-gemv"; failed=1; }
    # Decode with one block a query (MIDTUNE_CUDA_DECODE_SPLITS=1) against
    # each query's keys split over several blocks (the default), after 4096
    # tokens where the split pays most.
    for splits in 1 ''; do
      echo "decode, MIDTUNE_CUDA_DECODE_SPLITS='$splits':"
      MIDTUNE_CUDA_DECODE_SPLITS=$splits build-gpu/bench/cuda_bench_cli --prefill 512 --decode-context 4096 \
        --decode-batches 1 4 32 --no-generation --repeats 2 || { echo "FAILED: cuda_bench_cli decode splits $splits"; failed=1; }
    done
  fi
  if [ $llama70b = 1 ]; then
    build-gpu/bench/cuda_bench_cli --shape llama70b --weights q4_k_m --precision file --gguf /tmp/midtune-bench-llama70b.gguf \
      --prefill 4096 --decode-batches 1 32 --no-generation --repeats 1 || { echo "FAILED: cuda_bench_cli llama70b"; failed=1; }
    rm -f /tmp/midtune-bench-llama70b.gguf /tmp/midtune-bench-llama70b.gguf.partial
  fi
  echo "gpu_suite: $([ $failed = 0 ] && echo passed || echo FAILED)"
  [ $failed = 0 ]
} 2>&1 | tee "$out/gpu_suite.log"
exit "${PIPESTATUS[0]}"
