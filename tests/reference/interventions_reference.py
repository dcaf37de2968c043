#!/usr/bin/env python3
"""Independent reference for the engine's interventions.

Each method is written here a second time, from the papers' text and
docs/methods.md, on the fp32 numpy forward pass of
make_logits_fixtures.py (its GGUF loading, RMSNorm and RoPE are reused; the
method logic below is not taken from any C++ code). For every method, five
short prompts with chunk spans and at least two settings, it writes the
last-position top-k logits (plus what the method decided: Ms-PoE ratios per
head and layer, CALIOPE positions, SIW dense chunks) to
tests/engine/fixtures/interventions/<method>.json. The C++ model tests read
those files; Python is not needed at test time.

Semantics fixed here (and documented in backends/engine/hooks/*.hpp):
  Ms-PoE (paper eq. 1, 2, Alg. 1): in layers >= first_layer, for each query
    head h, A = softmax(q_last . K^T / sqrt(d)) with q and K before RoPE
    (keys of h's KV group). S_p(h) = #{j : A_j > alpha / n} / n. Ratios
    r_i = min + i (max - min) / (H - 1) (paper) or min + i (max - min) / H
    (reference spacing), i = 0..H-1. Orders: awareness = the head of rank i
    by descending S_p gets r_i (ties: lower head first); reference-argsort =
    head k gets r[argsort(-S_p)[k]]; sequential = head k gets r_k; entropy =
    rank by descending entropy -sum A log A. Queries and keys of head h are
    rotated at position / r_h (keys per query head under GQA).
  CALIOPE (eq. 2-5): m(t) = number of chunks that begin at or before t;
    Phi(t) = t + c(m(t)).
  SIW (sec. 3.2): in the chosen layers, after softmax, the head-mean of the
    last query's row marks the top ceil(3n/10) tokens (ties: lower index);
    chunk m is dense when its count > sigma * (total count in chunks / M).
    Every query i >= 1 has its weight on key 0 multiplied by alpha_dense if
    i lies in a dense chunk, else alpha_sparse; no renormalisation. Query 0
    (the initial token itself) is untouched: the paper scales i in (0, n].
  PHS (eq. 2, 3): in the chosen layers, x = RMSNorm(h); xs = x with channel
    c multiplied by s; every row but the last is plain; the last query's row
    is softmax(W_Q xs_last . (W_K xs)^T / sqrt(d)) (RoPE at the same
    positions) applied to the plain V.
  Attention temperature (YaRN, Peng et al. 2023): in the chosen layers every
    query's attention is softmax(q . k^T / (t sqrt(d))) over its causal keys
    (the rows Ms-PoE ranks heads by are not tempered: its own readout).
  SelfExtend (LongLM, Jin et al. 2024, Alg. 1) and STRING (An et al. 2024,
    sec. 4): in the chosen layers, a key at token distance >= the near
    window is scored with the query and key rotated at far positions
    (make_arch_fixtures.distance_remap), one softmax over all keys.

Evaluation mode (--eval), for the peer tests on real models
(tests/engine/real_model_peer_test.cpp): the same forward pass and method
code on given token sequences, chunk spans and interventions (the
Intervention JSON of methods/intervention.hpp: rope_scale, mspoe,
position_map, siw, hidden_channel, attention_temperature, self_extend,
string_shift) over a llama, qwen2 or gemma3 GGUF (qwen2, gemma3:
make_arch_fixtures.Model in fp32, with its Q/K/V biases and NEOX RoPE).
It writes the logits (float64, little-endian, vocab values a row): the last
position's row of each case, or every gold row of a teacher-forced case
(prompt_tokens, see forward()), and a JSON of what each method decided. One
process computes every case, as loading and dequantising the model is a
large part of the cost. With --cache DIR, each case computed before on the
same inputs (the case, model bytes, reference sources, numpy) is answered
from DIR, and the model is loaded only if a case is not: on 2 cores the
real models' references take minutes and change only when an input does.

Usage: python3 tests/reference/interventions_reference.py [--model PATH]
       python3 tests/reference/interventions_reference.py --eval CASES.json --model PATH \
           --logits OUT.f64 --decisions OUT.json [--threads N] [--cache DIR]
"""
import argparse
import hashlib
import json
import os
import shutil
import sys
import time

# BLAS threads in the evaluation mode: --threads N (default 1, as
# peer_reference.py: beside other busy processes OpenBLAS's spinning threads
# slowed the forward passes many times over). A caller that holds the cores
# to itself passes them all: the real models' matmuls then run ~1.7x faster
# on 2 cores. Read here, as numpy reads the setting on import.
if "--eval" in sys.argv:
    threads = sys.argv[sys.argv.index("--threads") + 1] if "--threads" in sys.argv[:-1] else "1"
    os.environ.setdefault("OPENBLAS_NUM_THREADS", threads)
