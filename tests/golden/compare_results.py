#!/usr/bin/env python3
"""Compare two midtune results databases for the same experiments.

A refactoring must leave a search's results untouched: the same seed and model
give the same individuals, fitness values, per-sample results and held-out
table. This prints every stored fact that decides a result (wall times,
timestamps, row ids, run bookkeeping and paths left out; evaluations named by
their cache key, not their id) and compares the two databases fact by fact.

    compare_results.py BEFORE.db AFTER.db     # exit 0 identical, 1 different
    compare_results.py --logprob-tolerance 1e-3 BEFORE.db AFTER.db
        # the same, but per-sample gold log-probabilities may differ by up to
        # the tolerance (a change that reorders float sums moves them in the
        # last digits; every decision must still be identical)
    compare_results.py --dump DB              # the facts, one per line
"""
import argparse
import sqlite3
import sys


def facts(path, logprob_digits=None):
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    key_of = dict(db.execute("SELECT id, cache_key FROM evaluations"))
    experiment_name = dict(db.execute("SELECT id, name FROM experiments"))
    out = []

    for name, config_hash, search_config in db.execute(
            "SELECT name, config_hash, search_config FROM experiments ORDER BY name"):
        out.append(("experiment", name, config_hash, search_config))

    for row in db.execute(
            "SELECT cache_key, key_hash, intervention, dataset_slice, metric, model, position_scores, "
            "fitness_inputs, status, error FROM evaluations ORDER BY cache_key"):
        out.append(("evaluation",) + row)

    for row in db.execute(
            "SELECT evaluation_id, sample_id, gold_position, correct, output, gold_logprob, prompt_tokens "
            "FROM sample_results"):
        values = list(row[1:])
        if logprob_digits is not None and values[4] is not None:
            values[4] = "~"  # compared separately, within the tolerance
        out.append(("sample", key_of[row[0]]) + tuple(repr(v) if isinstance(v, float) else v for v in values))

    for row in db.execute(
            "SELECT experiment_id, candidate_id, generation, genome, genome_hash, origin, parents, fitness, "
            "evaluation_id, cache_hit FROM individuals"):
        out.append(("individual", experiment_name[row[0]]) + row[1:7] + (repr(row[7]), key_of[row[8]], row[9]))

    for row in db.execute(
            "SELECT experiment_id, generation, population, strategy_state, best_fitness, mean_fitness "
            "FROM generations"):
        out.append(("generation", experiment_name[row[0]]) + row[1:4] + (repr(row[4]), repr(row[5])))

    has_heldout = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'heldout_results'").fetchone()
    if has_heldout:
        for experiment_id, role, split, evaluation_id in db.execute(
                "SELECT experiment_id, role, split, evaluation_id FROM heldout_results"):
            out.append(("heldout", experiment_name[experiment_id], role, split, key_of[evaluation_id]))

    return sorted(tuple("" if v is None else str(v) for v in f) for f in out)


def logprobs(path):
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    return {(key, sample): lp for key, sample, lp in db.execute(
        "SELECT e.cache_key, s.sample_id, s.gold_logprob FROM sample_results s JOIN evaluations e ON e.id = s.evaluation_id")}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dump", metavar="DB")
    parser.add_argument("--logprob-tolerance", type=float, default=None)
    parser.add_argument("databases", nargs="*")
    args = parser.parse_args()
    if args.dump:
        for f in facts(args.dump):
            print("\t".join(f))
        return 0
    if len(args.databases) != 2:
        parser.error("give BEFORE.db AFTER.db (or --dump DB)")
    before, after = (facts(p, args.logprob_tolerance) for p in args.databases)
    worst = 0.0
    if args.logprob_tolerance is not None:
        lp_before, lp_after = (logprobs(p) for p in args.databases)
        for key, value in lp_before.items():
            other = lp_after.get(key)
            if value is None or other is None:
                continue
            worst = max(worst, abs(value - other))
        print(f"gold log-probabilities: worst difference {worst:.3g} (tolerance {args.logprob_tolerance:g})")
        if worst > args.logprob_tolerance:
            print("DIFFERENT: a gold log-probability moved by more than the tolerance")
            return 1
    only_before = sorted(set(before) - set(after))
    only_after = sorted(set(after) - set(before))
    kinds = {}
    for f in before:
        kinds[f[0]] = kinds.get(f[0], 0) + 1
    summary = ", ".join(f"{n} {k}s" for k, n in sorted(kinds.items()))
    if not only_before and not only_after and len(before) == len(after):
        print(f"identical: {summary}")
        return 0
    print(f"DIFFERENT: {len(only_before)} facts only in {args.databases[0]}, "
          f"{len(only_after)} only in {args.databases[1]} (of {summary})")
    for f in only_before[:10]:
        print("  - " + "\t".join(f)[:400])
    for f in only_after[:10]:
        print("  + " + "\t".join(f)[:400])
    return 1


if __name__ == "__main__":
    sys.exit(main())
