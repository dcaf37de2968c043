#!/usr/bin/env python3
"""fp64 reference forward pass of every architecture the engine runs
(llama with rope_freqs / linear RoPE scaling / a sliding window, qwen2,
gemma, qwen3, gemma3, phi3), over the small random-weight GGUFs that
tests/engine/write_tiny_arch_ggufs writes (tests/engine/tiny_arch_gguf.hpp).
Writes the last-position top-k logits of a few prompts per model to
tests/reference/fixtures/arch_logits_fp32.json, plus one case with per-head
RoPE scales and one with remapped (CALIOPE-like) positions, so the way a
method composes with the model's own RoPE is checked too.

Written from llama.cpp's model graphs (src/models/{llama,qwen2,gemma,qwen3,gemma3,phi3}.cpp)
and ggml's RoPE (ggml_rope_ext: theta_i = p * base^(-2i/d) * freq_scale /
freq_factor[i]; NORM pairs (2i, 2i+1), NEOX pairs (i, i + d/2)).

Usage:
  build/tests/engine/write_tiny_arch_ggufs /tmp/tiny_arch
  python3 tests/reference/make_arch_fixtures.py --dir /tmp/tiny_arch
"""
import argparse
import copy
import json
import os

import numpy as np
import gguf
from gguf.quants import dequantize

TOP_K = 20
MODELS = ["qwen2", "llama3", "gemma", "llama_swa", "qwen3", "gemma3", "phi3"]
PROMPT_LENGTHS = [6, 19, 37]
HALVES_ARCHS = {"qwen2", "gemma", "qwen3", "gemma3", "phi3"}  # llama.cpp: LLAMA_ROPE_TYPE_NEOX


