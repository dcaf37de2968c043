#!/usr/bin/env python3
"""Independent numpy oracle for the PHS channel-search analysis
(backends/engine/tools/phs_channel_search.hpp), written from the paper's text (001 §3.2,
Alg. 1, App. C.1) and the reference code's options, not from the C++.

Curves come from a closed form with integer-hash noise that the C++ test
computes identically (phs_oracle_test.cpp: synthetic_value), so the fixture
holds only the expected candidates. Regenerate with:
    python3 tests/phs/make_channel_search_fixture.py > tests/phs/fixtures/channel_search_oracle.json
"""
import json
import math

import numpy as np

LAYERS, TOKENS, HIDDEN = 12, 200, 16


def hash_noise(layer, pos, channel):
    """Uniform in [-0.5, 0.5) from a 32-bit multiplicative hash (same in C++)."""
    h = (layer * 7919 + pos * 104729 + channel * 1299709 + 12345) & 0xFFFFFFFF
    h = (h * 2654435761) & 0xFFFFFFFF
    h ^= h >> 15
    h = (h * 2246822519) & 0xFFFFFFFF
    h ^= h >> 13
    return h / 4294967296.0 - 0.5


def synthetic_value(layer, pos, channel):
    kind = channel % 4
    amp = 0.05 * (channel // 4 + 1)
    noise = hash_noise(layer, pos, channel)
    if kind == 0:  # monotone trend, noisier with the channel
        return 0.01 * pos + amp * 4 * noise
    if kind == 1:  # one hump: not monotone
        return math.sin(math.pi * pos / TOKENS) + amp * noise
    if kind == 2:  # log curve in the first layers only, falling in later ones
        sign = 1.0 if layer < 3 + channel // 4 else -1.0
        return sign * math.log1p(pos) + amp * noise
    return noise  # pure noise


def curves():
    out = np.zeros((LAYERS, TOKENS, HIDDEN), dtype=np.float32)
    for l in range(LAYERS):
        for p in range(TOKENS):
            for c in range(HIDDEN):
                out[l, p, c] = np.float32(synthetic_value(l, p, c))
    return out.astype(np.float64)


def normalise(y):
    lo, hi = y.min(), y.max()
    return None if hi - lo <= 1e-12 * max(abs(lo), abs(hi), 1e-30) else (y - lo) / (hi - lo)


def trend(y):
    x = np.arange(len(y), dtype=np.float64)
    fit = np.polyval(np.polyfit(x, y, 3), x)
    d = np.diff(fit)
    if np.all(d >= 0) and np.any(d != 0):
        return 1
    if np.all(d <= 0) and np.any(d != 0):
        return -1
    return 0


def savgol(y, window):
    half = window // 2
    x = np.arange(window, dtype=np.float64)
    out = np.empty_like(y)
    for i in range(len(y)):
        lo = min(max(i - half, 0), len(y) - window)
        seg = y[lo:lo + window]
        out[i] = np.polyval(np.polyfit(x, seg, 3), i - lo)
    return out


def smoothness(y, smoothing, window):
    n = normalise(y)
    if n is None:
        return 0.0
    s = np.convolve(n, np.ones(window) / window, mode="valid") if smoothing == "moving-average" else savgol(n, window)
    return float(np.sum(np.diff(s, n=2) ** 2))


def search(h, skip, smoothing, window, aggregate, same_direction, top_k):
    kept = []
    for c in range(HIDDEN):
        up, down = [], []
        for l in range(2, LAYERS - 1):
            y = h[l, skip:, c]
            n = normalise(y)
            if n is None:
                continue
            t = trend(n)
            if t:
                (up if t > 0 else down).append((l, smoothness(y, smoothing, window)))
        direction = 1 if len(up) > len(down) else -1
        layers = (up if direction > 0 else down) if same_direction else sorted(up + down)
        if 4 * len(layers) <= LAYERS:
            continue
        values = [s for _, s in layers]
        score = min(values) if aggregate == "min" else sum(values) / len(values)
        kept.append({"channel": c, "monotone_layers": [l for l, _ in layers], "direction": direction,
                     "smoothness": score})
    kept.sort(key=lambda k: k["smoothness"])  # stable: ties keep the lower channel
    return kept[:top_k]


def main():
    h = curves()
    cases = []
    for options in [
        {"skip": 30, "smoothing": "moving-average", "window": 20, "aggregate": "min", "same_direction": False, "top_k": 6},
        {"skip": 50, "smoothing": "savgol", "window": 11, "aggregate": "mean", "same_direction": True, "top_k": 16},
    ]:
        cases.append({"options": options, "expected": search(h, **options)})
    print(json.dumps({"layers": LAYERS, "tokens": TOKENS, "hidden": HIDDEN, "cases": cases}, indent=1))


if __name__ == "__main__":
    main()
