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
#   gemma-3-270m-q4_k_m.gguf
#                       a real Gemma 3 (scripts/fetch_gemma3.sh), and beside
#                       it .inp/.out: llama.cpp's tokenizer test texts (those
#                       of every models/ggml-vocab-*.gguf.inp) plus a few in
#                       Gemma's own forms, and the ids llama-tokenize gives
#                       for each on this file (no BOS, special tokens not
#                       parsed, as llama.cpp's test-tokenizer-0). The pinned
#                       llama.cpp ships no Gemma 3 vocabulary: its
#                       ggml-vocab-gemma-4.gguf is Gemma 4's BPE, not Gemma 3's
#                       SentencePiece model.
# scripts/test.sh runs this; the set-up does not (the llama.cpp build takes
# ~5 CPU minutes the first time). Safe to run again: each part is made once.
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
VOCABS=$(scripts/fetch_vocabs.sh)
GEMMA3=$(scripts/fetch_gemma3.sh)
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
ln -sfn "$GEMMA3" "$PEERS/gemma-3-270m-q4_k_m.gguf"
vectors="$PEERS/gemma-3-270m-q4_k_m.gguf"
if [ ! -f "$vectors.out" ]; then
  echo "fetch_peers: llama-tokenize on llama.cpp's tokenizer test texts (Gemma 3)" >&2
  python3 - "$VOCABS/ggml-vocab-llama-spm.gguf.inp" "$BIN/llama-tokenize" "$GEMMA3" "$vectors" <<'PY'
import os, subprocess, sys, tempfile
texts_file, tokenize, model, out = sys.argv[1:]
separator = "\n__ggml_vocab_test__\n"
texts = open(texts_file, encoding="utf-8").read().split(separator)[:-1]  # the file ends with one
# Gemma's own forms: a chat turn (its markers as plain text here), runs of
# newlines and spaces (single tokens in this vocabulary), code, markup.
texts += [
    "<start_of_turn>user\nWhat is 7 times 8?<end_of_turn>\n<start_of_turn>model\n",
    "a\n\n\n\nb\t\t\tc          d",
    "def f(x):\n    return x ** 2  # square\n",
    "<table><tr><td>Gemma 3</td></tr></table> <b>bold</b>",
]
lines = []
with tempfile.TemporaryDirectory() as tmp:
    for i, text in enumerate(texts):
        path = os.path.join(tmp, "case.txt")
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        run = subprocess.run([tokenize, "-m", model, "-f", path, "--ids", "--no-bos", "--no-parse-special",
                              "--no-escape", "--log-disable"], capture_output=True, text=True)
        if run.returncode != 0 or not run.stdout.strip().startswith("["):
            sys.exit(f"fetch_peers: llama-tokenize failed on case {i}: {run.stderr[-2000:]}")
        ids = run.stdout.strip().strip("[]").replace(",", " ").split()
        lines.append("".join(" " + t for t in ids))
with open(out + ".inp.part", "w", encoding="utf-8", newline="") as f:
    f.write("".join(t + separator for t in texts))
with open(out + ".out.part", "w") as f:
    f.write("\n".join(lines) + "\n")
os.replace(out + ".inp.part", out + ".inp")
os.replace(out + ".out.part", out + ".out")
PY
fi
echo "$PEERS"
