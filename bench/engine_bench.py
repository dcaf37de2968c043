#!/usr/bin/env python3
"""Engine vs llama.cpp throughput on the same GGUF (issue 3 item 6).

For each prompt length: runs build/bench/engine_bench_cli (our engine) and
llama-cpp-python with the same token ids, the same thread count and the same
number of decoded tokens, then prints prefill and decode tokens/s and the
ratios (ours / llama.cpp). Prefill is the best of --repeats runs for both.

llama.cpp is loaded with ggml's extra buffer types off (see
tests/reference/llamacpp_loader.py: this CPU reports AMX, which the hypervisor
does not enable); it has no repacked CPU path for Q4_1 either way.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))


def bench_tokens(count, vocab):
    """Same recurrence as bench_tokens() in backends/engine/model_bench.cpp."""
    first = 100 if vocab > 200 else 0  # skip special tokens when the vocabulary allows
    out, state = [], 12345
    for _ in range(count):
        state = (state * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        out.append(first + (state >> 33) % (vocab - first))
    return out


def run_llama(model, n, decode, threads, repeats):
    import llamacpp_loader
    llm = llamacpp_loader.load(model, n_ctx=n + decode + 16, n_threads=threads)
    tokens = bench_tokens(n + decode, llm.n_vocab())
    best = best_cpu = float("inf")
    for _ in range(repeats):
        llm.reset()
        start, cpu_start = time.perf_counter(), time.process_time()
        llm.eval(tokens[:n])
        best = min(best, time.perf_counter() - start)
        best_cpu = min(best_cpu, time.process_time() - cpu_start)
    start, cpu_start = time.perf_counter(), time.process_time()
    for i in range(decode):
        llm.eval([tokens[n + i]])
    decode_s, decode_cpu = time.perf_counter() - start, time.process_time() - cpu_start
    llm.close()
    return {"prefill_tok_s": n / best, "decode_tok_s": decode / decode_s if decode else 0.0,
            "prefill_tok_per_cpu_s": n / best_cpu, "decode_tok_per_cpu_s": decode / decode_cpu if decode else 0.0}


def run_engine(cli, model, n, decode, threads, repeats):
    out = subprocess.run([cli, "--model", model, "--prompt-tokens", str(n), "--decode-tokens", str(decode),
                          "--threads", str(threads), "--repeats", str(repeats)],
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
    args = ap.parse_args()

    rows = []
    for n in args.lengths:
        ours = run_engine(args.cli, args.model, n, args.decode, args.threads, args.repeats)
        theirs = run_llama(args.model, n, args.decode, args.threads, args.repeats)
        rows.append((n, ours, theirs))
    print(f"model {os.path.basename(args.model)}, {args.threads} threads, {args.decode} decoded tokens, "
          f"isa {rows[0][1]['isa']}")
    print(f"{'prompt':>6} | {'midtune prefill':>15} {'llama.cpp prefill':>17} {'ratio':>6} | "
          f"{'midtune decode':>14} {'llama.cpp decode':>16} {'ratio':>6}")
    for n, ours, theirs in rows:
        print(f"{n:>6} | {ours['prefill_tok_s']:>15.1f} {theirs['prefill_tok_s']:>17.1f} "
              f"{ours['prefill_tok_s'] / theirs['prefill_tok_s']:>5.2f}x | "
              f"{ours['decode_tok_s']:>14.1f} {theirs['decode_tok_s']:>16.1f} "
              f"{ours['decode_tok_s'] / theirs['decode_tok_s']:>5.2f}x")
    print("per second of process CPU time (load-independent; with >1 thread llama.cpp's spinning workers count too):")
    for n, ours, theirs in rows:
        print(f"{n:>6} | {ours['prefill_tok_per_cpu_s']:>15.1f} {theirs['prefill_tok_per_cpu_s']:>17.1f} "
              f"{ours['prefill_tok_per_cpu_s'] / theirs['prefill_tok_per_cpu_s']:>5.2f}x | "
              f"{ours['decode_tok_per_cpu_s']:>14.1f} {theirs['decode_tok_per_cpu_s']:>16.1f} "
              f"{ours['decode_tok_per_cpu_s'] / theirs['decode_tok_per_cpu_s']:>5.2f}x")
    print(json.dumps([{"prompt_tokens": n, "midtune": o, "llama_cpp": t} for n, o, t in rows]))


if __name__ == "__main__":
    main()
