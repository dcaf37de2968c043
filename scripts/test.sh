#!/usr/bin/env bash
# The test suite: unit tests under ASan+UBSan (build-asan/), then the
# integration and model tests on the release build (build/), which
# scripts/setup.sh made. Model-backed tests find the model in the cache that
# scripts/fetch_model.sh fills, tokenizer-vector tests the vocabularies that
# scripts/fetch_vocabs.sh fills, peer tests (label `peer`) what
# scripts/fetch_peers.sh makes.
set -euo pipefail
cd "$(dirname "$0")/.."
export MIDTUNE_MODEL="${MIDTUNE_MODEL:-$(scripts/fetch_model.sh)}"
export MIDTUNE_VOCAB_DIR="${MIDTUNE_VOCAB_DIR:-$(scripts/fetch_vocabs.sh)}"

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DMIDTUNE_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$(nproc)"
(cd build-asan && ctest --output-on-failure -L unit -j"$(nproc)")

cmake --build build -j"$(nproc)"
# The peers of the `peer` tests (llama.cpp's tools, the numpy reference's
# Python, re-quantised models). Under CI=true a failure here is a failure;
# elsewhere the peer tests then skip, saying what is missing.
if peers=$(scripts/fetch_peers.sh); then
  export MIDTUNE_PEERS_DIR="$peers"
elif [ "${CI:-}" = true ]; then
  echo "test: scripts/fetch_peers.sh failed (CI=true)" >&2
  exit 1
else
  echo "test: scripts/fetch_peers.sh failed; the peer tests will skip" >&2
fi
# Debian's chromium renders the HTML report in html_report_test (a browser
# test). Only the tests need it, so the set-up leaves it out; under CI=true a
# failed install is a failure, elsewhere that test then skips.
if ! command -v chromium >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  if ! { $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 &&
         $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >&2; }; then
    if [ "${CI:-}" = true ]; then
      echo "test: installing chromium failed (CI=true)" >&2
      exit 1
    fi
    echo "test: chromium not installed; the browser test will skip" >&2
  fi
fi
(cd build && ctest --output-on-failure -LE unit)
