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
. scripts/lib/phases.sh
quick=false
case "${1:-}" in
  --quick) quick=true ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--quick]" >&2; exit 2 ;;
esac
phase "model and vocabularies"
export MIDTUNE_MODEL="${MIDTUNE_MODEL:-$(scripts/fetch_model.sh)}"
export MIDTUNE_VOCAB_DIR="${MIDTUNE_VOCAB_DIR:-$(scripts/fetch_vocabs.sh)}"

# The packages only the whole suite needs (chromium for the browser test,
# Slurm and munge for the Slurm check) install in the background while the
# sanitizer build runs: apt waits on the network and disk, the build on the
# cores. Best effort: where this cannot install (no root, no password-less
# sudo), the steps below install or skip as before.
apt_log=""
if ! $quick; then
  background_packages=()
  command -v chromium >/dev/null 2>&1 || background_packages+=(chromium)
  { command -v slurmctld && command -v slurmd && command -v munged; } >/dev/null 2>&1 ||
    background_packages+=(slurm-wlm munge)
  if [ ${#background_packages[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo -n"
    apt_log=$(mktemp)
    { $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
      $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${background_packages[@]}"; } \
      >"$apt_log" 2>&1 </dev/null &
    apt_pid=$!
  fi
fi

phase "sanitizer build (unit tests only)"
# clang and lld where installed (scripts/setup.sh installs both): clang
# compiles these Debug+ASan objects in about half GCC's time and lld links
# the ~70 test programs in a fraction of ld's; line tables (-g1) are what
# the sanitizers' reports need. Without them, the default compiler. No CUDA:
# its bodies run only on a GPU, from build/, which compiles them once.
sanitizer_cc=$(command -v cc) sanitizer_cxx=$(command -v c++) sanitizer_link=""
if command -v clang >/dev/null && command -v clang++ >/dev/null && command -v ld.lld >/dev/null; then
  sanitizer_cc=$(command -v clang) sanitizer_cxx=$(command -v clang++) sanitizer_link=-fuse-ld=lld
fi
# CMake drops every -D of the command line when the compiler of an existing
# tree changes (the sanitizers with them): start that tree afresh instead.
if [ -f build-asan/CMakeCache.txt ] &&
   ! grep -qx "CMAKE_CXX_COMPILER:[A-Z]*=$sanitizer_cxx" build-asan/CMakeCache.txt; then
  echo "test: build-asan/ was made with another compiler; making it again with $sanitizer_cxx" >&2
  rm -rf build-asan
fi
sanitizer_toolchain=(-DCMAKE_C_COMPILER="$sanitizer_cc" -DCMAKE_CXX_COMPILER="$sanitizer_cxx"
  -DCMAKE_EXE_LINKER_FLAGS="$sanitizer_link")
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DMIDTUNE_SANITIZE=ON \
  -DMIDTUNE_CUDA=OFF "${sanitizer_toolchain[@]}" >/dev/null
# Only what the unit tests link: the tools and benchmarks run from build/.
cmake --build build-asan -j"$(nproc)" --target unit_tests
phase "unit tests under ASan+UBSan"
ctest_log=$(mktemp)
unit_status=0
(cd build-asan && ctest --output-on-failure -L unit -j"$(nproc)") 2>&1 | tee "$ctest_log" || unit_status=$?
slowest_tests "$ctest_log" 10
[ "$unit_status" = 0 ] || exit "$unit_status"
if $quick; then exit 0; fi

phase "release build"
cmake --build build -j"$(nproc)"
phase "peers (llama.cpp, Python, re-quantised models)"
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
phase "chromium, Slurm and munge packages"
if [ -n "$apt_log" ]; then
  wait "$apt_pid" || echo "test: the background install of ${background_packages[*]} failed:" \
    "$(tail -n 3 "$apt_log")" >&2
  rm -f "$apt_log"
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
phase "integration, model and peer tests"
# scripts/slurm/ga-run.sbatch under a real Slurm: a throwaway single-node
# cluster on 127.0.0.1. It needs root: it installs slurm-wlm and munge and
# starts its own munged, slurmctld and slurmd. Under CI=true it runs through
# sudo and a skip is a failure, as for chromium above; elsewhere it runs
# only as root and skips otherwise. It runs beside the tests below: its
# searches use the synthetic backend, whose evaluations sleep, so its ~2
# minutes are mostly waiting and the tests keep the cores.
slurm_log=$(mktemp)
slurm_pid=""
if [ "$(id -u)" = 0 ]; then
  timeout 600 scripts/slurm/check_local_slurm.sh build/ga-run >"$slurm_log" 2>&1 </dev/null &
  slurm_pid=$!
elif [ "${CI:-}" = true ]; then
  timeout 600 sudo -n scripts/slurm/check_local_slurm.sh build/ga-run >"$slurm_log" 2>&1 </dev/null &
  slurm_pid=$!
fi
rest_status=0
# -j: one slot more than cores. The model and peer tests hold two slots
# each (their PROCESSORS, tests/CMakeLists.txt), so on two cores they run
# one at a time, and the extra slot lets a one-slot test run beside: most
# of those wait rather than compute (the MPI kill and stop tests, served
# backends, signals).
(cd build && ctest --output-on-failure -LE unit -j"$(($(nproc) + 1))") 2>&1 | tee "$ctest_log" || rest_status=$?
slowest_tests "$ctest_log" 10
rm -f "$ctest_log"
phase "Slurm check (the rest of its time after the tests)"
slurm_check=0
if [ -n "$slurm_pid" ]; then
  wait "$slurm_pid" || slurm_check=$?
  cat "$slurm_log"
else
  echo "test: not root; the Slurm check (scripts/slurm/check_local_slurm.sh) skipped" >&2
  slurm_check=77
fi
rm -f "$slurm_log"
[ "$rest_status" = 0 ] || exit "$rest_status"
if [ "$slurm_check" = 77 ] && [ "${CI:-}" = true ]; then
  echo "test: the Slurm check skipped (CI=true)" >&2
  exit 1
elif [ "$slurm_check" != 0 ] && [ "$slurm_check" != 77 ]; then
  echo "test: scripts/slurm/check_local_slurm.sh failed (exit $slurm_check)" >&2
  exit 1
fi
