#!/usr/bin/env python3
"""fp64 reference forward pass of every architecture the engine runs
(llama with rope_freqs / linear RoPE scaling / a sliding window, qwen2,
gemma, qwen3, gemma3, phi3, gemma2, mpt), over the small random-weight GGUFs that
tests/engine/write_tiny_arch_ggufs writes (tests/engine/tiny_arch_gguf.hpp).
Writes the last-position top-k logits of a few prompts per model to
tests/reference/fixtures/arch_logits_fp32.json, plus one case with per-head
RoPE scales and one with remapped (CALIOPE-like) positions, so the way a
method composes with the model's own RoPE is checked too.

Written from llama.cpp's model graphs
(src/models/{llama,qwen2,gemma,qwen3,gemma3,phi3,gemma2,mpt}.cpp), ggml's RoPE
(ggml_rope_ext: theta_i = p * base^(-2i/d) * freq_scale / freq_factor[i];
NORM pairs (2i, 2i+1), NEOX pairs (i, i + d/2)), its soft-capping
(cap * tanh(s / cap)) and ALiBi (ggml_soft_max_ext's slopes, bias
-slope * (query index - key index)).

Usage:
  build/tests/engine/write_tiny_arch_ggufs /tmp/tiny_arch
  python3 tests/reference/make_arch_fixtures.py --dir /tmp/tiny_arch [--only gemma2 mpt]
"""
import argparse
import copy
import json
import os

import numpy as np
import gguf
from gguf.quants import dequantize

TOP_K = 20
MODELS = ["qwen2", "llama3", "gemma", "llama_swa", "qwen3", "gemma3", "phi3", "gemma2", "mpt"]
PROMPT_LENGTHS = [6, 19, 37]
# tests/engine/method_examples.hpp's SelfExtend and STRING examples: windows
# shorter than llama_swa's 8 keys, so its layers see far keys too.
REMAP_EXAMPLES = [("selfextend", "self_extend", {"group": 3, "window": 5, "layers": [0, 1]}),
                  ("string", "string_shift", {"shift": 6, "window": 2, "layers": [0, 1]})]
HALVES_ARCHS = {"qwen2", "gemma", "qwen3", "gemma3", "phi3", "gemma2"}  # llama.cpp: LLAMA_ROPE_TYPE_NEOX


def alibi_slopes(max_bias, heads):
    """ggml_soft_max_ext's per-head ALiBi slopes (0 without ALiBi)."""
    if max_bias <= 0:
        return np.zeros(heads)
    n = 1
    while n * 2 <= heads:
        n *= 2
    m0, m1 = 2.0 ** (-max_bias / n), 2.0 ** (-(max_bias / 2.0) / n)
    return np.array([m0 ** (h + 1) if h < n else m1 ** (2 * (h - n) + 1) for h in range(heads)])


