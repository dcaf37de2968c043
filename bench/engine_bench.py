#!/usr/bin/env python3
"""Engine vs llama.cpp throughput on the same GGUF.

For each prompt length: runs build/bench/engine_bench_cli (our engine) and
llama.cpp's own llama-bench (built natively by bench/build_llama_cpp.sh from
the pinned llama-cpp-python source package) with the same thread count and
number of decoded tokens, then prints prefill and decode tokens/s and the
ratios (ours / llama.cpp). Prefill is the best of --repeats runs for us and
llama-bench's mean over its repetitions; decode runs after the prompt on
both sides (llama-bench's -d, the context depth).

--isa caps our engine's instruction set (scalar, avx2, avxvnni, avx512,
avx512bf16); to compare the AVX2 paths on an AVX-512 machine, pair --isa avx2
with the llama-bench that `bench/build_llama_cpp.sh avx2` builds (AVX-512
off), and --isa avxvnni with `bench/build_llama_cpp.sh avxvnni`'s (AVX2 and
AVX-VNNI).

llama-bench runs with --repack 0 (ggml's extra buffer types off): some of
these virtual CPUs report AMX, which the hypervisor does not enable, and the
repacked path dies on its first AMX instruction.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def llama_bench(binary, model, threads, repeats, prompt, gen, depth):
    out = subprocess.run([binary, "-m", model, "-t", str(threads), "-r", str(repeats), "-p", str(prompt),
                          "-n", str(gen), "-d", str(depth), "--repack", "0", "-o", "json"],
                         check=True, capture_output=True, text=True).stdout
    rows = json.loads(out)
    if len(rows) != 1:
        sys.exit(f"engine_bench: llama-bench gave {len(rows)} result rows, expected 1")
    return rows[0]["avg_ts"]


def run_llama(binary, model, n, decode, threads, repeats):
    prefill = llama_bench(binary, model, threads, repeats, n, 0, 0)
    decode_ts = llama_bench(binary, model, threads, repeats, 0, decode, n) if decode else 0.0
    return {"prefill_tok_s": prefill, "decode_tok_s": decode_ts}


def run_engine(cli, model, n, decode, threads, repeats, isa):
    out = subprocess.run([cli, "--model", model, "--prompt-tokens", str(n), "--decode-tokens", str(decode),
                          "--threads", str(threads), "--repeats", str(repeats)] + (["--isa", isa] if isa else []),
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.environ.get(
        "MIDTUNE_MODEL", os.path.expanduser("~/.cache/midtune/SmolLM2-135M-Instruct.Q4_1.gguf")))
    ap.add_argument("--cli", default=os.path.join(HERE, "..", "build", "bench", "engine_bench_cli"))
    ap.add_argument("--lengths", type=int, nargs="+", default=[512, 2048])
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--llama-bench", required=True, help="llama.cpp's llama-bench binary")
    ap.add_argument("--isa", default="", help="cap our engine's ISA (default: the best this CPU has)")
    args = ap.parse_args()

    rows = []
    for n in args.lengths:
        ours = run_engine(args.cli, args.model, n, args.decode, args.threads, args.repeats, args.isa)
        theirs = run_llama(args.llama_bench, args.model, n, args.decode, args.threads, args.repeats)
        rows.append((n, ours, theirs))
    print(f"model {os.path.basename(args.model)}, {args.threads} threads, {args.decode} decoded tokens, "
          f"midtune isa {rows[0][1]['isa']}, llama-bench {args.llama_bench}")
    print(f"{'prompt':>6} | {'midtune prefill':>15} {'llama.cpp prefill':>17} {'ratio':>6} | "
          f"{'midtune decode':>14} {'llama.cpp decode':>16} {'ratio':>6}")
    for n, ours, theirs in rows:
        print(f"{n:>6} | {ours['prefill_tok_s']:>15.1f} {theirs['prefill_tok_s']:>17.1f} "
              f"{ours['prefill_tok_s'] / theirs['prefill_tok_s']:>5.2f}x | "
              f"{ours['decode_tok_s']:>14.1f} {theirs['decode_tok_s']:>16.1f} "
              f"{ours['decode_tok_s'] / theirs['decode_tok_s']:>5.2f}x")
    print(json.dumps([{"prompt_tokens": n, "midtune": o, "llama_cpp": t} for n, o, t in rows]))


if __name__ == "__main__":
    main()