import numpy as np  # noqa: E402  (after the thread setting, which numpy reads on import)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from file_digest import sha256_of_file  # noqa: E402
from make_logits_fixtures import Model  # noqa: E402  (GGUF loading, rmsnorm, rope)

TOP_K = 20
OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "engine", "fixtures",
                       "interventions")

# Prompts as segments; segments marked True are chunks (a KV pair, a document,
# a fact). Each segment is tokenised on its own so chunk token spans are exact.
PROMPTS = [
    [("Extract the value corresponding to the specified key in the JSON object below.\n\n"
      "JSON data:\n{", False),
     ('"a3f9": "k27x",', True), ('\n "b81c": "q04m",', True), ('\n "c5d2": "z93p",', True),
     ('\n "d7e0": "w18r",', True), ('\n "e4b6": "t65n"', True),
     ('}\n\nKey: "c5d2"\nCorresponding value:', False)],
    [("Write a high-quality answer for the given question using only the provided search "
      "results (some of which might be irrelevant).\n\n", False),
     ("Document [1](Title: Oslo) Oslo is the capital of Norway.", True),
     ("\nDocument [2](Title: Lima) Lima is the capital of Peru.", True),
     ("\nDocument [3](Title: Hanoi) Hanoi is the capital of Vietnam.", True),
     ("\nDocument [4](Title: Quito) Quito is the capital of Ecuador.", True),
     ("\n\nQuestion: what is the capital of Peru?\nAnswer:", False)],
    [("<|im_start|>user\nRead the facts.\n", False),
     ("Mary went to the kitchen.", True), (" John picked up the apple.", True),
     (" Mary moved to the garden.", True), (" John went to the hallway.", True),
     (" Sandra dropped the milk.", True), (" Daniel journeyed to the office.", True),
     ("\nWhere is Mary?<|im_end|>\n<|im_start|>assistant\n", False)],
    [("Key-value list:\n", False),
     ("apple = 4471\n", True), ("pear = 9032\n", True), ("plum = 1187\n", True),
     ("fig = 5520\n", True),
     ("The value of pear is", False)],
    [("<|im_start|>system\nYou answer from the notes.<|im_end|>\n<|im_start|>user\nNotes:\n",
      False),
     ("1. The meeting is on Tuesday at noon.\n", True),
     ("2. The budget report is due Friday.\n", True),
     ("3. Anna leads the design review.\n", True),
     ("4. The office closes at six.\n", True),
     ("5. Lunch is served in room 12.\n", True),
     ("When is the budget report due?<|im_end|>\n<|im_start|>assistant\n", False)],
]

MSPOE_SETTINGS = [
    {"min_ratio": 1.2, "max_ratio": 1.8, "first_layer": 2, "alpha": 3.0, "order": "awareness",
     "reference_spacing": False},
    {"min_ratio": 1.0, "max_ratio": 2.0, "first_layer": 4, "alpha": 3.0,
     "order": "reference-argsort", "reference_spacing": True},
    {"min_ratio": 0.8, "max_ratio": 2.2, "first_layer": 0, "alpha": 2.0, "order": "entropy",
     "reference_spacing": False},
]
CALIOPE_SETTINGS = [
    {"kind": "moses", "gap": 10000.0},
    {"kind": "moses", "gap": 40.0},
    {"kind": "hourglass", "delta_min": 5.0, "delta_max": 1000.0},
    {"kind": "decay", "delta0": 1000.0, "lambda": 0.95},
    {"kind": "decay", "delta0": 20.0, "lambda": 0.5},
]
SIW_SETTINGS = [
    {"alpha_dense": 0.5, "alpha_sparse": 1.5, "sigma": 1.0, "layers": list(range(5, 21))},
    {"alpha_dense": 0.8, "alpha_sparse": 2.0, "sigma": 0.5, "layers": list(range(10, 26))},
]
# t < 1 on the last half of SmolLM2's 30 layers, t > 1 on every layer.
TEMPERATURE_SETTINGS = [
    {"temperature": 0.7, "layers": list(range(15, 30))},
    {"temperature": 1.5, "layers": list(range(0, 30))},
]
# SmolLM2's prompts here are < 160 tokens: windows that leave far keys.
SELFEXTEND_SETTINGS = [
    {"group": 4, "window": 32, "layers": list(range(0, 30))},
    {"group": 8, "window": 64, "layers": list(range(10, 30))},
]
STRING_SETTINGS = [
    {"shift": 48, "window": 8, "layers": list(range(0, 30))},
    {"shift": 96, "window": 16, "layers": list(range(15, 30))},
]
PHS_SETTINGS = [
    {"channel": 17, "scale": 0.0, "layers": list(range(8, 21))},
    {"channel": 300, "scale": -1.0, "layers": list(range(5, 26))},
    # Strong enough that the check can fail: logits move by up to ~4.4, far
    # beyond the test's tolerance (the two above move them by < 0.5).
    {"channel": 17, "scale": 4.0, "layers": list(range(5, 26))},
]


