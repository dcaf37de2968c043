#!/usr/bin/env python3
"""bench/cuda_bench: midtune's batched engine (backend.device: cuda) against HF
transformers with PyTorch (eager attention, which the methods' public code
needs) on the same GPU, model shape and prompts, in the same run.

Ours: bench/cuda_bench_cli (JSON lines). Peer: a LlamaForCausalLM of the same
shape with random bf16 weights, built in this process. Printed per measure:
both figures and ours / HF; for prefill also the fraction of the GPU's bf16
peak (a plain cuBLAS bf16 product measured by cuda_bench_cli in the same
run). Goals (docs: backends/engine/README.md "GPU"): prefill >= 40 % of the
peak at 4096 tokens, teacher-forced prompts/s >= 3x HF.

  python3 bench/cuda_bench.py --cli build-gpu/bench/cuda_bench_cli [--shape llama7b] [--no-peer]
  python3 bench/cuda_bench.py --cli build-gpu/bench/cuda_bench_cli --weights q4_k_m --precision file --no-peer
      (the matrices kept in Q4_K / Q6_K blocks on the device: backend.precision: file)
  python3 bench/cuda_bench.py --cli build/bench/cuda_bench_cli --device reference --shape tiny --no-peer
      (checks this script on a machine without a GPU; the figures mean nothing)
"""
import argparse
import json
import subprocess
import sys
import time


