#!/usr/bin/env python3
"""Reference data for the engine's forward pass.

(a) An fp32 forward pass in numpy over the GGUF weights dequantised by the
    `gguf` package: last-position top-k logits for a dozen prompts, written to
    tests/reference/fixtures/logits_fp32.json. Prompts are tokenised by
    llama.cpp (special tokens parsed), so the fixture carries token ids and the
    C++ test does not depend on our tokenizer.
(b) 32-token greedy continuations from llama-cpp-python on the same GGUF,
    written to tests/reference/fixtures/greedy_llamacpp.json.

Also one rope-scale case per prompt subset (positions divided by a per layer /
head factor), for the engine's RoPE-scale path including grouped-query heads
with differing scales.

Usage: python3 tests/reference/make_logits_fixtures.py [--model PATH]
"""
import argparse
import json
import os

import numpy as np
import gguf
from gguf.quants import dequantize

TOP_K = 50

PROMPTS = [
    "The capital of France is",
    "1, 2, 3, 4, 5,",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "<|im_start|>user\nWhat is 7 times 8?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
    "Name three primary colours.<|im_end|>\n<|im_start|>assistant\n",
    "Once upon a time, in a land far away, there lived a",
    "Les élèves ont mangé des crêpes à la cantine,",
    "東京は日本の首都です。大阪は",
    "Emoji test 🙂🚀 and    runs   of spaces\n\n\nthen text",
    "A" * 3 + " quick brown fox jumps over the lazy dog. " * 12 + "The dog",
    "<|im_start|>user\nThe key 'apple' maps to 4471. The key 'pear' maps to 9032. "
    "The key 'plum' maps to 1187. What does 'pear' map to?<|im_end|>\n<|im_start|>assistant\n",
    "Q: What is the boiling point of water at sea level in Celsius?\nA:",
]

# Rope-scale cases: (prompt index, description, scale builder(layers, heads)).
def scale_uniform(layers, heads):
    return [[2.0] * heads for _ in range(layers)]


def scale_per_head(layers, heads):
    # Differs inside each GQA group from layer 2 on (Ms-PoE-like ratios).
    rows = []
    for layer in range(layers):
        if layer < 2:
            rows.append([1.0] * heads)
        else:
            rows.append([1.2 + 0.6 * h / (heads - 1) for h in range(heads)])
    return rows


SCALE_CASES = [(10, "uniform_2", scale_uniform), (3, "per_head_1.2_1.8", scale_per_head),
               (9, "per_head_1.2_1.8", scale_per_head)]


