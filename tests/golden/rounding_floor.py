#!/usr/bin/env python3
"""How far one build's per-sample results move under a change of rounding only.

The golden check (golden_check.sh) expects bit-identical databases from two
builds. A refactoring that reorders a float sum cannot give that, and the
engine's int8 activation path magnifies last-digit differences: a value that
crosses a rounding boundary of the 8-bit quantiser moves a whole quantisation
step, and the step's effect on a gold log-probability is of the size of the
engine's own quantisation error. This script measures that floor for one
intervention on one build: it evaluates the intervention as given and again
with the parameters named by --keys multiplied by (1 + eps) (pick ones whose
effect is continuous, such as SIW's alphas or LPES's scales, not thresholds), then prints the per-sample differences of gold
log-probability and how many decisions flipped. A difference between two
builds that stays within this floor is a rounding difference, not a change of
the method.

  tests/golden/rounding_floor.py GA_RUN EXPERIMENT.yaml INTERVENTION.json --keys alpha_dense,alpha_sparse
      [--eps 1e-6] [--split search]
"""
import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile


def perturbed(value, eps, keys, inside=False):
    """value with the numbers under any of `keys` multiplied by (1 + eps)."""
    if isinstance(value, dict):
        return {k: perturbed(v, eps, keys, inside or k in keys) for k, v in value.items()}
    if isinstance(value, list):
        return [perturbed(v, eps, keys, inside) for v in value]
    if inside and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) * (1.0 + eps)
    return value


def evaluate(ga_run, experiment, intervention, split, work, label):
    path = os.path.join(work, label + ".json")
    with open(path, "w") as f:
        json.dump(intervention, f)
    db = os.path.join(work, label + ".db")
    subprocess.run([ga_run, "eval", experiment, "--intervention", path, "--split", split, "--db", db],
                   check=True, stdout=subprocess.DEVNULL)
    with sqlite3.connect(db) as con:
        return {sid: (lp, ok) for sid, lp, ok in
                con.execute("SELECT sample_id, gold_logprob, correct FROM sample_results")}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ga_run")
    parser.add_argument("experiment")
    parser.add_argument("intervention")
    parser.add_argument("--keys", required=True, help="comma-separated JSON keys whose numbers are perturbed")
    parser.add_argument("--eps", type=float, default=1e-6)
    parser.add_argument("--split", default="search", choices=["search", "heldout"])
    args = parser.parse_args()
    with open(args.intervention) as f:
        given = json.load(f)
    with tempfile.TemporaryDirectory() as work:
        a = evaluate(args.ga_run, args.experiment, given, args.split, work, "given")
        b = evaluate(args.ga_run, args.experiment, perturbed(given, args.eps, set(args.keys.split(","))), args.split, work, "perturbed")
    if a.keys() != b.keys():
        sys.exit("rounding_floor: the two evaluations scored different samples")
    deltas = sorted((abs(a[s][0] - b[s][0]), s) for s in a if a[s][0] is not None and b[s][0] is not None)
    flips = sum(1 for s in a if a[s][1] != b[s][1])
    print(f"{args.keys} x (1 + {args.eps:g}): {len(deltas)} samples, "
          f"max |d gold_logprob| {deltas[-1][0]:.4f}, median {deltas[len(deltas) // 2][0]:.4f}, "
          f"decisions flipped {flips} of {len(a)}")


if __name__ == "__main__":
    main()
