#!/usr/bin/env bash
# The CPU engine on MPI evaluator ranks against one process with the same
# cores: the quickstart search as one ga-run with T threads, and under
# mpirun as 1 driver + T evaluators of 1 thread each (the driver computes
# nothing). Prints the search's wall time (first run row to its last
# checkpoint, so MPI start-up and the held-out step are left out), the
# evaluators' waited share, and whether every stored sample is the same.
#   usage: bench/mpi_engine.sh [BUILD_DIR] [OUT_DIR]
#   env:   THREADS=2 UNIT_PROMPTS=3 EXPERIMENT=experiments/quickstart.yaml
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
OUT="${2:-$(mktemp -d -t mpi-engine.XXXXXX)}"
GA_RUN="$BUILD/ga-run"
THREADS="${THREADS:-2}"
UNIT_PROMPTS="${UNIT_PROMPTS:-3}"
EXPERIMENT="${EXPERIMENT:-experiments/quickstart.yaml}"
[ -x "$GA_RUN" ] || { echo "mpi_engine: $GA_RUN not found (cmake --build $BUILD --target ga-run)" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "mpi_engine: mpirun not found (Debian: openmpi-bin)" >&2; exit 2; }
mkdir -p "$OUT"
# The same experiment with the thread count of each side (threads is how the
# engine computes, not what: it is not part of the search's fingerprint).
sed -E "s/^(\s*threads:).*/\1 $THREADS/" "$EXPERIMENT" >"$OUT/threads$THREADS.yaml"
sed -E "s/^(\s*threads:).*/\1 1/" "$EXPERIMENT" >"$OUT/threads1.yaml"

SAMPLES_SQL="SELECT e.cache_key, s.sample_id, s.correct, s.output, printf('%.17g', s.gold_logprob) FROM sample_results s
  JOIN evaluations e ON e.id = s.evaluation_id ORDER BY 1, 2"
SEARCH_SQL="SELECT (julianday(max(g.created_at)) - julianday(min(r.started_at))) * 86400 FROM generations g, runs r"
WAITED_SQL="SELECT 100.0 * (1 - sum(json_extract(w.value, '\$.busy_seconds')) /
    (json_extract(r.workers, '\$.seconds') * count(*))) FROM runs r, json_each(r.workers, '\$.ranks') w GROUP BY r.id"

run() {  # NAME YAML COMMAND...: a fresh database; prints the search's seconds
  local name=$1 yaml=$2; shift 2
  rm -f "$OUT/$name.db"*
  "$@" "$yaml" --db "$OUT/$name.db" --quiet >"$OUT/$name.out" 2>"$OUT/$name.err" ||
    { echo "mpi_engine: $name failed:" >&2; cat "$OUT/$name.err" >&2; exit 1; }
  sqlite3 "$OUT/$name.db" "$SEARCH_SQL"
}

echo "$EXPERIMENT, $(nproc) cores, units of $UNIT_PROMPTS prompts; out: $OUT"
single=$(run single "$OUT/threads$THREADS.yaml" "$GA_RUN")
ranks=$(run ranks "$OUT/threads1.yaml" mpirun --oversubscribe -n $((THREADS + 1)) "$GA_RUN" --unit-prompts "$UNIT_PROMPTS")
same=identical
[ "$(sqlite3 "$OUT/single.db" "$SAMPLES_SQL" | md5sum)" = "$(sqlite3 "$OUT/ranks.db" "$SAMPLES_SQL" | md5sum)" ] ||
  same=DIFFERENT
printf '| %-36s | %8s | %8s | %s\n' run "search s" waited samples
printf '|%s|%s|%s|%s\n' -------------------------------------- ---------- ---------- -------
printf '| %-36s | %8.1f | %8s | %s\n' "1 process x $THREADS threads" "$single" "" reference
printf '| %-36s | %8.1f | %7.1f%% | %s\n' "1 driver + $THREADS evaluators x 1 thread" "$ranks" \
  "$(sqlite3 "$OUT/ranks.db" "$WAITED_SQL")" "$same"
echo "ratio (1 process / ranks): $(awk -v a="$single" -v b="$ranks" 'BEGIN { printf "%.2f", a / b }')"
