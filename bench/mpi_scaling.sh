#!/usr/bin/env bash
# One search on MPI evaluator ranks against one process: the synthetic test
# double with a sleep per prompt (prompt_latency_ms: a model's cost that takes
# no CPU, so several ranks fit a small machine), run as a single ga-run and
# under mpirun with 1 driver + E evaluators for each E. Prints the time per
# generation (from the stored checkpoints, so MPI start-up is left out), the
# speed-up against one evaluator and against the single process, the whole
# run's wall time, the share of time the evaluators waited for a unit and
# the cost of a unit beyond its prompts' sleep (messages, JSON, the driver's
# turn-around; from the driver's record in runs.workers), with racing what
# speculation did (units of the next step sent to evaluators that would
# otherwise wait, and the share of evaluator time spent on speculative
# prompts that were thrown away), and whether every stored sample equals
# the single process's.
#   usage: bench/mpi_scaling.sh [BUILD_DIR] [OUT_DIR]
#   env:   EVALUATORS="1 2 4" PROMPT_MS=2 POPULATION=16 SAMPLES=32 GENERATIONS=2 UNIT_PROMPTS=8 RACING=0
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
OUT="${2:-$(mktemp -d -t mpi-scaling.XXXXXX)}"
GA_RUN="$BUILD/ga-run"
EVALUATORS="${EVALUATORS:-1 2 4}"
PROMPT_MS="${PROMPT_MS:-2}"
POPULATION="${POPULATION:-16}"
SAMPLES="${SAMPLES:-32}"  # per gold position (3 positions)
GENERATIONS="${GENERATIONS:-2}"
UNIT_PROMPTS="${UNIT_PROMPTS:-8}"
RACING="${RACING:-0}"
[ -x "$GA_RUN" ] || { echo "mpi_scaling: $GA_RUN not found (cmake --build $BUILD --target ga-run)" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "mpi_scaling: mpirun not found (Debian: openmpi-bin)" >&2; exit 2; }
mkdir -p "$OUT"

parents=$((POPULATION / 4)); crossovers=$((POPULATION / 4)); mutants=$((POPULATION - parents - crossovers))
{
  echo "name: mpi-scaling"
  echo "seed: 3"
  echo "backend: {kind: synthetic-test-double, layers: 12, heads: 2, noise: 0.05, prompt_latency_ms: $PROMPT_MS}"
  echo "dataset: {kind: kv, pairs: 6, gold_positions: [0.0, 0.5, 1.0], search_samples: $SAMPLES, heldout_samples: 8}"
  echo "objective: {kind: lpes, lpes: {curve: bezier, degree: 3}}"
  echo "search:"
  echo "  strategy: ga"
  echo "  ga: {population: $POPULATION, parents: $parents, generations: $GENERATIONS, mutants: $mutants, crossovers: $crossovers}"
  [ "$RACING" = 1 ] && echo "  racing: {first: 2, step: 2, confidence: 0.8}"
} >"$OUT/exp.yaml"
"$GA_RUN" validate "$OUT/exp.yaml" >/dev/null

SAMPLES_SQL="SELECT e.cache_key, s.sample_id, s.correct, printf('%.17g', s.gold_logprob) FROM sample_results s
  JOIN evaluations e ON e.id = s.evaluation_id ORDER BY 1, 2"
# Mean seconds between consecutive generation checkpoints.
PER_GENERATION_SQL="SELECT avg((julianday(g.created_at) - julianday(p.created_at)) * 86400) FROM generations g
  JOIN generations p ON p.experiment_id = g.experiment_id AND p.generation = g.generation - 1"

# Over every rank: the share of time waited, and the mean ms per unit beyond
# its prompts' sleep.
WORKERS_SQL="SELECT 100.0 * (1 - sum(json_extract(w.value, '\$.busy_seconds')) /
    (json_extract(r.workers, '\$.seconds') * count(*))),
  1000.0 * (sum(json_extract(w.value, '\$.busy_seconds')) - sum(json_extract(w.value, '\$.prompts')) * $PROMPT_MS / 1000.0)
    / sum(json_extract(w.value, '\$.units'))
  FROM runs r, json_each(r.workers, '\$.ranks') w GROUP BY r.id"
# Speculative units sent, and the evaluator time of the speculative prompts
# discarded as a share of all evaluator time (empty for a build without it).
SPECULATION_SQL="SELECT json_extract(r.workers, '\$.speculative.units'),
  100.0 * json_extract(r.workers, '\$.speculative.discarded_seconds') /
    (json_extract(r.workers, '\$.seconds') * json_array_length(r.workers, '\$.ranks'))
  FROM runs r"

run() {  # NAME COMMAND...: runs on a fresh database, prints "wall per_generation"
  local name=$1; shift
  rm -f "$OUT/$name.db"*
  local start end
  start=$(date +%s.%N)
  "$@" "$OUT/exp.yaml" --db "$OUT/$name.db" --quiet >"$OUT/$name.out" 2>"$OUT/$name.err" ||
    { echo "mpi_scaling: $name failed:" >&2; cat "$OUT/$name.err" >&2; exit 1; }
  end=$(date +%s.%N)
  echo "$(echo "$end - $start" | bc) $(sqlite3 "$OUT/$name.db" "$PER_GENERATION_SQL")"
}

echo "$((SAMPLES * 3)) prompts per evaluation, population $POPULATION, $GENERATIONS generations after the first," \
  "$PROMPT_MS ms per prompt, units of $UNIT_PROMPTS, racing $RACING; out: $OUT"
read -r single_wall single_gen < <(run single "$GA_RUN")
printf '| %-22s | %14s | %12s | %12s | %8s | %8s | %12s | %11s | %11s | %s\n' run "s/generation" "vs 1 eval." \
  "vs single" "wall s" "waited" "ms/unit over" "spec. units" "spec. waste" "samples"
printf '|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s\n' ------------------------ ---------------- -------------- -------------- \
  ---------- ---------- -------------- ------------- ------------- -------
printf '| %-22s | %14.3f | %12s | %12s | %8.2f | %8s | %12s | %11s | %11s | %s\n' "one process" "$single_gen" "" \
  "1.00x" "$single_wall" "" "" "" "" reference
one_eval=""
for e in $EVALUATORS; do
  read -r wall gen < <(run "e$e" mpirun --oversubscribe -n $((e + 1)) "$GA_RUN" --unit-prompts "$UNIT_PROMPTS")
  [ -n "$one_eval" ] || one_eval=$gen
  same=identical
  [ "$(sqlite3 "$OUT/single.db" "$SAMPLES_SQL" | md5sum)" = "$(sqlite3 "$OUT/e$e.db" "$SAMPLES_SQL" | md5sum)" ] ||
    same=DIFFERENT
  IFS='|' read -r waited over < <(sqlite3 "$OUT/e$e.db" "$WORKERS_SQL")
  IFS='|' read -r spec_units spec_waste < <(sqlite3 "$OUT/e$e.db" "$SPECULATION_SQL")
  [ -z "$spec_waste" ] || spec_waste=$(printf '%.1f%%' "$spec_waste")
  printf '| %-22s | %14.3f | %11.2fx | %11.2fx | %8.2f | %7.1f%% | %12.2f | %11s | %11s | %s\n' \
    "1 driver + $e evaluators" "$gen" "$(echo "$one_eval / $gen" | bc -l)" "$(echo "$single_gen / $gen" | bc -l)" \
    "$wall" "$waited" "$over" "$spec_units" "$spec_waste" "$same"
done
