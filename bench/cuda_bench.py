#!/usr/bin/env python3
"""bench/cuda_bench: midtune's batched engine (backend.device: cuda) against HF
transformers with PyTorch on the same GPU, model shape and prompts, in the
same run: with eager attention (which the methods' public code needs) and
with sdpa (PyTorch's fused attention, what a plain HF run uses).

Ours: bench/cuda_bench_cli (JSON lines). Peer: a LlamaForCausalLM of the same
shape with random bf16 weights, built once in this process and measured with
each attention implementation in turn. Printed per measure: the figures and
ours / HF eager, ours / HF sdpa; for prefill also the fraction of the GPU's
bf16 peak (a plain cuBLAS bf16 product measured by cuda_bench_cli in the same
run); and one LPES search generation at the protocol of --experiment
(cuda_bench_cli's "generation": projected from a measured sample unless
--generation-full). Goals (docs: backends/engine/README.md "GPU"): prefill
>= 50 % of the peak at 4096 tokens, teacher-forced prompts/s >= 3x HF eager
and >= 1.2x HF sdpa, one LPES generation of experiments/lpes-kv-paper.yaml
on the 7B shape <= 470 s (the paper: 1167 s on four GPUs).

  python3 bench/cuda_bench.py --cli build-gpu/bench/cuda_bench_cli [--shape llama7b] [--no-peer] [--no-sdpa]
  python3 bench/cuda_bench.py --cli build/bench/cuda_bench_cli --device reference --shape tiny --no-peer \
      --prefill 64 --batch-tokens 256 --tf-prompt 64 --tf-batch 2 --decode-batches 1 2 --decode-steps 2 \
      --repeats 1 --gen-prompt 200 --gen-gold 4 --gen-prompts 4 --gen-batch-tokens 512
  python3 bench/cuda_bench.py --cli build-gpu/bench/cuda_bench_cli --weights q4_k_m --precision file --no-peer
      (the matrices kept in Q4_K / Q6_K blocks on the device: backend.precision: file)
  --file-gemv both (with --precision file): decode also through the dequantised
      tile instead of the few-rows kernel that reads the blocks, rows "decode batch N tiles"
  --kv-cache bf16: keys and values stored in bf16 (backend.kv_cache: bf16), half
      the cache's memory; the peak memory row names the cache's bytes a token
  --decode-per-sequence: decode also through the per-sequence attention ops
      (the path before the batched decode step), rows "decode batch N per-seq"
      (checks this script on a machine without a GPU; the figures mean nothing)
  --attention gemm,flash: prefill and teacher-forced once per prefill attention body
"""
import argparse
import gc
import json
import os
import subprocess
import sys
import time

GENERATION_GOAL_S = 470  # one LPES generation on one H100; the paper's 1167 s was on four
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_ours(args):
    cmd = [args.cli, "--device", args.device, "--shape", args.shape, "--weights", args.weights,
           "--precision", args.precision, "--kv-cache", args.kv_cache,
           "--batch-tokens", str(args.batch_tokens), "--tf-prompt", str(args.tf_prompt),
           "--tf-gold", str(args.tf_gold), "--tf-batch", str(args.tf_batch),
           "--decode-context", str(args.decode_context), "--decode-steps", str(args.decode_steps),
           "--repeats", str(args.repeats), "--prefill", *map(str, args.prefill),
           "--decode-batches", *map(str, args.decode_batches)]
    if args.gguf:
        cmd += ["--gguf", args.gguf]
    if args.no_generation:
        cmd += ["--no-generation"]
    else:
        cmd += ["--experiment", args.experiment, "--gen-prompt", str(args.gen_prompt), "--gen-gold", str(args.gen_gold),
                "--gen-candidates", str(args.gen_candidates), "--gen-prompts", str(args.gen_prompts),
                "--gen-batch-tokens", str(args.gen_batch_tokens)]
        cmd += ["--generation-full"] if args.generation_full else []
    cmd += ["--profile"] if args.profile else []
    cmd += ["--attention", args.attention] if args.attention else []
    cmd += ["--decode-per-sequence"] if args.decode_per_sequence else []
    cmd += ["--file-gemv", args.file_gemv]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"cuda_bench: {' '.join(cmd)} failed ({out.returncode}):\n{out.stderr}")
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


def use_attention(model, impl):
    """Switches a loaded HF model to attention `impl`; False when this
    transformers cannot switch in place (the model must then be rebuilt)."""
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(impl)
        return model.config._attn_implementation == impl
    # Before set_attn_implementation: from 4.48 the attention function is
    # looked up from the config at each call; earlier each implementation
    # was its own module class, fixed at build.
    import transformers
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    if (major, minor) < (4, 48):
        return False
    model.config._attn_implementation = impl
    return True


