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
import struct
import sys

# One BLAS thread: these matmuls are small, and OpenBLAS's spinning threads
# beside the test's own made each forward pass ~40x slower on 2 busy cores.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402  (after the thread setting, which numpy reads on import)
import gguf  # noqa: E402
import make_arch_fixtures  # noqa: E402
import make_logits_fixtures  # noqa: E402


class WeightsReader(gguf.GGUFReader):
    """gguf.GGUFReader that steps over the tokenizer's arrays, which the
    models never read: gguf makes numpy views of each of their elements (two
    a string), most of a run's time on the real vocabularies (up to 150k
    tokens and as many merges). Every other field and the tensors are read
    by gguf's own code."""

    def _build_fields(self, offs, count):
        if self.byte_order != "I":  # a file of the other byte order: as gguf reads it
            return super()._build_fields(offs, count)
        for _ in range(count):
            klen, kdata = self._get_str(offs)
            value = offs + int(klen.nbytes + kdata.nbytes)
            end = None
            if bytes(kdata).startswith(b"tokenizer.ggml.") and self._get(value, np.uint32)[0] == gguf.GGUFValueType.ARRAY:
                end = self._array_end(value + 4)
            offs = end if end is not None else super()._build_fields(offs, 1)
        return offs

    def _array_end(self, offs):
        """Where the array at `offs` (item type, count, items) ends; None for
        an array of arrays (left to gguf)."""
        itype, count = struct.unpack_from("=IQ", self.data, offs)
        offs += 12
        if itype == gguf.GGUFValueType.STRING:
            for _ in range(count):
                offs += 8 + struct.unpack_from("=Q", self.data, offs)[0]
            return offs
        if itype == gguf.GGUFValueType.ARRAY:
            return None
        return offs + count * np.dtype(self.gguf_scalar_to_np[gguf.GGUFValueType(itype)]).itemsize


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
