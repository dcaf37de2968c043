#!/usr/bin/env python3
"""The numpy oracle of the peer tests (tests/engine/engine_peer_test.cpp):
last-position logits of token sequences on one GGUF, from the reference
forward passes of this folder over the weights as the `gguf` package
dequantises them.

  --precision fp32  make_logits_fixtures.Model: fp32 matmuls, on llama files
                    (the re-quantised SmolLM2 files: "the fp32 reference of
                    that same file"); make_arch_fixtures.Model in fp32 on
                    the other architectures (the real Gemma 3)
  --precision fp64  make_arch_fixtures.Model: fp64, every architecture the
                    engine runs (the small random-weight models)

Usage: peer_reference.py --precision fp32|fp64 MODEL SEQUENCES OUT
SEQUENCES: one sequence a line, token ids separated by spaces. OUT: for each
line, vocab float64 values (little-endian), the logits after its last token.
"""
import argparse
import os
import sys

# One BLAS thread: these matmuls are small, and OpenBLAS's spinning threads
# beside the test's own made each forward pass ~40x slower on 2 busy cores.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402  (after the thread setting, which numpy reads on import)
import make_arch_fixtures  # noqa: E402
import make_logits_fixtures  # noqa: E402
from gguf_weights import WeightsReader  # noqa: E402


def read_sequences(path):
    sequences = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            try:
                tokens = [int(t) for t in line.split()]
            except ValueError as e:
                sys.exit(f"peer_reference: {path}:{number}: not a list of token ids ({e})")
            if not tokens:
                sys.exit(f"peer_reference: {path}:{number}: empty sequence")
            sequences.append(tokens)
    return sequences


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--precision", choices=["fp32", "fp64"], required=True)
    ap.add_argument("model")
    ap.add_argument("sequences")
    ap.add_argument("out")
    args = ap.parse_args()
    sequences = read_sequences(args.sequences)
    reader = WeightsReader(args.model)
    if args.precision == "fp64":
        model = make_arch_fixtures.Model(args.model, reader=reader)
    elif reader.fields["general.architecture"].contents() == "llama":
        model = make_logits_fixtures.Model(args.model, reader)
    else:
        model = make_arch_fixtures.Model(args.model, np.float32, reader)
    with open(args.out, "wb") as out:
        for tokens in sequences:
            out.write(np.asarray(model.forward(tokens), dtype="<f8").tobytes())


if __name__ == "__main__":
    main()
