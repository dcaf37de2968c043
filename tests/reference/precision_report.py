#!/usr/bin/env python3
"""Per tensor type, the worst last-position logit difference between the engine
and the numpy fp32 forward pass of the same GGUF (make_logits_fixtures.Model:
weights dequantised by the `gguf` package, fp32 matmuls).

The prompts are the token ids of tests/reference/fixtures/logits_fp32.json
(SmolLM2's vocabulary, so any re-quantisation of SmolLM2 takes them). The
engine's logits come from the engine_logits_dump tool of the build.

Usage: python3 tests/reference/precision_report.py --dump build/tests/engine/engine_logits_dump \
           MODEL.gguf [MODEL.gguf ...]
Prints one markdown row per model: worst |engine - reference| over all logits
of all prompts, that difference relative to the largest reference logit, the
mean |engine - reference| (steadier than the worst of ~600k values when two
variants are compared), and how many prompts keep the reference's top-1
token.
"""
import argparse
import collections
import json
import os
import subprocess
import tempfile

import numpy as np
import gguf

from make_logits_fixtures import Model

HERE = os.path.dirname(os.path.abspath(__file__))


def matrix_types(path):
    """Counts of the ggml types of the 2-D tensors (what decides the path)."""
    counts = collections.Counter()
    for t in gguf.GGUFReader(path).tensors:
        if len(t.shape) == 2:
            counts[t.tensor_type.name] += 1
    return ", ".join(f"{name} x{n}" for name, n in counts.most_common())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True, help="path of the engine_logits_dump executable")
    ap.add_argument("--isa", default=None, help="scalar, avx2 or avx512 (default: the best here)")
    ap.add_argument("--prompts", type=int, default=12, help="how many fixture prompts to run")
    ap.add_argument("models", nargs="+")
    args = ap.parse_args()
    with open(os.path.join(HERE, "fixtures", "logits_fp32.json")) as f:
        cases = [c for c in json.load(f)["cases"] if not c["rope_scale"]][: args.prompts]
    prompts = [c["tokens"] for c in cases]
    print("| file | matrix types | worst abs diff | relative to max logit | mean abs diff | top-1 kept |")
    print("|---|---|---|---|---|---|")
    for path in args.models:
        model = Model(path)
        with tempfile.TemporaryDirectory() as tmp:
            tokens_path = os.path.join(tmp, "tokens.txt")
            out_path = os.path.join(tmp, "logits.bin")
            with open(tokens_path, "w") as f:
                for toks in prompts:
                    f.write(" ".join(str(t) for t in toks) + "\n")
            env = dict(os.environ, **({"MIDTUNE_ISA": args.isa} if args.isa else {}))
            subprocess.run([args.dump, path, tokens_path, out_path], check=True, env=env)
            got = np.fromfile(out_path, dtype=np.float32).reshape(len(prompts), -1)
        worst = rel = 0.0
        total = 0.0
        kept = 0
        for toks, row in zip(prompts, got):
            ref = model.forward(toks)
            diff = float(np.max(np.abs(row - ref)))
            worst = max(worst, diff)
            total += float(np.mean(np.abs(row - ref)))
            rel = max(rel, diff / float(np.max(np.abs(ref))))
            kept += int(np.argmax(row) == np.argmax(ref))
        print(f"| {os.path.basename(path)} | {matrix_types(path)} | {worst:.3g} | {rel:.3g} | "
              f"{total / len(prompts):.3g} | {kept}/{len(prompts)} |", flush=True)


if __name__ == "__main__":
    main()