def build_hf(shape, impl, device):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=shape["vocab"], hidden_size=shape["hidden"], intermediate_size=shape["ffn"],
                         num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"],
                         num_key_value_heads=shape["kv_heads"], max_position_embeddings=8192,
                         rms_norm_eps=1e-5, attn_implementation=impl)
    torch.manual_seed(0)  # the same weights whenever it is rebuilt
    with torch.device(device):
        return LlamaForCausalLM(config).to(torch.bfloat16).eval()


def measure_hf(args, shape, model, device):
    import torch

    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    results = []

    def forward(ids, keep):
        try:
            return model(ids, logits_to_keep=keep).logits
        except TypeError:  # transformers before logits_to_keep
            return model(ids).logits[:, -keep:]

    gen = torch.Generator(device=device).manual_seed(1)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    with torch.no_grad():
        for length in args.prefill:
            count = max(1, args.batch_tokens // length)
            ids = torch.randint(3, shape["vocab"], (count, length), device=device, generator=gen)
            s = best_time(lambda: forward(ids, 1), args.repeats, sync)
            results.append({"measure": "prefill", "length": length, "prompts": count, "tokens_per_s": count * length / s})
        length = args.tf_prompt + args.tf_gold - 1
        ids = torch.randint(3, shape["vocab"], (args.tf_batch, length), device=device, generator=gen)
        gold = torch.full((args.tf_batch, args.tf_gold), 5, device=device)

        def teacher_forced():
            logits = forward(ids, args.tf_gold).float()
            logp = torch.log_softmax(logits, dim=-1).gather(-1, gold.unsqueeze(-1)).sum()
            emitted = (logits.argmax(-1) == gold).all(-1)
            return logp.item(), emitted.cpu()

        s = best_time(teacher_forced, args.repeats, sync)
        results.append({"measure": "teacher_forced", "prompts_per_s": args.tf_batch / s})
        for batch in args.decode_batches:
            ids = torch.randint(3, shape["vocab"], (batch, args.decode_context), device=device, generator=gen)
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
            del out, past
    if cuda:
        results.append({"measure": "memory", "peak_bytes": torch.cuda.max_memory_allocated()})
    return results


def run_hf(args, shape, impls):
    """{impl: results}: one model, switched between the implementations in
    place where transformers allows it, else rebuilt (the first freed)."""
    import torch

    device = args.hf_device
    out = {}
    model = None
    for impl in impls:
        if model is None or not use_attention(model, impl):
            model = None
            gc.collect()
            if device == "cuda":
                torch.cuda.empty_cache()
            model = build_hf(shape, impl, device)
        out[impl] = measure_hf(args, shape, model, device)
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()  # the next implementation's peak starts from the weights
    del model
    return out, f"torch {torch.__version__}"


def key(r):
    return (r["measure"], r.get("length"), r.get("batch"))


def peer_value(r, other):
    """The HF figure matching our row `r` in the same unit, or None."""
    m = r["measure"]
    if m == "memory":
        v = other.get("peak_bytes")
        return v / 2**30 if v else None
    return other.get("prompts_per_s" if m == "teacher_forced" else "tokens_per_s")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cli", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--shape", default="llama7b")
    p.add_argument("--gguf", default=None, help="default: cuda_bench_cli's, per shape and weights")
    p.add_argument("--weights", default="bf16", help="random model's matrices: bf16 | q8_0 | q4_k_m")
    p.add_argument("--precision", default="bf16",
                   help="bf16 (widened at load) | file (kept in their blocks, dequantised per product)")
    p.add_argument("--kv-cache", default="fp32", help="fp32 | bf16 (keys and values stored in bf16)")
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
    p.add_argument("--experiment", default=os.path.join(REPO, "experiments", "lpes-kv-paper.yaml"),
                   help="the LPES experiment whose search generation is timed")
    p.add_argument("--gen-prompt", type=int, default=3625,
                   help="generation: prompt tokens (a 50-pair KV prompt in Llama-2's vocabulary)")
    p.add_argument("--gen-gold", type=int, default=34, help="generation: gold tokens (a UUID in Llama-2's vocabulary)")
    p.add_argument("--gen-candidates", type=int, default=2, help="generation: candidates measured")
    p.add_argument("--gen-prompts", type=int, default=16,
                   help="generation: prompts per candidate measured (rounded up to whole passes)")
    p.add_argument("--gen-batch-tokens", type=int, default=0,
                   help="generation: tokens a pass (0: the experiment's backend.batch_tokens, else the backend's default)")
    p.add_argument("--generation-full", action="store_true",
                   help="time the whole generation (population x search prompts; ~40 min at 8 prompts/s) "
                        "instead of projecting it")
    p.add_argument("--no-generation", action="store_true", help="skip the LPES generation measure")
    p.add_argument("--no-peer", action="store_true", help="measure ours only")
    p.add_argument("--no-sdpa", action="store_true", help="HF with eager attention only")
    p.add_argument("--hf-device", default="cuda", help=argparse.SUPPRESS)  # cpu: dry-runs the HF code on a host
    p.add_argument("--decode-per-sequence", action="store_true",
                   help="also measure decode with the per-sequence attention ops (before/after in one run)")
    p.add_argument("--attention", default=None,
                   help="prefill attention bodies, comma-separated, each measured: gemm,flash (default: flash)")
    p.add_argument("--file-gemv", default="on", choices=["on", "off", "both"],
                   help="precision file: decode products straight from the blocks (on), through the tile (off), "
                        "or both (before/after in one run)")
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
    impls = ["eager"] if args.no_sdpa else ["eager", "sdpa"]
    peers = {}
    if not args.no_peer:
        hf, version = run_hf(args, load, impls)
        peers = {impl: {key(r): r for r in rows} for impl, rows in hf.items()}
        print(f"peer: HF transformers ({version}), bf16, attention " + " and ".join(impls) + "; same run and GPU")
    print(f"{'measure':<28} {'midtune':>12} {'HF eager':>10} {'HF sdpa':>10} {'/eager':>7} {'/sdpa':>7}  notes")
    for r in ours:
        m = r["measure"]
        if m in ("peak", "load", "profile", "generation"):
            continue
        if m == "prefill":
            name, unit, ours_v = f"prefill {r['length']} (x{r['prompts']})", "tok/s", r["tokens_per_s"]
            note = f"{r['tflops']:.0f} TFLOP/s = {100 * r['fraction_of_peak']:.0f} % of peak"
            if r["length"] == 4096:
                note += " (goal 50 %)"
        elif m == "teacher_forced":
            name, unit, ours_v = f"teacher-forced {r['prompt']}+{r['gold']}", "prompts/s", r["prompts_per_s"]
            note = f"{r['prompts']} prompts a pass; goal >= 3x eager, >= 1.2x sdpa"
        elif m == "decode":
            path = " per-seq" if r.get("path") == "per_sequence" else ""
            path += " tiles" if r.get("file_gemv") is False else ""
            name, unit, ours_v = f"decode batch {r['batch']}{path}", "tok/s", r["tokens_per_s"]
            note = f"after {r['context']} tokens"
        else:
            name, unit, ours_v = "peak memory", "GiB", r["peak_bytes"] / 2**30
            note = "weights " + f"{r['weight_bytes'] / 2**30:.2f} GiB"
            if "cache_bytes_per_token" in r:
                note += f"; {r['kv_cache']} KV cache {r['cache_bytes_per_token'] / 2**10:.0f} KiB a token"
        if m in ("prefill", "teacher_forced") and args.attention and "," in args.attention:
            name += f" [{r['attention']}]"
        cells, ratios = [], []
        for impl in ("eager", "sdpa"):
            theirs = peer_value(r, peers.get(impl, {}).get(key(r), {}))
            cells.append(f"{theirs:.1f}" if theirs else "-")
            ratios.append(f"{ours_v / theirs:.2f}x" if theirs else "-")
        print(f"{name:<28} {ours_v:>12.1f} {cells[0]:>10} {cells[1]:>10} {ratios[0]:>7} {ratios[1]:>7}  {unit}; {note}")
    gen = by.get("generation")
    if gen:
        how = "measured, whole generation" if gen["full"] else "PROJECTED"
        name = "LPES generation" + ("" if gen["full"] else " (projected)")
        print(f"{name:<28} {gen['generation_seconds']:>12.1f} {'-':>10} {'-':>10} {'-':>7} {'-':>7}  "
              f"s; {how}; goal <= {GENERATION_GOAL_S} s on one H100 (paper: 1167 s on four)")
        print(f"  {gen['experiment']}: population {gen['population']} x {gen['prompts_per_evaluation']} search prompts "
              f"of {gen['prompt']}+{gen['gold']} tokens, LPES RoPE scales of the GA's first generation, "
              f"{gen['batch_tokens']} tokens a pass ({gen['passes_per_candidate']} passes a candidate here)")
        ranges = ", ".join(f"{lo:.2f}-{hi:.2f}" for lo, hi in gen["candidate_scale_ranges"][:4])
        print(f"  measured: {gen['candidates_measured']} candidates (RoPE scales {ranges}) x "
              f"{gen['prompts_measured']} prompts in "
              f"{gen['seconds_measured']:.2f} s = {gen['prompts_per_s']:.2f} prompts/s; "
              f"{gen['seconds_per_evaluation']:.1f} s per evaluation of {gen['prompts_per_evaluation']} prompts")
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