# ----------------------------------------------------------------- methods

def mspoe_ratios(heads, lo, hi, reference_spacing):
    """Ms-PoE eq. 2 (paper) or the public code's spacing."""
    if reference_spacing:
        return [lo + (hi - lo) * i / heads for i in range(heads)]
    if heads == 1:
        return [lo]
    return [lo + i * (hi - lo) / (heads - 1) for i in range(heads)]


def rank_descending(values):
    """rank[h] = position of head h when sorted by value, largest first, ties by lower h."""
    order = sorted(range(len(values)), key=lambda h: (-values[h], h))
    rank = [0] * len(values)
    for i, h in enumerate(order):
        rank[h] = i
    return rank


def mspoe_assign(rows, setting):
    """rows: [H, n] softmax rows of the last query (pre-RoPE). Returns (ratio per head,
    ratio index per head, scores)."""
    H, n = rows.shape
    alpha = setting["alpha"]
    score = [float(np.count_nonzero(rows[h].astype(np.float64) > alpha / n)) / n
             for h in range(H)]  # eq. 1
    ratios = mspoe_ratios(H, setting["min_ratio"], setting["max_ratio"],
                          setting["reference_spacing"])
    order = setting["order"]
    if order == "awareness":
        index = rank_descending(score)
    elif order == "reference-argsort":
        index = sorted(range(H), key=lambda h: (-score[h], h))  # argsort(-S_p), used as is
    elif order == "sequential":
        index = list(range(H))
    elif order == "entropy":
        ent = [float(-(rows[h] * np.log(np.maximum(rows[h], 1e-30))).sum()) for h in range(H)]
        index = rank_descending(ent)
    else:
        raise ValueError(order)
    return [ratios[i] for i in index], index, score


def caliope_offsets(kind, d, p):
    """c(m) for m = 0..d (CALIOPE eq. 3-5)."""
    c = [0.0] * (d + 1)
    for m in range(d + 1):
        if kind == "moses":
            c[m] = 0.0 if m <= d // 2 else p["gap"]
        elif kind == "hourglass":
            c[m] = sum(p["delta_min"] + 4.0 * k / (d - 1) * (1.0 - k / (d - 1)) *
                       (p["delta_max"] - p["delta_min"]) for k in range(1, m))
        elif kind == "decay":
            c[m] = sum(p["delta0"] * p["lambda"] ** k for k in range(1, m))
        else:
            raise ValueError(kind)
    return c


def caliope_positions(n, chunks, setting):
    c = caliope_offsets(setting["kind"], len(chunks), setting)
    pos = []
    for t in range(n):
        m = sum(1 for b, _ in chunks if b <= t)
        pos.append(t + c[m])
    if any(b <= a for a, b in zip(pos, pos[1:])):
        raise ValueError("Phi not strictly increasing")
    return np.array(pos, dtype=np.float64)


def siw_alphas(last_row_mean, chunks, setting):
    """Per query token alpha and the dense chunk flags (SIW sec. 3.2 steps 1-2)."""
    n = len(last_row_mean)
    top = (3 * n + 9) // 10  # ceil(0.3 n), exact
    order = sorted(range(n), key=lambda j: (-last_row_mean[j], j))[:top]
    marked = np.zeros(n, dtype=bool)
    marked[order] = True
    counts = [int(marked[b:e].sum()) for b, e in chunks]
    alphas = np.full(n, setting["alpha_sparse"], dtype=np.float64)
    dense = [False] * len(chunks)
    if chunks:
        mean = sum(counts) / len(chunks)
        for m, (b, e) in enumerate(chunks):
            if counts[m] > setting["sigma"] * mean:
                dense[m] = True
                alphas[b:e] = setting["alpha_dense"]
    return alphas, dense, counts


# ------------------------------------------------------------ forward pass

def softmax(s):
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    return s / s.sum(axis=-1, keepdims=True)