class Model:
    """dtype: the weights' and activations' float type (RoPE angles are
    fp64 either way); float32 for the real Gemma 3's fp32 reference.
    reader: the file's gguf.GGUFReader where the caller has one (read anew
    from `path` otherwise)."""

    def __init__(self, path, dtype=np.float64, reader=None):
        self.dtype = dtype
        r = reader if reader is not None else gguf.GGUFReader(path)
        f = {k: v.contents() for k, v in r.fields.items() if not k.startswith("tokenizer.ggml.")}
        self.arch = f["general.architecture"]
        a = self.arch + "."
        self.layers = int(f[a + "block_count"])
        self.heads = int(f[a + "attention.head_count"])
        self.kv_heads = int(f.get(a + "attention.head_count_kv", self.heads))
        self.hidden = int(f[a + "embedding_length"])
        self.head_dim = int(f.get(a + "attention.key_length", self.hidden // self.heads))
        self.rope_dims = int(f.get(a + "rope.dimension_count", self.head_dim))
        self.base = float(f.get(a + "rope.freq_base", 10000.0))
        self.mpt = self.arch == "mpt"  # LayerNorm, fused QKV, ungated GELU FFN, ALiBi, no RoPE
        self.eps = float(f[a + ("attention.layer_norm_epsilon" if self.mpt else "attention.layer_norm_rms_epsilon")])
        self.window = int(f.get(a + "attention.sliding_window", 4096 if self.arch == "gemma2" else 0))
        # phi3: llama.cpp reads the window and switches it off.
        self.ignored_window = self.window if self.arch == "phi3" else 0
        if self.arch == "phi3":
            self.window = 0
        self.attn_softcap = float(f.get(a + "attn_logit_softcapping", 50.0)) if self.arch == "gemma2" else 0.0
        self.final_softcap = float(f.get(a + "final_logit_softcapping", 30.0 if self.arch == "gemma2" else 0.0))
        self.slopes = alibi_slopes(float(f.get(a + "attention.max_alibi_bias", 0.0)), self.heads)
        self.clamp = float(f.get(a + "attention.clamp_kqv", 0.0))
        self.layer_norm = self.mpt
        self.scale_root = np.sqrt(self.head_dim)  # scores / this (gemma2 27B: sqrt(hidden / heads))
        self.freq_scale = 1.0
        if f.get(a + "rope.scaling.type", "none") == "linear":
            self.freq_scale = 1.0 / float(f[a + "rope.scaling.factor"])
        self.halves = self.arch in HALVES_ARCHS
        gemmas = ("gemma", "gemma2", "gemma3")
        self.gelu = self.arch in gemmas or self.mpt
        self.embedding_scale = float(np.sqrt(np.float32(self.hidden))) if self.arch in gemmas else 1.0
        # gemma3 (llama.cpp): with a window, layer l slides unless it is the
        # last of its period (attention.sliding_window_pattern, default 6);
        # sliding layers turn RoPE at rope.freq_base_swa without scaling.
        # gemma2 (llama.cpp): always a window (4096 unless set), one
        # sliding layer of every two (pattern default 2), local layers
        # turning RoPE as the global ones.
        two_kind_archs = ("gemma2", "gemma3")
        self.local = [bool(self.window)] * self.layers if self.arch not in two_kind_archs else [False] * self.layers
        self.base_local = float(f.get(a + "rope.freq_base_swa", 10000.0))
        if self.arch in two_kind_archs and self.window:
            period = int(f.get(a + "attention.sliding_window_pattern", 6 if self.arch == "gemma3" else 2))
            self.local = [period == 0 or l % period < period - 1 for l in range(self.layers)]
        self.two_kinds = self.arch == "gemma3" and self.window > 0
        self.w = {}
        for t in r.tensors:
            arr = dequantize(t.data, t.tensor_type).astype(dtype)
            self.w[t.name] = arr.reshape([int(x) for x in reversed(t.shape)])
        q_rows, kv_rows = self.heads * self.head_dim, self.kv_heads * self.head_dim
        for l in range(self.layers):
            p = f"blk.{l}."
            # Fused Q|K|V rows (phi3; llama.cpp's build_qkv views them in that
            # order). MPT's stay fused: qkv() adds its bias and clamps the rows.
            if not self.mpt and p + "attn_qkv.weight" in self.w:
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
        self.rope_on = not self.mpt
        self.qk_norm = "blk.0.attn_q_norm.weight" in self.w
        self.post_norms = "blk.0.post_attention_norm.weight" in self.w
        half = self.rope_dims // 2
        self.inv_freq = self.base ** (-2.0 * np.arange(half) / self.rope_dims) * self.freq_scale
        if "rope_freqs.weight" in self.w:
            self.inv_freq = self.inv_freq / self.w["rope_freqs.weight"].reshape(-1)
        self.inv_freq_local = self.base_local ** (-2.0 * np.arange(half) / self.rope_dims)

    def rmsnorm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def norm(self, x, name):
        """The block norms: RMSNorm, or LayerNorm with its bias (mpt)."""
        w = self.w[name + ".weight"].reshape(-1)
        if not self.layer_norm:
            return self.rmsnorm(x, w)
        c = x - np.mean(x, axis=-1, keepdims=True)
        y = c / np.sqrt(np.mean(c * c, axis=-1, keepdims=True) + self.eps) * w
        return y + self.w[name + ".bias"].reshape(-1) if name + ".bias" in self.w else y

    def bias(self, name):
        return self.w[name].reshape(-1) if name in self.w else 0.0

    def head_norm(self, x, w):
        # Per-head RMSNorm over each head_dim slice of the rows (qwen3).
        T = x.shape[0]
        return self.rmsnorm(x.reshape(T, -1, self.head_dim), w.reshape(-1)).reshape(T, -1)

    def rope(self, x, pos, local=False):
        # x: [T, head_dim]; pos: [T] (already divided by the method's scale).
        if not self.rope_on:
            return x
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
        if p + "attn_qkv.weight" in self.w:  # mpt: fused, biased, clamped
            qkv = x @ self.w[p + "attn_qkv.weight"].T + self.bias(p + "attn_qkv.bias")
            if self.clamp > 0:
                qkv = np.clip(qkv, -self.clamp, self.clamp)
            nq, nk = self.heads * self.head_dim, self.kv_heads * self.head_dim
            return qkv[:, :nq], qkv[:, nq:nq + nk], qkv[:, nq + nk:]
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

    def attention(self, q, k, v, l, pos, mask, scale, key0_factor=None, temperature=None, remap=None):
        """remap: (near_window, far query positions, far key positions, layers)
        of distance_remap(): a key at distance >= near_window from its query
        is scored with both rotated at their far positions."""
        T, hd, H, KV = q.shape[0], self.head_dim, self.heads, self.kv_heads
        idx = np.arange(T)
        att = np.empty((T, H * hd), dtype=self.dtype)
        for head in range(H):
            g = head // (H // KV)
            sc = 1.0 if scale is None else scale[l][head]
            qh = self.rope(q[:, head * hd:(head + 1) * hd], pos / sc, self.local[l])
            kh = self.rope(k[:, g * hd:(g + 1) * hd], pos / sc, self.local[l])  # keys at this head's scale
            s = qh @ kh.T / self.dtype(self.scale_root)
            if remap is not None and l in remap[3]:
                qf = self.rope(q[:, head * hd:(head + 1) * hd], remap[1] / sc, self.local[l])
                kf = self.rope(k[:, g * hd:(g + 1) * hd], remap[2] / sc, self.local[l])
                s = np.where((idx[:, None] - idx[None, :]) >= remap[0], qf @ kf.T / self.dtype(self.scale_root), s)
            if temperature is not None and l in temperature["layers"]:  # before the soft-cap and ALiBi's bias
                s = s / self.dtype(temperature["temperature"])
            if self.attn_softcap:  # gemma2
                s = self.attn_softcap * np.tanh(s / self.attn_softcap)
            if self.slopes.any():  # ALiBi (mpt): -slope x (query index - key index)
                s = s - self.slopes[head] * (idx[:, None] - idx[None, :])
            s = s + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            att[:, head * hd:(head + 1) * hd] = s @ v[:, g * hd:(g + 1) * hd]
            if key0_factor is not None:  # SIW's mechanism: key 0's weight x factor, not renormalised
                att[:, head * hd:(head + 1) * hd] += (key0_factor - 1.0) * s[:, :1] * v[:1, g * hd:(g + 1) * hd]
        return att

    def forward(self, tokens, scale=None, positions=None, phs=None, key0_factor=None, temperature=None,
                self_extend=None, string_shift=None):
        """phs: {"channel", "scale", "layers"}: PHS in the prefill, channel c
        of the normed input to Q and K scaled in those layers for every key
        and the last query (the earlier rows keep the plain attention)."""
        T = len(tokens)
        pos = np.arange(T, dtype=np.float64) if positions is None else np.asarray(positions, dtype=np.float64)
        h = self.w["token_embd.weight"][tokens] * self.embedding_scale
        idx = np.arange(T)
        causal = idx[None, :] <= idx[:, None]
        windowed = causal & ((idx[:, None] - idx[None, :]) < self.window)
        remap = distance_remap(pos, self_extend, string_shift)
        for l in range(self.layers):
            p = f"blk.{l}."
            mask = np.where(windowed if self.window and self.local[l] else causal, 0.0, -np.inf).astype(self.dtype)
            x = self.norm(h, p + "attn_norm")
            q, k, v = self.qkv(x, p)
            att = self.attention(q, k, v, l, pos, mask, scale, key0_factor, temperature, remap)
            if phs is not None and l in phs["layers"]:
                xs = x.copy()
                xs[:, phs["channel"]] *= phs["scale"]
                qs, ks, _ = self.qkv(xs, p)
                att[-1] = self.attention(qs, ks, v, l, pos, mask, scale, temperature=temperature, remap=remap)[-1]
            out = att @ self.w[p + "attn_output.weight"].T + self.bias(p + "attn_output.bias")
            if self.post_norms:  # gemma3's norms after each block
                out = self.rmsnorm(out, self.w[p + "post_attention_norm.weight"])
            h = h + out
            x = self.norm(h, p + "ffn_norm")
            up = x @ self.w[p + "ffn_up.weight"].T + self.bias(p + "ffn_up.bias")
            if p + "ffn_gate.weight" in self.w:
                hidden = self.act(x @ self.w[p + "ffn_gate.weight"].T) * up
            else:  # mpt: down(gelu(up x + b)) + b
                hidden = self.act(up)
            out = hidden @ self.w[p + "ffn_down.weight"].T + self.bias(p + "ffn_down.bias")
            if self.post_norms:
                out = self.rmsnorm(out, self.w[p + "post_ffw_norm.weight"])
            h = h + out
        x = self.norm(h[-1:], "output_norm")
        logits = (x @ self.out.T)[0]
        if self.final_softcap:  # gemma2
            logits = self.final_softcap * np.tanh(logits / self.final_softcap)
        return logits


def distance_remap(pos, self_extend=None, string_shift=None):
    """The far positions of SelfExtend or STRING, from the papers:
    SelfExtend (LongLM Alg. 1): keys at distance >= W seen with the query at
    floor(i / G) + W - floor(W / G) and the key at floor(j / G).
    STRING (An et al. sec. 4): distances d >= S seen as d - S + W (the query
    moved back by S - W, the key where it is).
    Returns (near window, far query positions, far key positions, layers),
    or None."""
    if self_extend is not None:
        G, W = self_extend["group"], self_extend["window"]
        return W, np.floor(pos / G) + (W - W // G), np.floor(pos / G), self_extend["layers"]
    if string_shift is not None:
        S, W = string_shift["shift"], string_shift["window"]
        return S, pos - (S - W), pos.copy(), string_shift["layers"]
    return None


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
    "gemma2": ["<s>", "▁The", "▁capital", "▁of", "▁France", "▁is"],
    "mpt": ["The", "Ġcapital", "Ġof", "ĠFrance", "Ġis"],
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
    elif feature == "attn_softcap":
        m.attn_softcap = 0.0
    elif feature == "final_softcap":
        m.final_softcap = 0.0
    elif feature == "attention_scale":  # the 27B's 1/sqrt(hidden/heads) instead of 1/sqrt(head_dim)
        m.scale_root = np.sqrt(m.hidden // m.heads)
    elif feature == "alibi":
        m.slopes = np.zeros(m.heads)
    elif feature == "clamp_kqv":
        m.clamp = 0.0
    elif feature == "layer_norm":  # RMSNorm without the biases instead
        m.layer_norm = False
    elif feature == "biases":
        m.w = {k: v for k, v in model.w.items() if not k.endswith(".bias")}
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
    "gemma2": ["attn_softcap", "final_softcap", "post_norms", "local_layers", "attention_scale", "embedding_scale"],
    "mpt": ["alibi", "clamp_kqv", "layer_norm", "biases", "gelu"],
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True, help="where write_tiny_arch_ggufs wrote the files")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "fixtures", "arch_logits_fp32.json"))
    ap.add_argument("--only", nargs="*", default=None,
                    help="recompute these models only, keeping the others' entries of --out as they are")
    args = ap.parse_args()
    rng = np.random.default_rng(20261123)
    models = {}
    if args.only is not None:
        with open(args.out) as f:
            models = json.load(f)["models"]
    for name in MODELS:
        # Each model's prompts come from one generator in MODELS order, so
        # the draws are made (from the vocabulary size) for skipped models too.
        vocab = gguf.GGUFReader(os.path.join(args.dir, name + ".gguf")).tensors
        n_vocab = next(int(t.shape[1]) for t in vocab if t.name == "token_embd.weight")
        prompts = [[int(t) for t in rng.integers(300, n_vocab - 300, n)] for n in PROMPT_LENGTHS]
        if args.only is not None and name not in args.only:
            continue
        model = Model(os.path.join(args.dir, name + ".gguf"))
        cases = []
        for toks in prompts:
            cases.append({"tokens": toks, "rope_scale": [], "positions": [], **summarise(model.forward(toks))})
        longest = prompts[-1]
        if model.rope_on:  # a method's RoPE scales and positions (none without RoPE: refused there)
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
        # SIW's mechanism: key 0's weight x 1.8 for every query in every layer.
        siw_logits = model.forward(longest, key0_factor=1.8)
        siw_case = {"tokens": longest, "key0_factor": 1.8, **summarise(siw_logits),
                    "effect": float(np.max(np.abs(siw_logits[top] - ref)))}
        # The attention temperature as tests/engine/method_examples.hpp's example.
        temperature = {"temperature": 0.5, "layers": [1]}
        temperature_logits = model.forward(longest, temperature=temperature)
        temperature_case = {"tokens": longest, "attention_temperature": temperature, **summarise(temperature_logits),
                            "effect": float(np.max(np.abs(temperature_logits[top] - ref)))}
        # SelfExtend and STRING as tests/engine/method_examples.hpp's examples
        # (RoPE models only: refused without RoPE).
        remap_cases = {}
        if model.rope_on:
            for method, field, setting in REMAP_EXAMPLES:
                remap_logits = model.forward(longest, **{field: setting})
                remap_cases[method] = {"tokens": longest, field: setting, **summarise(remap_logits),
                                       "effect": float(np.max(np.abs(remap_logits[top] - ref)))}
        models[name] = {"arch": model.arch, "cases": cases, "feature_effect": effect, "phs": phs_case, "siw": siw_case,
                        "temperature": temperature_case, **remap_cases,
                        "greedy": greedy(model, os.path.join(args.dir, name + ".gguf"), name)}
        print(name, "feature effects", effect)
        print(name, model.arch, "top logits", [round(c["top_logits"][0], 3) for c in cases])
    with open(args.out, "w") as f:
        json.dump({"top_k": TOP_K, "models": models}, f)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
