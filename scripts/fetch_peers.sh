#!/usr/bin/env bash
# What the peer tests (ctest label `peer`, tests/engine/engine_peer_test.cpp)
# compare the engine with, in one cached folder that this prints on stdout:
#   bin/                llama.cpp's own tools built natively from the pinned
#                       source package (bench/build_llama_cpp.sh)
#   venv/               Python for the numpy reference (tests/reference/):
#                       pinned numpy and PyYAML from PyPI; `gguf` is the
#                       gguf-py of that same llama.cpp source tree (a .pth
#                       file), so reference and peer read GGUF alike
#   SmolLM2-135M-Instruct.<TYPE>.gguf
#                       the test model re-quantised by llama-quantize
# scripts/test.sh runs this; the set-up does not (the llama.cpp build takes
# ~10 CPU minutes the first time). Safe to run again: each part is made once.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE_DIR="${MIDTUNE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/midtune}"
VERSION=0.3.36
PEERS="$CACHE_DIR/peers-$VERSION"
# The quant types the engine is checked in (engine_peer_test.cpp lists them too).
QUANT_TYPES=(Q4_K_M Q5_K_M Q3_K_M Q2_K Q5_0 Q8_0)
PYTHON_PACKAGES=(numpy==2.2.6 PyYAML==6.0.2)  # gguf-py 0.19.0 asks numpy >= 2.2.6

BIN=$(bench/build_llama_cpp.sh)
MODEL=$(scripts/fetch_model.sh)
mkdir -p "$PEERS"
ln -sfn "$BIN" "$PEERS/bin"

VENV="$PEERS/venv"
if [ ! -f "$VENV/.complete" ]; then
  echo "fetch_peers: making $VENV (${PYTHON_PACKAGES[*]})" >&2
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --only-binary :all: \
    "${PYTHON_PACKAGES[@]}" >&2
  site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$CACHE_DIR/llama.cpp-$VERSION/gguf-py" >"$site/llama_cpp_gguf_py.pth"
  "$VENV/bin/python" -c 'import gguf, numpy' >&2
  touch "$VENV/.complete"
fi

for type in "${QUANT_TYPES[@]}"; do
  out="$PEERS/SmolLM2-135M-Instruct.$type.gguf"
  [ -f "$out" ] && continue
  echo "fetch_peers: llama-quantize to $type" >&2
  # The test model is Q4_1 already, so llama-quantize wants
  # --allow-requantize: it dequantises to f32 and quantises again, and the
  # file holds the Q4_1 weights rounded once more. The tests compare each
  # file with the reference of that same file, so that extra rounding is the
  # file's own weights, not an error.
  if ! "$BIN/llama-quantize" --allow-requantize "$MODEL" "$out.part" "$type" >"$out.log" 2>&1; then
    tail -20 "$out.log" >&2
    echo "fetch_peers: llama-quantize $type failed (log: $out.log)" >&2
    exit 1
  fi
  mv "$out.part" "$out"
done
echo "$PEERS"
