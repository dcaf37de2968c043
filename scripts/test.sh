#!/usr/bin/env bash
# The test suite: unit tests under ASan+UBSan (build-asan/), then the
# integration and model tests on the release build (build/), which
# scripts/setup.sh made. Model-backed tests find the model in the cache that
# scripts/fetch_model.sh fills, tokenizer-vector tests the vocabularies that
# scripts/fetch_vocabs.sh fills.
set -euo pipefail
cd "$(dirname "$0")/.."
export MIDTUNE_MODEL="${MIDTUNE_MODEL:-$(scripts/fetch_model.sh)}"
export MIDTUNE_VOCAB_DIR="${MIDTUNE_VOCAB_DIR:-$(scripts/fetch_vocabs.sh)}"

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DMIDTUNE_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$(nproc)"
(cd build-asan && ctest --output-on-failure -L unit -j"$(nproc)")

cmake --build build -j"$(nproc)"
(cd build && ctest --output-on-failure -LE unit)
