#!/usr/bin/env python3
"""Dequantisation fixtures for the engine's scalar reference kernels: two
random blocks of each ggml type (scale fields set to sane fp16 values) and the
floats gguf.quants.dequantize makes of them.
Writes tests/reference/fixtures/dequant_blocks.json."""
import json
import os

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

# type: (block bytes, elements per block, byte offsets of fp16 scale fields)
TYPES = {
    "F32": (T.F32, 4, 1, []),
    "F16": (T.F16, 2, 1, [0]),
    "BF16": (T.BF16, 2, 1, []),
    "Q4_0": (T.Q4_0, 18, 32, [0]),
    "Q4_1": (T.Q4_1, 20, 32, [0, 2]),
    "Q8_0": (T.Q8_0, 34, 32, [0]),
    "Q4_K": (T.Q4_K, 144, 256, [0, 2]),
    "Q6_K": (T.Q6_K, 210, 256, [208]),
    "Q5_0": (T.Q5_0, 22, 32, [0]),
    "Q5_1": (T.Q5_1, 24, 32, [0, 2]),
    "Q2_K": (T.Q2_K, 84, 256, [80, 82]),
    "Q3_K": (T.Q3_K, 110, 256, [108]),
    "Q5_K": (T.Q5_K, 176, 256, [0, 2]),
    "IQ4_NL": (T.IQ4_NL, 18, 32, [0]),
    "IQ4_XS": (T.IQ4_XS, 136, 256, [0]),
}


def main():
    rng = np.random.default_rng(1234)
    out = {}
    for name, (qtype, nbytes, nelem, scale_offsets) in TYPES.items():
        blocks = 64 if nelem == 1 else 2  # float types: 64 elements
        raw = bytearray(rng.integers(0, 256, size=nbytes * blocks, dtype=np.uint8).tobytes())
        for b in range(blocks):
            for off in scale_offsets:
                value = np.float16(rng.uniform(-0.1, 0.1) if name not in ("Q4_K", "Q5_K", "Q2_K") else rng.uniform(0.001, 0.05))
                raw[b * nbytes + off:b * nbytes + off + 2] = value.tobytes()
        if name == "F32":
            raw = bytearray(rng.normal(size=blocks).astype(np.float32).tobytes())
        if name == "BF16":
            f = rng.normal(size=blocks).astype(np.float32)
            raw = bytearray((f.view(np.uint32) >> 16).astype(np.uint16).tobytes())
        data = np.frombuffer(bytes(raw), dtype=np.uint8)
        values = dequantize(data, qtype).astype(np.float32).reshape(-1)
        out[name] = {"bytes_hex": bytes(raw).hex(), "elements": int(values.size),
                     "values": [float(v) for v in values]}
    path = os.path.join(os.path.dirname(__file__), "fixtures", "dequant_blocks.json")
    with open(path, "w") as f:
        json.dump(out, f)
    print("wrote", path)


if __name__ == "__main__":
    main()