class Model:
    """reader: the file's gguf.GGUFReader where the caller has one (read
    anew from `path` otherwise)."""

    def __init__(self, path, reader=None):
        r = reader if reader is not None else gguf.GGUFReader(path)
        f = {k: v.contents() for k, v in r.fields.items()
             if not k.startswith("tokenizer.ggml.")}
        self.layers = int(f["llama.block_count"])
        self.heads = int(f["llama.attention.head_count"])
        self.kv_heads = int(f["llama.attention.head_count_kv"])
        self.hidden = int(f["llama.embedding_length"])
        self.head_dim = self.hidden // self.heads
        self.base = float(f["llama.rope.freq_base"])
        self.eps = float(f["llama.attention.layer_norm_rms_epsilon"])
        self.w = {}
        for t in r.tensors:
            a = dequantize(t.data, t.tensor_type).astype(np.float32)
            shape = [int(x) for x in reversed(t.shape)]
            self.w[t.name] = a.reshape(shape)
        self.out = self.w.get("output.weight", self.w["token_embd.weight"])

    def rmsnorm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos):
        # ggml NORM mode (llama arch): adjacent pairs (x[2i], x[2i+1]);
        # x: [T, d], pos: [T] float (already divided by the scale).
        d = x.shape[-1]
        inv = self.base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
        ang = pos[:, None].astype(np.float64) * inv[None, :]
        c, s = np.cos(ang), np.sin(ang)
        x0, x1 = x[:, 0::2].astype(np.float64), x[:, 1::2].astype(np.float64)
        out = np.empty(x.shape, dtype=np.float64)
        out[:, 0::2] = x0 * c - x1 * s
        out[:, 1::2] = x0 * s + x1 * c
        return out.astype(np.float32)

    def forward(self, tokens, scale=None):
        T = len(tokens)
        hd, H, KV = self.head_dim, self.heads, self.kv_heads
        pos = np.arange(T, dtype=np.float64)
        h = self.w["token_embd.weight"][tokens].copy()
        mask = np.triu(np.full((T, T), -np.inf, dtype=np.float32), 1)
        for l in range(self.layers):
            p = f"blk.{l}."
            x = self.rmsnorm(h, self.w[p + "attn_norm.weight"])
            q = x @ self.w[p + "attn_q.weight"].T
            k = x @ self.w[p + "attn_k.weight"].T
            v = x @ self.w[p + "attn_v.weight"].T
            att = np.empty((T, H * hd), dtype=np.float32)
            for head in range(H):
                g = head // (H // KV)
                sc = 1.0 if scale is None else scale[l][head]
                qh = self.rope(q[:, head * hd:(head + 1) * hd], pos / sc)
                kh = self.rope(k[:, g * hd:(g + 1) * hd], pos / sc)  # keys at this head's scale
                vh = v[:, g * hd:(g + 1) * hd]
                s = qh @ kh.T / np.sqrt(hd) + mask
                s = np.exp(s - s.max(axis=-1, keepdims=True))
                s /= s.sum(axis=-1, keepdims=True)
                att[:, head * hd:(head + 1) * hd] = s @ vh
            h = h + att @ self.w[p + "attn_output.weight"].T
            x = self.rmsnorm(h, self.w[p + "ffn_norm.weight"])
            gate = x @ self.w[p + "ffn_gate.weight"].T
            up = x @ self.w[p + "ffn_up.weight"].T
            h = h + (gate / (1.0 + np.exp(-gate)) * up) @ self.w[p + "ffn_down.weight"].T
        x = self.rmsnorm(h[-1:], self.w["output_norm.weight"])
        return (x @ self.out.T)[0]


def summarise(logits):
    order = np.argsort(-logits, kind="stable")[:TOP_K]
    return {
        "top_ids": [int(i) for i in order],
        "top_logits": [float(logits[i]) for i in order],
        "mean": float(logits.mean()),
        "std": float(logits.std()),
        "min": float(logits.min()),
        "max": float(logits.max()),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.environ.get(
        "MIDTUNE_MODEL", os.path.expanduser("~/.cache/midtune/SmolLM2-135M-Instruct.Q4_1.gguf")))
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "fixtures"))
    ap.add_argument("--greedy-tokens", type=int, default=32)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    import llamacpp_loader
    llm = llamacpp_loader.load(args.model, n_ctx=1024, n_threads=2)
    token_lists = [llm.tokenize(p.encode("utf-8"), add_bos=False, special=True) for p in PROMPTS]

    model = Model(args.model)
    cases = []
    for text, toks in zip(PROMPTS, token_lists):
        cases.append({"prompt": text, "tokens": toks, "rope_scale": [],
                      **summarise(model.forward(toks))})
    for idx, name, builder in SCALE_CASES:
        scale = builder(model.layers, model.heads)
        cases.append({"prompt": PROMPTS[idx], "tokens": token_lists[idx], "rope_scale": scale,
                      "scale_name": name, **summarise(model.forward(token_lists[idx], scale))})
    with open(os.path.join(args.out, "logits_fp32.json"), "w") as f:
        json.dump({"model_sha256_prefix": "b179c9523d0e6a0f", "top_k": TOP_K, "cases": cases}, f)

    greedy = []
    for text, toks in zip(PROMPTS, token_lists):
        llm.reset()
        out = []
        for tok in llm.generate(toks, top_k=1, top_p=1.0, temp=0.0, repeat_penalty=1.0,
                                reset=True):
            out.append(int(tok))
            if tok == llm.token_eos() or len(out) >= args.greedy_tokens:
                break
        greedy.append({"prompt": text, "tokens": toks, "continuation": out})
    with open(os.path.join(args.out, "greedy_llamacpp.json"), "w") as f:
        json.dump({"max_new_tokens": args.greedy_tokens, "cases": greedy}, f)
    print(f"wrote {len(cases)} logits cases and {len(greedy)} greedy cases to {args.out}")


if __name__ == "__main__":
    main()
