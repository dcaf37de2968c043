#!/usr/bin/env bash
# The GPU checks, for a machine with an NVIDIA GPU but without midtune's
# Debian libraries or a network (a lent GPU machine): unpacks the carried
# .deb files into a prefix (never into /), builds the GPU tests and the
# benchmark in build-gpu/, runs them, and writes the log to $OUT (or .).
#   scripts/gpu_suite.sh DEB_DIR [--no-bench]
# DEB_DIR holds `apt-get download` files of the packages scripts/setup.sh
# installs. The tiny-architecture cases need the vocabulary files
# (MIDTUNE_VOCAB_DIR), the SmolLM2 cases the model (MIDTUNE_MODEL); each
# reports itself skipped without them.
set -euo pipefail
cd "$(dirname "$0")/.."
debs=${1:?usage: scripts/gpu_suite.sh DEB_DIR [--no-bench]}
out=${OUT:-.}
prefix=/opt/midtune-deps
mkdir -p "$prefix"
for f in "$debs"/*.deb; do dpkg -x "$f" "$prefix"; done
lib=$prefix/usr/lib/x86_64-linux-gnu
export CMAKE_PREFIX_PATH=$prefix/usr:$lib/cmake PKG_CONFIG_SYSROOT_DIR=$prefix
export PKG_CONFIG_PATH=$lib/pkgconfig:$prefix/usr/share/pkgconfig LD_LIBRARY_PATH=$lib
export CPATH=$prefix/usr/include LIBRARY_PATH=$lib
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build-gpu -j"$(nproc)" --target ga-run device_ops_test cuda_ops_test batched_model_test \
    cuda_devices_test cuda_bench_cli
  build-gpu/ga-run devices
  for t in cuda_devices_test cuda_ops_test device_ops_test batched_model_test; do
    build-gpu/tests/engine/$t || echo "FAILED: $t"
  done
  if [ "${2:-}" != --no-bench ]; then
    python3 bench/cuda_bench.py --cli build-gpu/bench/cuda_bench_cli || echo "FAILED: cuda_bench"
  fi
} 2>&1 | tee "$out/gpu_suite.log"
