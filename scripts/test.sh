#!/usr/bin/env bash
# The test suite: unit tests under ASan+UBSan (build-asan/), then the
# integration and model tests on the release build (build/), which
# scripts/setup.sh made. Model-backed tests find the model in the cache that
# scripts/fetch_model.sh fills, tokenizer-vector tests the vocabularies that
# scripts/fetch_vocabs.sh fills, peer tests (label `peer`) what
# scripts/fetch_peers.sh makes (the real Gemma 3 of scripts/fetch_gemma3.sh
# among them: MIDTUNE_GEMMA3_MODEL).
#
#   scripts/test.sh           the whole suite (README line 2, CI)
#   scripts/test.sh --quick   only the unit tests under the sanitizers: the
#                             inner loop while changing code
set -euo pipefail
cd "$(dirname "$0")/.."
quick=false
case "${1:-}" in
  --quick) quick=true ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--quick]" >&2; exit 2 ;;
esac
export MIDTUNE_MODEL="${MIDTUNE_MODEL:-$(scripts/fetch_model.sh)}"
export MIDTUNE_VOCAB_DIR="${MIDTUNE_VOCAB_DIR:-$(scripts/fetch_vocabs.sh)}"

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DMIDTUNE_SANITIZE=ON >/dev/null
# Only what the unit tests link: the tools and benchmarks run from build/.
cmake --build build-asan -j"$(nproc)" --target unit_tests
(cd build-asan && ctest --output-on-failure -L unit -j"$(nproc)")
if $quick; then exit 0; fi

cmake --build build -j"$(nproc)"
# The peers of the `peer` tests (llama.cpp's tools, the numpy reference's
# Python, re-quantised models, a real Gemma 3 and its tokenizer vectors).
# Under CI=true a failure here is a failure; elsewhere the peer tests then
# skip, saying what is missing.
if peers=$(scripts/fetch_peers.sh); then
  export MIDTUNE_PEERS_DIR="$peers"
  export MIDTUNE_GEMMA3_MODEL="${MIDTUNE_GEMMA3_MODEL:-$peers/gemma-3-270m-q4_k_m.gguf}"
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
# scripts/slurm/ga-run.sbatch under a real Slurm: a throwaway single-node
# cluster on 127.0.0.1 (about 2 minutes). It needs root: it installs
# slurm-wlm and munge and starts its own munged, slurmctld and slurmd.
# Under CI=true it runs through sudo and a skip is a failure, as for
# chromium above; elsewhere it runs only as root and skips otherwise.
slurm_check=0
if [ "$(id -u)" = 0 ]; then
  timeout 600 scripts/slurm/check_local_slurm.sh build/ga-run || slurm_check=$?
elif [ "${CI:-}" = true ]; then
  timeout 600 sudo -n scripts/slurm/check_local_slurm.sh build/ga-run || slurm_check=$?
else
  echo "test: not root; the Slurm check (scripts/slurm/check_local_slurm.sh) skipped" >&2
  slurm_check=77
fi
if [ "$slurm_check" = 77 ] && [ "${CI:-}" = true ]; then
  echo "test: the Slurm check skipped (CI=true)" >&2
  exit 1
elif [ "$slurm_check" != 0 ] && [ "$slurm_check" != 77 ]; then
  echo "test: scripts/slurm/check_local_slurm.sh failed (exit $slurm_check)" >&2
  exit 1
fi
