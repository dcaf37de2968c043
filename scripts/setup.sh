#!/usr/bin/env bash
# One-step set-up on a fresh Debian machine: system packages, the test model,
# and a release build in build/ (the tools, benchmarks and every test but the
# unit tests, which scripts/test.sh runs from its sanitizer tree). Safe to
# run again (everything is cached).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/phases.sh

# python3-venv: scripts/fetch_peers.sh makes the peer tests' pinned Python with it.
# clang and lld: scripts/test.sh builds its sanitizer tree with them (about
# half GCC's compile time for those Debug+ASan objects); the release tree is GCC's.
PACKAGES=(build-essential cmake ninja-build pkg-config git python3 python3-pip python3-venv
  libeigen3-dev libtbb-dev nlohmann-json3-dev libsqlite3-dev sqlite3 libcli11-dev
  libgtest-dev libgmock-dev libyaml-cpp-dev libcpp-httplib-dev zlib1g-dev libpcre2-dev libxxhash-dev
  openmpi-bin libopenmpi-dev ccache clang lld)

phase "system packages"
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep "install ok installed" >/dev/null || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}" >&2
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi

phase "release build (the test model and vocabularies fetched beside it)"
# The downloads wait on the network and the build on the cores, so they run
# side by side; the fetches' messages are shown only if they fail.
fetch_log=$(mktemp)
{ scripts/fetch_model.sh >/dev/null && scripts/fetch_vocabs.sh >/dev/null; } 2>"$fetch_log" </dev/null &
fetch_pid=$!
# Without the unit tests: scripts/test.sh builds and runs them in the
# sanitizer tree (build-asan/); the release tree holds the tools, the
# benchmarks and the integration, model and peer tests.
# Where the CUDA toolkit ships cuDNN, the GPU engine's cuDNN attention body
# needs the cudnn-frontend headers (12 MB from PyPI; CMake finds them in the
# cache). Without them the build keeps the flash body.
if compgen -G '/usr/local/cuda/include/cudnn.h' >/dev/null || compgen -G '/usr/include/cudnn.h' >/dev/null ||
   compgen -G '/usr/include/*/cudnn.h' >/dev/null; then
  scripts/fetch_cudnn_frontend.sh >/dev/null </dev/null ||
    echo "setup: cudnn-frontend not fetched (above); building without the cuDNN attention body" >&2
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMIDTUNE_UNIT_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc)"

phase "test model and vocabularies (the rest of their time after the build)"
if ! wait "$fetch_pid"; then
  cat "$fetch_log" >&2
  echo "setup: fetching the test model or llama.cpp's tokenizer vectors failed (above)" >&2
  exit 1
fi
rm -f "$fetch_log"