def run_ours(args):
    cmd = [args.cli, "--device", args.device, "--shape", args.shape, "--weights", args.weights,
           "--precision", args.precision] + (["--gguf", args.gguf] if args.gguf else []) + [
           "--batch-tokens", str(args.batch_tokens), "--tf-prompt", str(args.tf_prompt),
           "--tf-gold", str(args.tf_gold), "--tf-batch", str(args.tf_batch),
           "--decode-context", str(args.decode_context), "--decode-steps", str(args.decode_steps),
           "--repeats", str(args.repeats), "--prefill", *map(str, args.prefill),
           "--decode-batches", *map(str, args.decode_batches)] + (["--profile"] if args.profile else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def best_time(fn, repeats, sync):
    best = float("inf")
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


def run_hf(args, shape):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=shape["vocab"], hidden_size=shape["hidden"], intermediate_size=shape["ffn"],
                         num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"],
                         num_key_value_heads=shape["kv_heads"], max_position_embeddings=8192,
                         rms_norm_eps=1e-5, attn_implementation="eager")
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    sync = torch.cuda.synchronize
    results = []

    def forward(ids, keep):
        try:
            return model(ids, logits_to_keep=keep).logits
        except TypeError:  # transformers before logits_to_keep
            return model(ids).logits[:, -keep:]

    gen = torch.Generator(device="cuda").manual_seed(1)
    torch.cuda.reset_peak_memory_stats()
    with torch.no_grad():
        for length in args.prefill:
            count = max(1, args.batch_tokens // length)
            ids = torch.randint(3, shape["vocab"], (count, length), device="cuda", generator=gen)
            s = best_time(lambda: forward(ids, 1), args.repeats, sync)
            results.append({"measure": "prefill", "length": length, "prompts": count, "tokens_per_s": count * length / s})
        length = args.tf_prompt + args.tf_gold - 1
        ids = torch.randint(3, shape["vocab"], (args.tf_batch, length), device="cuda", generator=gen)
        gold = torch.full((args.tf_batch, args.tf_gold), 5, device="cuda")

        def teacher_forced():
            logits = forward(ids, args.tf_gold).float()
            logp = torch.log_softmax(logits, dim=-1).gather(-1, gold.unsqueeze(-1)).sum()
            emitted = (logits.argmax(-1) == gold).all(-1)
            return logp.item(), emitted.cpu()

        s = best_time(teacher_forced, args.repeats, sync)
        results.append({"measure": "teacher_forced", "prompts_per_s": args.tf_batch / s})
        for batch in args.decode_batches:
            ids = torch.randint(3, shape["vocab"], (batch, args.decode_context), device="cuda", generator=gen)
            out = model(ids, use_cache=True)
            past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            sync()
            start = time.perf_counter()
            for _ in range(args.decode_steps):
                out = model(nxt, past_key_values=past, use_cache=True)
                past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            sync()
            results.append({"measure": "decode", "batch": batch,
                            "tokens_per_s": batch * args.decode_steps / (time.perf_counter() - start)})
    results.append({"measure": "memory", "peak_bytes": torch.cuda.max_memory_allocated()})
    return results, f"torch {torch.__version__}"


def key(r):
    return (r["measure"], r.get("length"), r.get("batch"))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cli", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--shape", default="llama7b")
    p.add_argument("--gguf", default=None, help="default: cuda_bench_cli's, per shape and weights")
    p.add_argument("--weights", default="bf16", help="random model's matrices: bf16 | q8_0 | q4_k_m")
    p.add_argument("--precision", default="bf16",
                   help="bf16 (widened at load) | file (kept in their blocks, dequantised per product)")
    p.add_argument("--prefill", type=int, nargs="+", default=[512, 2048, 4096])
    p.add_argument("--batch-tokens", type=int, default=16384)
    p.add_argument("--tf-prompt", type=int, default=3000, help="LPES KV protocol prompts are ~3k tokens")
    p.add_argument("--tf-gold", type=int, default=8)
    # 8 x 3k tokens: a 24 GB fp32 KV cache for the 7B shape (no GQA), which
    # leaves room for HF's eager attention matrices on an 80 GB GPU.
    p.add_argument("--tf-batch", type=int, default=8)
    p.add_argument("--decode-batches", type=int, nargs="+", default=[1, 32])
    p.add_argument("--decode-context", type=int, default=512)
    p.add_argument("--decode-steps", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-peer", action="store_true", help="measure ours only")
    p.add_argument("--profile", action="store_true",
                   help="also print each measure's time per op (every op then waits for the last: slower figures)")
    args = p.parse_args()

    ours = run_ours(args)
    by = {r["measure"]: r for r in ours}
    peak, load = by["peak"]["tflops"], by["load"]
    print(f"device: {ours[0]['device']}; bf16 peak (cuBLAS 8192^3 here): {peak:.1f} TFLOP/s")
    print(f"model: {load['layers']} layers, hidden {load['hidden']}, heads {load['heads']}/{load['kv_heads']}, "
          f"ffn {load['ffn']}, vocab {load['vocab']}; weights {load['weight_bytes'] / 2**30:.2f} GiB, "
          f"loaded in {load['seconds']:.1f} s")
    peer = {}
    if not args.no_peer:
        hf, version = run_hf(args, load)
        peer = {key(r): r for r in hf}
        print(f"peer: HF transformers ({version}), eager attention, bf16")
    print(f"{'measure':<28} {'midtune':>12} {'HF':>12} {'ratio':>7}  notes")
    for r in ours:
        m = r["measure"]
        if m in ("peak", "load", "profile"):
            continue
        other = peer.get(key(r), {})
        if m == "prefill":
            name, unit, ours_v = f"prefill {r['length']} (x{r['prompts']})", "tok/s", r["tokens_per_s"]
            note = f"{r['tflops']:.0f} TFLOP/s = {100 * r['fraction_of_peak']:.0f} % of peak"
            theirs = other.get("tokens_per_s")
        elif m == "teacher_forced":
            name, unit, ours_v = f"teacher-forced {r['prompt']}+{r['gold']}", "prompts/s", r["prompts_per_s"]
            note, theirs = f"{r['prompts']} prompts a pass", other.get("prompts_per_s")
        elif m == "decode":
            name, unit, ours_v = f"decode batch {r['batch']}", "tok/s", r["tokens_per_s"]
            note, theirs = f"after {r['context']} tokens", other.get("tokens_per_s")
        else:
            name, unit, ours_v = "peak memory", "GiB", r["peak_bytes"] / 2**30
            note = "weights " + f"{r['weight_bytes'] / 2**30:.2f} GiB"
            theirs = other.get("peak_bytes", None)
            theirs = theirs / 2**30 if theirs else None
        ratio = f"{ours_v / theirs:.2f}x" if theirs else "-"
        theirs_s = f"{theirs:.1f}" if theirs else "-"
        print(f"{name:<28} {ours_v:>12.1f} {theirs_s:>12} {ratio:>7}  {unit}; {note}")
    for r in ours:
        if r["measure"] != "profile":
            continue
        total = sum(op["seconds"] for op in r["ops"]) or 1.0
        print(f"\nprofile of {r['of']}: {total:.3f} s in ops")
        for op in r["ops"][:14]:
            print(f"  {op['op']:<32} {op['calls']:>7} calls {op['seconds']:>9.4f} s {100 * op['seconds'] / total:5.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
