#!/usr/bin/env bash
# Builds llama.cpp's own tools natively (CMake, Release, this CPU's ISA) from
# the llama.cpp sources inside the pinned llama-cpp-python source package that
# scripts/fetch_vocabs.sh fetched and verified: llama-bench (speed),
# llama-simple (greedy text), llama-quantize (every GGUF format from one
# file) and llama-tokenize (token ids of a text). Cached; prints the folder
# holding the binaries. Only the benchmarks and peer comparisons use it, so
# the set-up does not build it.
#   usage: bench/build_llama_cpp.sh [native|avx2|avxvnni]
# avx2 builds llama-bench alone with GGML_NATIVE off and AVX2/FMA/F16C on,
# AVX-512 off (build-avx2/), so that an AVX-512 machine can compare the
# engine's forced AVX2 path (MIDTUNE_ISA=avx2) with llama.cpp's AVX2 code;
# avxvnni the same plus AVX-VNNI (build-avxvnni/), the peer of
# MIDTUNE_ISA=avxvnni (AVX2 CPUs with vpdpbusd on 256-bit registers).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE_DIR="${MIDTUNE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/midtune}"
VERSION=0.3.36
SRC="$CACHE_DIR/llama.cpp-$VERSION"
BIN="$SRC/build/bin"
TOOLS=(llama-bench llama-simple llama-quantize llama-tokenize)
VARIANT="${1:-native}"
ISA_FLAGS=(-DGGML_NATIVE=ON)
case "$VARIANT" in
  native)
    # Some virtual CPUs report AMX that the hypervisor does not enable:
    # -march=native then builds ggml's AMX repacking, and llama-simple dies
    # on its first AMX instruction (SIGSEGV while loading a Q8_0 / K-quant
    # file). Where cpuinfo names AMX, build for the AVX-512 set such CPUs
    # all have instead, AMX off, in a folder of its own.
    if grep -qw amx_tile /proc/cpuinfo 2>/dev/null; then
      BIN="$SRC/build-no-amx/bin"
      ISA_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
        -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON
        -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
    fi
    ;;
  avx2)
    BIN="$SRC/build-avx2/bin"
    TOOLS=(llama-bench)
    ISA_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
      -DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF)
    ;;
  avxvnni)
    BIN="$SRC/build-avxvnni/bin"
    TOOLS=(llama-bench)
    ISA_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
      -DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=ON)
    ;;
  *) echo "build_llama_cpp: unknown variant '$VARIANT' (native, avx2 or avxvnni)" >&2; exit 2 ;;
esac

complete=1
for tool in "${TOOLS[@]}"; do [ -x "$BIN/$tool" ] || complete=0; done
if [ "$complete" = 1 ]; then
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
echo "build_llama_cpp: building ${TOOLS[*]} ($VARIANT; takes a while the first time)" >&2
BUILD="$(dirname "$BIN")"
# The helpers the tools link (llama-common, cpp-httplib) at -O0, libllama and
# ggml at Release's -O3: bench/llama_cpp_helpers_unoptimised.cmake says why.
cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release "${ISA_FLAGS[@]}" -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=OFF \
  -DCMAKE_PROJECT_INCLUDE="$PWD/bench/llama_cpp_helpers_unoptimised.cmake" >&2
cmake --build "$BUILD" --target "${TOOLS[@]}" -j"$(nproc)" >&2
echo "$BIN"