class Model:
    """dtype: the weights' and activations' float type (RoPE angles are
    fp64 either way); float32 for the real Gemma 3's fp32 reference."""

    def __init__(self, path, dtype=np.float64):
        self.dtype = dtype
        r = gguf.GGUFReader(path)
        f = {k: v.contents() for k, v in r.fields.items() if not k.startswith("tokenizer.ggml.")}
        self.arch = f["general.architecture"]
        a = self.arch + "."
        self.layers = int(f[a + "block_count"])
        self.heads = int(f[a + "attention.head_count"])
        self.kv_heads = int(f[a + "attention.head_count_kv"])
        self.hidden = int(f[a + "embedding_length"])
        self.head_dim = int(f.get(a + "attention.key_length", self.hidden // self.heads))
        self.rope_dims = int(f.get(a + "rope.dimension_count", self.head_dim))
        self.base = float(f.get(a + "rope.freq_base", 10000.0))
        self.eps = float(f[a + "attention.layer_norm_rms_epsilon"])
        self.window = int(f.get(a + "attention.sliding_window", 0))
        # phi3: llama.cpp reads the window and switches it off.
        self.ignored_window = self.window if self.arch == "phi3" else 0
        if self.arch == "phi3":
            self.window = 0
        self.freq_scale = 1.0
        if f.get(a + "rope.scaling.type", "none") == "linear":
            self.freq_scale = 1.0 / float(f[a + "rope.scaling.factor"])
        self.halves = self.arch in HALVES_ARCHS
        gemmas = ("gemma", "gemma3")
        self.gelu = self.arch in gemmas
        self.embedding_scale = float(np.sqrt(np.float32(self.hidden))) if self.arch in gemmas else 1.0
        # gemma3 (llama.cpp): with a window, layer l slides unless it is the
        # last of its period (attention.sliding_window_pattern, default 6);
        # sliding layers turn RoPE at rope.freq_base_swa without scaling.
        self.local = [bool(self.window)] * self.layers if self.arch != "gemma3" else [False] * self.layers
        self.base_local = float(f.get(a + "rope.freq_base_swa", 10000.0))
        if self.arch == "gemma3" and self.window:
            period = int(f.get(a + "attention.sliding_window_pattern", 6))
            self.local = [period == 0 or l % period < period - 1 for l in range(self.layers)]
        self.two_kinds = self.arch == "gemma3" and self.window > 0
        self.w = {}
        for t in r.tensors:
            arr = dequantize(t.data, t.tensor_type).astype(dtype)
            self.w[t.name] = arr.reshape([int(x) for x in reversed(t.shape)])
        q_rows, kv_rows = self.heads * self.head_dim, self.kv_heads * self.head_dim
        for l in range(self.layers):
            p = f"blk.{l}."
            # Fused Q|K|V rows (phi3; llama.cpp's build_qkv views them in that order).
            if p + "attn_qkv.weight" in self.w:
                qkv = self.w.pop(p + "attn_qkv.weight")
                self.w[p + "attn_q.weight"] = qkv[:q_rows]
                self.w[p + "attn_k.weight"] = qkv[q_rows:q_rows + kv_rows]
                self.w[p + "attn_v.weight"] = qkv[q_rows + kv_rows:]
            # phi3's ffn_up holds gate then up (ggml_swiglu: silu of the first half).
            if self.arch == "phi3":
                gate_up = self.w.pop(p + "ffn_up.weight")
                ffn = gate_up.shape[0] // 2
                self.w[p + "ffn_gate.weight"] = gate_up[:ffn]
                self.w[p + "ffn_up.weight"] = gate_up[ffn:]
        self.vocab = self.w["token_embd.weight"].shape[0]
        self.out = self.w.get("output.weight", self.w["token_embd.weight"])
        self.qk_norm = "blk.0.attn_q_norm.weight" in self.w
        self.post_norms = "blk.0.post_attention_norm.weight" in self.w
        half = self.rope_dims // 2
        self.inv_freq = self.base ** (-2.0 * np.arange(half) / self.rope_dims) * self.freq_scale
        if "rope_freqs.weight" in self.w:
            self.inv_freq = self.inv_freq / self.w["rope_freqs.weight"].reshape(-1)
        self.inv_freq_local = self.base_local ** (-2.0 * np.arange(half) / self.rope_dims)

    def rmsnorm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def head_norm(self, x, w):
        # Per-head RMSNorm over each head_dim slice of the rows (qwen3).
        T = x.shape[0]
        return self.rmsnorm(x.reshape(T, -1, self.head_dim), w.reshape(-1)).reshape(T, -1)

    def rope(self, x, pos, local=False):
        # x: [T, head_dim]; pos: [T] (already divided by the method's scale).
        inv_freq = self.inv_freq_local if local and self.two_kinds else self.inv_freq
        ang = pos[:, None] * inv_freq[None, :]
        c, s = np.cos(ang), np.sin(ang)
        out = x.copy()
        d = self.rope_dims
        if self.halves:
            x0, x1 = x[:, : d // 2], x[:, d // 2 : d]
            out[:, : d // 2] = x0 * c - x1 * s
            out[:, d // 2 : d] = x0 * s + x1 * c
        else:
            x0, x1 = x[:, 0:d:2], x[:, 1:d:2]
            out[:, 0:d:2] = x0 * c - x1 * s
            out[:, 1:d:2] = x0 * s + x1 * c
        return out

    def act(self, g):
        if self.gelu:  # ggml_gelu: tanh approximation
            return 0.5 * g * (1.0 + np.tanh(0.7978845608028654 * g * (1.0 + 0.044715 * g * g)))
        return g / (1.0 + np.exp(-g))

    def qkv(self, x, p):
        q = x @ self.w[p + "attn_q.weight"].T
        k = x @ self.w[p + "attn_k.weight"].T
        v = x @ self.w[p + "attn_v.weight"].T
        if p + "attn_q.bias" in self.w:
            q = q + self.w[p + "attn_q.bias"].reshape(-1)
            k = k + self.w[p + "attn_k.bias"].reshape(-1)
            v = v + self.w[p + "attn_v.bias"].reshape(-1)
        if self.qk_norm:  # before RoPE, as llama.cpp's qwen3 graph
            q = self.head_norm(q, self.w[p + "attn_q_norm.weight"])
            k = self.head_norm(k, self.w[p + "attn_k_norm.weight"])
        return q, k, v

    def attention(self, q, k, v, l, pos, mask, scale):
        T, hd, H, KV = q.shape[0], self.head_dim, self.heads, self.kv_heads
        att = np.empty((T, H * hd), dtype=self.dtype)
        for head in range(H):
            g = head // (H // KV)
            sc = 1.0 if scale is None else scale[l][head]
            qh = self.rope(q[:, head * hd:(head + 1) * hd], pos / sc, self.local[l])
            kh = self.rope(k[:, g * hd:(g + 1) * hd], pos / sc, self.local[l])  # keys at this head's scale
            s = qh @ kh.T / self.dtype(np.sqrt(hd)) + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            att[:, head * hd:(head + 1) * hd] = s @ v[:, g * hd:(g + 1) * hd]
        return att

    def forward(self, tokens, scale=None, positions=None, phs=None):
        """phs: {"channel", "scale", "layers"}: PHS in the prefill, channel c
        of the normed input to Q and K scaled in those layers for every key
        and the last query (the earlier rows keep the plain attention)."""
        T = len(tokens)
        pos = np.arange(T, dtype=np.float64) if positions is None else np.asarray(positions, dtype=np.float64)
        h = self.w["token_embd.weight"][tokens] * self.embedding_scale
        idx = np.arange(T)
        causal = idx[None, :] <= idx[:, None]
        windowed = causal & ((idx[:, None] - idx[None, :]) < self.window)
        for l in range(self.layers):
            p = f"blk.{l}."
            mask = np.where(windowed if self.window and self.local[l] else causal, 0.0, -np.inf).astype(self.dtype)
            x = self.rmsnorm(h, self.w[p + "attn_norm.weight"])
            q, k, v = self.qkv(x, p)
            att = self.attention(q, k, v, l, pos, mask, scale)
            if phs is not None and l in phs["layers"]:
                xs = x.copy()
                xs[:, phs["channel"]] *= phs["scale"]
                qs, ks, _ = self.qkv(xs, p)
                att[-1] = self.attention(qs, ks, v, l, pos, mask, scale)[-1]
            out = att @ self.w[p + "attn_output.weight"].T
            if self.post_norms:  # gemma3's norms after each block
                out = self.rmsnorm(out, self.w[p + "post_attention_norm.weight"])
            h = h + out
            x = self.rmsnorm(h, self.w[p + "ffn_norm.weight"])
            gate = x @ self.w[p + "ffn_gate.weight"].T
            up = x @ self.w[p + "ffn_up.weight"].T
            out = (self.act(gate) * up) @ self.w[p + "ffn_down.weight"].T
            if self.post_norms:
                out = self.rmsnorm(out, self.w[p + "post_ffw_norm.weight"])
            h = h + out
        x = self.rmsnorm(h[-1:], self.w["output_norm.weight"])
        return (x @ self.out.T)[0]


def summarise(logits):
    order = np.argsort(-logits, kind="stable")[:TOP_K]
    return {"top_ids": [int(i) for i in order], "top_logits": [float(logits[i]) for i in order]}


def per_head_scales(model):
    # Layer 1's heads get distinct scales (inside GQA groups too), layer 0 none.
    rows = [[1.0] * model.heads for _ in range(model.layers)]
    rows[1] = [1.2 + 0.6 * h / max(1, model.heads - 1) for h in range(model.heads)]
    return rows


# Greedy continuations: "The capital of France is" as each vocabulary's
# pieces (BOS as llama.cpp adds it by default), fp64 argmax per step. These
# equal llama.cpp's llama-simple (the same files) token for token, llama_swa
# with its window off (llama.cpp ignores it for llama);
# tests/engine/engine_peer_test.cpp compares the engine with llama-simple on
# these models in every peer test run.
GREEDY_PIECES = {
    "qwen2": ["The", "Ġcapital", "Ġof", "ĠFrance", "Ġis"],
    "llama3": ["<|begin_of_text|>", "The", "Ġcapital", "Ġof", "ĠFrance", "Ġis"],
    "gemma": ["<s>", "▁The", "▁capital", "▁of", "▁France", "▁is"],
    "llama_swa": ["<s>", "▁The", "▁capital", "▁of", "▁France", "▁is"],
    "qwen3": ["The", "Ġcapital", "Ġof", "ĠFrance", "Ġis"],
    "gemma3": ["<s>", "▁The", "▁capital", "▁of", "▁France", "▁is"],
    "phi3": ["<s>", "▁The", "▁capital", "▁of", "▁France", "▁is"],
}
GREEDY_TOKENS = 12


def greedy(model, path, name):
    field = gguf.GGUFReader(path).fields["tokenizer.ggml.tokens"]
    pieces = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
    index = {p: i for i, p in enumerate(pieces)}
    ids = [index[p] for p in GREEDY_PIECES[name]]
    prompt, margins = list(ids), []
    for _ in range(GREEDY_TOKENS):
        logits = model.forward(ids)
        order = np.argsort(-logits, kind="stable")
        margins.append(float(logits[order[0]] - logits[order[1]]))
        ids.append(int(order[0]))
    return {"prompt": prompt, "continuation": ids[len(prompt):], "margins": margins}


def without(model, feature):
    """A shallow copy of `model` with one architecture feature switched off."""
    m = copy.copy(model)
    m.w = dict(model.w)
    if feature == "qkv_bias":
        m.w = {k: v for k, v in model.w.items() if not k.endswith(".bias")}
    elif feature == "rope_halves":
        m.halves = False
    elif feature == "rope_freqs":
        half = m.rope_dims // 2
        m.inv_freq = m.base ** (-2.0 * np.arange(half) / m.rope_dims) * m.freq_scale
    elif feature == "gelu":
        m.gelu = False
    elif feature == "embedding_scale":
        m.embedding_scale = 1.0
    elif feature == "sliding_window":
        m.window = 0
        m.local = [False] * m.layers
    elif feature == "qk_norm":
        m.qk_norm = False
    elif feature == "post_norms":
        m.post_norms = False
    elif feature == "local_layers":  # every layer global: no window, the global RoPE
        m.local = [False] * m.layers
    elif feature == "local_rope_base":  # local layers keep their window, turn RoPE as the global ones
        m.two_kinds = False
    elif feature == "window_ignored":  # phi3's window applied after all
        m.window = model.ignored_window
        m.local = [True] * m.layers
    elif feature == "gate_up_order":  # the fused ffn_up read as up, then gate
        for l in range(m.layers):
            p = f"blk.{l}."
            m.w[p + "ffn_gate.weight"] = model.w[p + "ffn_up.weight"]
            m.w[p + "ffn_up.weight"] = model.w[p + "ffn_gate.weight"]
    elif feature == "qkv_split":  # the fused attn_qkv read as Q|V|K
        for l in range(m.layers):
            p = f"blk.{l}."
            m.w[p + "attn_k.weight"] = model.w[p + "attn_v.weight"]
            m.w[p + "attn_v.weight"] = model.w[p + "attn_k.weight"]
    elif feature == "linear_rope_scaling":
        m.inv_freq = model.inv_freq / m.freq_scale
    else:
        raise ValueError(feature)
    return m


FEATURES = {
    "qwen2": ["qkv_bias", "rope_halves"],
    "llama3": ["rope_freqs"],
    "gemma": ["gelu", "embedding_scale", "rope_halves"],
    "llama_swa": ["sliding_window", "linear_rope_scaling"],
    "qwen3": ["qk_norm", "rope_halves"],
    "gemma3": ["post_norms", "qk_norm", "local_layers", "local_rope_base", "embedding_scale"],
    "phi3": ["rope_halves", "gate_up_order", "qkv_split", "window_ignored"],
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True, help="where write_tiny_arch_ggufs wrote the files")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "fixtures", "arch_logits_fp32.json"))
    args = ap.parse_args()
    rng = np.random.default_rng(20261123)
    models = {}
    for name in MODELS:
        model = Model(os.path.join(args.dir, name + ".gguf"))
        # Ordinary tokens only (away from the special ids at both ends).
        prompts = [[int(t) for t in rng.integers(300, model.vocab - 300, n)] for n in PROMPT_LENGTHS]
        cases = []
        for toks in prompts:
            cases.append({"tokens": toks, "rope_scale": [], "positions": [], **summarise(model.forward(toks))})
        longest = prompts[-1]
        scale = per_head_scales(model)
        cases.append({"tokens": longest, "rope_scale": scale, "positions": [], "name": "per_head_scales",
                      **summarise(model.forward(longest, scale=scale))})
        n = len(longest)
        remapped = [float(i if i < n // 2 else i + 50) for i in range(n)]
        cases.append({"tokens": longest, "rope_scale": [], "positions": remapped, "name": "gap_of_50",
                      **summarise(model.forward(longest, positions=remapped))})
        # How far each feature moves the reference's top logits (longest
        # prompt): the C++ test requires this to dwarf its tolerance.
        top = cases[2]["top_ids"]
        ref = np.array(cases[2]["top_logits"])
        effect = {}
        for feature in FEATURES[name]:
            other = without(model, feature).forward(longest)
            effect[feature] = float(np.max(np.abs(other[top] - ref)))
        # PHS as tests/engine/method_examples.hpp's example.
        phs = {"channel": 3, "scale": 0.0, "layers": [0, 1]}
        phs_logits = model.forward(longest, phs=phs)
        phs_case = {"tokens": longest, "hidden_channel": phs, **summarise(phs_logits),
                    "effect": float(np.max(np.abs(phs_logits[top] - ref)))}
        models[name] = {"arch": model.arch, "cases": cases, "feature_effect": effect, "phs": phs_case,
                        "greedy": greedy(model, os.path.join(args.dir, name + ".gguf"), name)}
        print(name, "feature effects", effect)
        print(name, model.arch, "top logits", [round(c["top_logits"][0], 3) for c in cases])
    with open(args.out, "w") as f:
        json.dump({"top_k": TOP_K, "models": models}, f)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
