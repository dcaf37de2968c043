#!/usr/bin/env bash
# Builds llama.cpp's own tools natively (CMake, Release, this CPU's ISA) from
# the llama.cpp sources inside the pinned llama-cpp-python source package that
# scripts/fetch_vocabs.sh fetched and verified: llama-bench (speed),
# llama-simple (greedy text) and llama-quantize (every GGUF format from one
# file). Cached; prints the folder holding the binaries. Only the benchmarks
# and peer comparisons use it, so the set-up does not build it.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE_DIR="${MIDTUNE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/midtune}"
VERSION=0.3.36
SRC="$CACHE_DIR/llama.cpp-$VERSION"
BIN="$SRC/build/bin"
TOOLS=(llama-bench llama-simple llama-quantize)

if [ -x "$BIN/llama-bench" ] && [ -x "$BIN/llama-simple" ] && [ -x "$BIN/llama-quantize" ]; then
  echo "$BIN"
  exit 0
fi
scripts/fetch_vocabs.sh >/dev/null  # fetches and verifies the source package
if [ ! -f "$SRC/CMakeLists.txt" ]; then
  rm -rf "$SRC.part"
  mkdir -p "$SRC.part"
  tar -xzf "$CACHE_DIR/llama_cpp_python-$VERSION.tar.gz" -C "$SRC.part" --strip-components=3 \
    "llama_cpp_python-$VERSION/vendor/llama.cpp"
  rm -rf "$SRC"
  mv "$SRC.part" "$SRC"
fi
echo "build_llama_cpp: building ${TOOLS[*]} (takes a while the first time)" >&2
cmake -S "$SRC" -B "$SRC/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=OFF >&2
cmake --build "$SRC/build" --target "${TOOLS[@]}" -j"$(nproc)" >&2
echo "$BIN"
