#!/usr/bin/env bash
# Fetch llama.cpp's tokenizer test vectors: the vocabulary-only GGUF files
# (models/ggml-vocab-*.gguf) and their .inp/.out cases, from the
# llama-cpp-python source package on PyPI (pinned version and sha256, like the
# model). The package is kept in the cache too (the llama.cpp peer builds from
# it). Prints the vocabulary folder on stdout; a second run downloads nothing.
set -euo pipefail

CACHE_DIR="${MIDTUNE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/midtune}"
VERSION=0.3.36
SDIST_SHA256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
SDIST="$CACHE_DIR/llama_cpp_python-$VERSION.tar.gz"
VOCAB_DIR="$CACHE_DIR/llama.cpp-vocab-$VERSION"

mkdir -p "$CACHE_DIR"
if [ -f "$VOCAB_DIR/.complete" ]; then
  echo "$VOCAB_DIR"
  exit 0
fi

if [ ! -f "$SDIST" ] || [ "$(sha256sum "$SDIST" | cut -d' ' -f1)" != "$SDIST_SHA256" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "fetch_vocabs: downloading llama-cpp-python==$VERSION (source package) from PyPI" >&2
  python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$tmp" >&2
  got=$(sha256sum "$tmp/llama_cpp_python-$VERSION.tar.gz" | cut -d' ' -f1)
  if [ "$got" != "$SDIST_SHA256" ]; then
    echo "fetch_vocabs: llama_cpp_python-$VERSION.tar.gz: sha256 $got, expected $SDIST_SHA256" >&2
    exit 1
  fi
  mv "$tmp/llama_cpp_python-$VERSION.tar.gz" "$SDIST"
fi

rm -rf "$VOCAB_DIR.part"
mkdir -p "$VOCAB_DIR.part"
tar -xzf "$SDIST" -C "$VOCAB_DIR.part" --strip-components=4 --wildcards \
  "llama_cpp_python-$VERSION/vendor/llama.cpp/models/ggml-vocab-*"
touch "$VOCAB_DIR.part/.complete"
rm -rf "$VOCAB_DIR"
mv "$VOCAB_DIR.part" "$VOCAB_DIR"
echo "$VOCAB_DIR"