def project(model, x, p, name):
    """x W^T (+ b): the Q, K or V projection, with its bias where the file
    has one (qwen2's Q/K/V biases; llama has none)."""
    y = x @ model.w[p + f"attn_{name}.weight"].T
    bias = model.w.get(p + f"attn_{name}.bias")
    return y if bias is None else y + bias.reshape(-1)


def forward(model, tokens, chunks, mspoe=None, caliope=None, siw=None, phs=None, rope_scale=None,
            prompt_tokens=None, temperature=None, self_extend=None, string_shift=None):
    """Last-position logits with any combination of the four interventions.
    rope_scale: [layer][head] RoPE scales (LPES, PI: the position is divided
    by the layer's scale); not combined with mspoe here.
    prompt_tokens: n < len(tokens) scores a teacher-forced continuation: the
    tokens after the prompt's n are the gold answer's inputs, Ms-PoE decides
    its ratios from the prompt's last query over the prompt's keys (Alg. 1:
    once, at prefill) and every later query and key keeps them, and the
    logits of rows n-1 .. len(tokens)-1 come back (one per gold token).
    Returns (logits, info) where info records what the methods decided."""
    T = len(tokens)
    n = T if prompt_tokens is None else prompt_tokens
    if n != T and (caliope or siw or phs):
        raise ValueError("a continuation after the prompt is modelled for rope_scale, mspoe, temperature, "
                         "self_extend and string_shift only")
    hd, H, KV = model.head_dim, model.heads, model.kv_heads
    group = H // KV
    pos = caliope_positions(T, chunks, caliope) if caliope else np.arange(T, dtype=np.float64)
    info = {"positions": pos.tolist(), "mspoe_ratio": [], "mspoe_index": [], "mspoe_score": [], "siw_dense": [],
            "siw_counts": []}
    remap = None
    if self_extend or string_shift:
        from make_arch_fixtures import distance_remap  # the papers' far positions, written once for both references
        remap = distance_remap(pos, self_extend, string_shift)
    far = (np.arange(T)[:, None] - np.arange(T)[None, :]) >= remap[0] if remap else None

    def scores(l, qrows, krows, hh, g, qpos_at, t):
        """Head hh's scaled scores of queries qrows (rows qpos_at of the
        sequence) over every key; a remapped layer scores the far keys with
        both rotated at their far positions."""
        qh = rope(qrows[:, hh * hd:(hh + 1) * hd], pos[qpos_at] / scale[hh], l)
        kh = rope(krows[:, g * hd:(g + 1) * hd], pos / scale[hh], l)
        s = qh @ kh.T / (t * root)
        if remap is not None and l in remap[3]:
            qf = rope(qrows[:, hh * hd:(hh + 1) * hd], remap[1][qpos_at] / scale[hh], l)
            kf = rope(krows[:, g * hd:(g + 1) * hd], remap[2] / scale[hh], l)
            s = np.where(far[qpos_at], qf @ kf.T / (t * root), s)
        return s
    # gemma3 (make_arch_fixtures.Model): sliding-window layers turning RoPE
    # at their own base, Q/K RMS-normed per head, norms after each block, a
    # GELU gate and an embedding scale; llama and qwen2 have none of these.
    local = getattr(model, "local", [False] * model.layers)
    window = getattr(model, "window", 0)
    root = getattr(model, "scale_root", np.sqrt(hd))
    qk_norm = getattr(model, "qk_norm", False)
    post_norms = getattr(model, "post_norms", False)

    def rope(x, positions, l):
        return model.rope(x, positions, local[l]) if local[l] else model.rope(x, positions)

    def project_qk(x, p, first_query=0):
        """Q of rows first_query.. (PHS rescores the last only), K of every row."""
        q, k = project(model, x[first_query:], p, "q"), project(model, x, p, "k")
        if qk_norm:  # before RoPE, as llama.cpp's gemma3 graph
            q = model.head_norm(q, model.w[p + "attn_q_norm.weight"])
            k = model.head_norm(k, model.w[p + "attn_k_norm.weight"])
        return q, k

    def gated(gate, up):
        return (model.act(gate) if getattr(model, "gelu", False) else gate / (1.0 + np.exp(-gate))) * up

    h = model.w["token_embd.weight"][tokens] * np.float32(getattr(model, "embedding_scale", 1.0))
    mask = np.triu(np.full((T, T), -np.inf, dtype=np.float32), 1)
    idx = np.arange(T)
    window_mask = np.where((idx[:, None] - idx[None, :]) < window, mask, -np.inf).astype(np.float32)
    for l in range(model.layers):
        p = f"blk.{l}."
        layer_mask = window_mask if window and local[l] else mask
        x = model.rmsnorm(h, model.w[p + "attn_norm.weight"])
        (q, k), v = project_qk(x, p), project(model, x, p, "v")
        scale = [1.0] * H if rope_scale is None else list(rope_scale[l])
        if mspoe and l >= mspoe["first_layer"]:
            rows = np.stack([softmax(q[n - 1, hh * hd:(hh + 1) * hd] @
                                     k[:n, (hh // group) * hd:(hh // group + 1) * hd].T /
                                     root) for hh in range(H)])
            scale, index, score = mspoe_assign(rows, mspoe)
            info["mspoe_ratio"].append(scale)
            info["mspoe_index"].append(index)
            info["mspoe_score"].append(score)
        phs_here = phs is not None and l in phs["layers"]
        if phs_here:
            xs = x.copy()
            xs[:, phs["channel"]] *= phs["scale"]
            qs, ks = project_qk(xs, p, T - 1)
        t = temperature["temperature"] if temperature is not None and l in temperature["layers"] else 1.0
        probs = np.empty((H, T, T), dtype=np.float32)
        for hh in range(H):
            probs[hh] = softmax(scores(l, q, k, hh, hh // group, slice(0, T), t) + layer_mask)
        if siw is not None and l in siw["layers"]:
            alphas, dense, counts = siw_alphas(probs[:, T - 1, :].mean(axis=0), chunks, siw)
            info["siw_dense"].append(dense)
            info["siw_counts"].append(counts)
            probs[:, 1:, 0] *= alphas[1:].astype(np.float32)[None, :]
        if phs_here:
            for hh in range(H):
                probs[hh, T - 1] = softmax(scores(l, qs, ks, hh, hh // group, slice(T - 1, T), t) + layer_mask[T - 1:])[0]
        att = np.empty((T, H * hd), dtype=np.float32)
        for hh in range(H):
            g = hh // group
            att[:, hh * hd:(hh + 1) * hd] = probs[hh] @ v[:, g * hd:(g + 1) * hd]
        out = att @ model.w[p + "attn_output.weight"].T
        if post_norms:
            out = model.rmsnorm(out, model.w[p + "post_attention_norm.weight"])
        h = h + out
        x = model.rmsnorm(h, model.w[p + "ffn_norm.weight"])
        gate = x @ model.w[p + "ffn_gate.weight"].T
        up = x @ model.w[p + "ffn_up.weight"].T
        out = gated(gate, up) @ model.w[p + "ffn_down.weight"].T
        if post_norms:
            out = model.rmsnorm(out, model.w[p + "post_ffw_norm.weight"])
        h = h + out
    x = model.rmsnorm(h[n - 1:], model.w["output_norm.weight"])
    logits = x @ model.out.T
    return (logits[0] if n == T else logits), info


def top(logits):
    order = np.argsort(-logits, kind="stable")[:TOP_K]
    return {"top_ids": [int(i) for i in order], "top_logits": [float(logits[i]) for i in order]}


# ------------------------------------------------------------------- main

def tokenise(llm, segments):
    tokens, chunks, byte_chunks, text = [], [], [], b""
    for seg, is_chunk in segments:
        raw = seg.encode("utf-8")
        toks = llm.tokenize(raw, add_bos=False, special=True)
        if is_chunk:
            chunks.append([len(tokens), len(tokens) + len(toks)])
            byte_chunks.append([len(text), len(text) + len(raw)])
        tokens += toks
        text += raw
    return text.decode("utf-8"), tokens, chunks, byte_chunks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.environ.get(
        "MIDTUNE_MODEL", os.path.expanduser("~/.cache/midtune/SmolLM2-135M-Instruct.Q4_1.gguf")))
    ap.add_argument("--out", default=OUT_DIR)
    ap.add_argument("--only", nargs="*", help="write only these fixture files (e.g. phs); others are kept")
    ap.add_argument("--tokens-from", help="an existing fixture file (e.g. mspoe.json) whose first cases give each "
                    "prompt's text, tokens and chunks, instead of tokenising with llama-cpp-python")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    if args.tokens_from:
        with open(args.tokens_from) as f:
            stored = json.load(f)["cases"][:len(PROMPTS)]
        prompts = [(c["prompt"], c["tokens"], c["chunks"], c["chunk_bytes"]) for c in stored]
    else:
        import llamacpp_loader
        llm = llamacpp_loader.load(args.model, n_ctx=512, n_threads=1)
        prompts = [tokenise(llm, segs) for segs in PROMPTS]
        del llm
    model = Model(args.model)

    plain = []
    for text, tokens, chunks, byte_chunks in prompts:
        assert len(tokens) <= 160, (len(tokens), text)
        logits, _ = forward(model, tokens, chunks)
        plain.append(logits)

    def case(i, name, intervention, **kw):
        text, tokens, chunks, byte_chunks = prompts[i]
        logits, info = forward(model, tokens, chunks, **kw)
        out = {"prompt": text, "tokens": tokens, "chunks": chunks, "chunk_bytes": byte_chunks,
               "intervention": intervention,
               "max_abs_change_vs_plain": float(np.abs(logits - plain[i]).max()), **top(logits)}
        # The plain model's logits at the same ids: lets a test compare the
        # intervention's effect (with - plain), where quantisation error cancels.
        out["plain_logits"] = [float(plain[i][j]) for j in out["top_ids"]]
        if name == "mspoe":
            out["mspoe_ratio"] = info["mspoe_ratio"]
            out["mspoe_index"] = info["mspoe_index"]
            out["mspoe_score"] = info["mspoe_score"]
        if name == "caliope":
            out["positions"] = info["positions"]
        if name == "siw":
            out["siw_dense"] = info["siw_dense"]
            out["siw_counts"] = info["siw_counts"]
        return out

    def combo_cases():
        # Composition: all four at once on two prompts.
        out = []
        for i in (0, 1):
            iv = {"mspoe": MSPOE_SETTINGS[0], "position_map": CALIOPE_SETTINGS[1],
                  "siw": SIW_SETTINGS[0], "hidden_channel": PHS_SETTINGS[0]}
            out.append(case(i, "combo", iv, mspoe=iv["mspoe"], caliope=iv["position_map"], siw=iv["siw"],
                            phs=iv["hidden_channel"]))
        return out

    builders = {
        "mspoe": lambda: [case(i, "mspoe", {"mspoe": s}, mspoe=s)
                          for s in MSPOE_SETTINGS for i in range(len(prompts))],
        "caliope": lambda: [case(i, "caliope", {"position_map": s}, caliope=s)
                            for s in CALIOPE_SETTINGS for i in range(len(prompts))],
        "siw": lambda: [case(i, "siw", {"siw": s}, siw=s)
                        for s in SIW_SETTINGS for i in range(len(prompts))],
        "phs": lambda: [case(i, "phs", {"hidden_channel": s}, phs=s)
                        for s in PHS_SETTINGS for i in range(len(prompts))],
        "temperature": lambda: [case(i, "temperature", {"attention_temperature": s}, temperature=s)
                                for s in TEMPERATURE_SETTINGS for i in range(len(prompts))],
        "selfextend": lambda: [case(i, "selfextend", {"self_extend": s}, self_extend=s)
                               for s in SELFEXTEND_SETTINGS for i in range(len(prompts))],
        "string": lambda: [case(i, "string", {"string_shift": s}, string_shift=s)
                           for s in STRING_SETTINGS for i in range(len(prompts))],
        "combo": combo_cases,
        "plain": lambda: [{"prompt": text, "tokens": tokens, "chunks": chunks, "intervention": {},
                           **top(plain[i])} for i, (text, tokens, chunks, _) in enumerate(prompts)],
    }
    # Only the files asked for are computed (the reference forward pass is slow).
    files = {name: build() for name, build in builders.items() if not args.only or name in args.only}
    for name, cases in files.items():
        with open(os.path.join(args.out, name + ".json"), "w") as f:
            json.dump({"method": name, "top_k": TOP_K, "model": os.path.basename(args.model),
                       "cases": cases}, f)
        worst = max((c.get("max_abs_change_vs_plain", 0.0) for c in cases), default=0.0)
        print(f"{name}: {len(cases)} cases, largest change vs plain {worst:.3f}")


# ------------------------------------------------------- evaluation mode

def expand_rope_scale(rows, layers, heads):
    """Intervention.rope_scale (methods/lpes.hpp) to [layer][head]: one row
    applies to every layer, a row of one value to every head of its layer."""
    if len(rows) == 1:
        rows = rows * layers
    if len(rows) != layers:
        raise ValueError(f"rope_scale: {len(rows)} rows for {layers} layers")
    out = []
    for row in rows:
        if len(row) == 1:
            row = row * heads
        if len(row) != heads:
            raise ValueError(f"rope_scale: a row of {len(row)} values for {heads} heads")
        out.append([float(v) for v in row])
    return out


def load_model(path):
    """The fp32 forward pass's model: make_logits_fixtures.Model on llama
    files (as the fixtures), make_arch_fixtures.Model in fp32 on qwen2 and
    gemma3. The forward pass above implements RMSNorm, SwiGLU or GELU gates,
    Q/K/V biases, per-head Q/K norms, norms after each block, sliding-window
    layers with their own RoPE base, an embedding scale and the model's own
    RoPE pairing, nothing more, so other architectures are refused rather
    than computed wrongly."""
    # Read once, without the tokenizer's arrays (most of the read on a real
    # vocabulary of 150k tokens and as many merges).
    from gguf_weights import WeightsReader
    reader = WeightsReader(path)
    arch = reader.fields["general.architecture"].contents()
    if arch == "llama":
        return Model(path, reader)
    if arch not in ("qwen2", "gemma3"):
        raise SystemExit(f"interventions_reference: architecture {arch!r} not supported by --eval "
                         "(llama, qwen2, gemma3)")
    import make_arch_fixtures
    model = make_arch_fixtures.Model(path, np.float32, reader)
    assert not model.attn_softcap and not model.final_softcap and not model.slopes.any()
    assert not model.layer_norm and not model.clamp and model.freq_scale == 1.0 and model.halves
    if arch == "qwen2":
        assert not model.window and not model.qk_norm and not model.post_norms and not model.gelu
        assert model.embedding_scale == 1.0
    return model


def evaluate(model, case):
    iv = case.get("intervention", {})
    known = {"rope_scale", "mspoe", "position_map", "siw", "hidden_channel", "attention_temperature", "self_extend",
             "string_shift"}
    if set(iv) - known:
        raise ValueError(f"case {case.get('name')}: unknown intervention fields {sorted(set(iv) - known)}")
    if iv.get("rope_scale") and iv.get("mspoe"):
        raise ValueError(f"case {case.get('name')}: rope_scale with mspoe is not modelled here")
    rope_scale = expand_rope_scale(iv["rope_scale"], model.layers, model.heads) if iv.get("rope_scale") else None
    chunks = [tuple(c) for c in case.get("chunks", [])]
    logits, info = forward(model, case["tokens"], chunks, mspoe=iv.get("mspoe"), caliope=iv.get("position_map"),
                           siw=iv.get("siw"), phs=iv.get("hidden_channel"), rope_scale=rope_scale,
                           prompt_tokens=case.get("prompt_tokens"), temperature=iv.get("attention_temperature"),
                           self_extend=iv.get("self_extend"), string_shift=iv.get("string_shift"))
    logits = np.atleast_2d(logits)
    decided = {"name": case.get("name", ""), "rows": int(logits.shape[0])}
    if iv.get("mspoe"):
        decided.update(mspoe_ratio=info["mspoe_ratio"], mspoe_score=info["mspoe_score"])
    if iv.get("position_map"):
        decided["positions"] = info["positions"]
    if iv.get("siw"):
        decided.update(siw_dense=info["siw_dense"], siw_counts=info["siw_counts"])
    return logits, decided


def eval_main(argv):
    ap = argparse.ArgumentParser(description="evaluation mode: logits and decisions of given cases")
    ap.add_argument("--eval", required=True,
                    help="JSON {\"cases\": [{name, tokens, chunks, intervention, prompt_tokens}]} (prompt_tokens: "
                         "optional, the rows from the prompt's last to the end come back, see forward())")
    ap.add_argument("--model", required=True)
    ap.add_argument("--logits", required=True,
                    help="out: float64 logits, one vocab-long row per case (per scored row with prompt_tokens)")
    ap.add_argument("--decisions", required=True, help="out: JSON of what each method decided, and timings")
    ap.add_argument("--threads", type=int, default=1,
                    help="BLAS threads (read before numpy loads, see the top of this file)")
    ap.add_argument("--cache",
                    help="folder of earlier results: the same cases on the same model file with the same reference "
                         "code and numpy are answered from it case by case, and new results are stored there "
                         "(see cache_folder)")
    args = ap.parse_args(argv)
    with open(args.eval) as f:
        cases = json.load(f)["cases"]
    folder = cache_folder(args.cache, args.model, args.threads) if args.cache else None
    results = [read_cached(folder, case_key(case)) if folder else None for case in cases]
    model, loaded = None, 0.0
    for i, case in enumerate(cases):
        if results[i] is not None:
            logits, decided = results[i]
            decided["name"] = case.get("name", "")
            decided["cached"] = True
            continue
        if model is None:
            start = time.time()
            model = load_model(args.model)
            loaded = time.time() - start
        t0 = time.time()
        logits, decided = evaluate(model, case)
        decided["seconds"] = time.time() - t0
        results[i] = (logits, decided)
        if folder:
            store_case(folder, case_key(case), logits, decided)
    with open(args.logits, "wb") as out:
        for logits, _ in results:
            out.write(np.asarray(logits, dtype="<f8").tobytes())
    with open(args.decisions, "w") as f:
        json.dump({"model": os.path.basename(args.model), "load_seconds": loaded,
                   "cache": folder or "", "cached_cases": sum(1 for _, d in results if d.get("cached")),
                   "cases": [d for _, d in results]}, f)


def cache_folder(cache, model_path, threads):
    """The cache folder of this reference code on this model file:
    <cache>/<model sha256[:16]>/<code key>. The code key covers everything a
    case's numbers depend on besides the case itself: the model file's
    bytes, the sources of every module the evaluation runs from this folder
    (the forward pass and every method) and from the gguf package
    (dequantisation), numpy's version and the BLAS thread count (summation
    order). Each case is then stored under its own key (case_key), so a case
    is reused only where computing it again would give the same bytes, and
    one changed case (a greedy parting that moved) costs only itself.
    Every new code key is appended to <model folder>/keys.log with what it
    covers, so that two runs that did not share their results can be told
    apart afterwards."""
    import gguf
    import gguf_weights  # noqa: F401  (load_model's imports, loaded here so that their sources are in the key)
    import make_arch_fixtures  # noqa: F401
    folders = (os.path.dirname(os.path.abspath(__file__)), os.path.dirname(os.path.abspath(gguf.__file__)))
    sources = sorted({os.path.abspath(m.__file__) for m in list(sys.modules.values())
                      if getattr(m, "__file__", None) and os.path.abspath(m.__file__).startswith(folders)})
    # Sorted by name and digest, not by path: a clone elsewhere (CI's) lists
    # the same files in another path order and must get the same key.
    covered = [f"model {sha256_of_file(model_path)}"]
    covered += sorted(f"{os.path.basename(source)} {sha256_of_file(source)}" for source in sources)
    covered.append(f"numpy {np.__version__} threads {threads}")
    code_key = hashlib.sha256("\n".join(covered).encode()).hexdigest()[:32]
    model_folder = os.path.join(cache, covered[0].split()[1][:16])
    folder = os.path.join(model_folder, code_key)
    if not os.path.isdir(folder):
        os.makedirs(model_folder, exist_ok=True)
        with open(os.path.join(model_folder, "keys.log"), "a") as log:
            log.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {code_key} pid {os.getpid()}\n")
            log.writelines(f"  {line}\n" for line in covered)
    return folder


def case_key(case):
    """A case's own key: everything in it but its name (names are labels)."""
    content = {k: v for k, v in case.items() if k != "name"}
    return hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]


# A case result not used for this long is dropped when another is stored:
# the folder keeps what the runs of this code on this machine still ask for
# (a developer's and CI's greedy partings can differ at near-ties).
CACHE_UNUSED_DAYS = 14


def read_cached(folder, key):
    """(logits, decided) of a stored case, or None. A use refreshes its age."""
    path = os.path.join(folder, key)
    try:
        with open(path + ".json") as f:
            decided = json.load(f)
        logits = np.fromfile(path + ".f64", dtype="<f8").reshape(decided["rows"], -1)
    except (OSError, ValueError, KeyError):
        return None
    for suffix in (".json", ".f64"):
        os.utime(path + suffix)
    return logits, decided


def store_case(folder, key, logits, decided):
    """Stores one case whole (written beside, then renamed: the .json last,
    as read_cached reads it first), drops older code keys' folders of this
    model (each up to ~100 MB of logits) and case results long unused."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, key)
    for suffix, write in ((".f64", lambda f: f.write(np.asarray(logits, dtype="<f8").tobytes())),
                          (".json", lambda f: f.write(json.dumps(decided).encode()))):
        partial = f"{path}{suffix}.partial-{os.getpid()}"
        with open(partial, "wb") as f:
            write(f)
        os.rename(partial, path + suffix)
    model_folder = os.path.dirname(folder)
    for other in os.listdir(model_folder):
        if other != os.path.basename(folder) and os.path.isdir(os.path.join(model_folder, other)):
            shutil.rmtree(os.path.join(model_folder, other), ignore_errors=True)
    too_old = time.time() - CACHE_UNUSED_DAYS * 86400
    for name in os.listdir(folder):
        entry = os.path.join(folder, name)
        if ".partial-" not in name and os.path.getmtime(entry) < too_old:
            os.remove(entry)


if __name__ == "__main__":
    if "--eval" in sys.argv:
        eval_main(sys.argv[1:])
    else:
        main()
