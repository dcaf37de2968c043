#!/usr/bin/env bash
# The paper protocol against midtune's recommended settings on the same
# model, data, seed and GA (experiments/lpes-kv-efficiency.yaml: the file
# as it is is "recommended"; without its lines marked "# recommended" it is
# "paper"). Each runs on a fresh database; then, for each, prints the forward
# passes (prompts: one teacher-forced forward pass each) of the search and of
# the held-out step, the wall time, the best search fitness per generation and
# the held-out table with 95 % Wilson intervals and the paired statistics.
#   usage: bench/lpes_kv_efficiency.sh [BUILD_DIR] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
OUT="${2:-$(mktemp -d -t lpes-kv-efficiency.XXXXXX)}"
GA_RUN="$BUILD/ga-run"
SOURCE=experiments/lpes-kv-efficiency.yaml
[ -x "$GA_RUN" ] || { echo "lpes_kv_efficiency: $GA_RUN not found (cmake --build $BUILD --target ga-run)" >&2; exit 2; }
mkdir -p "$OUT"
rm -f "$OUT"/paper.db* "$OUT"/recommended.db*

sed 's/^name: lpes-kv-efficiency$/name: lpes-kv-efficiency-paper/' "$SOURCE" | grep -v '# recommended' \
  >"$OUT/paper.yaml"
cp "$SOURCE" "$OUT/recommended.yaml"
"$GA_RUN" validate "$OUT/paper.yaml" >/dev/null
"$GA_RUN" validate "$OUT/recommended.yaml" >/dev/null

# Side by side, so both see the same load on a shared machine (each one's
# wall time is its own process's, start to exit).
for variant in recommended paper; do
  echo "== $variant: $GA_RUN $OUT/$variant.yaml --db $OUT/$variant.db" >&2
  (
    start=$(date +%s.%N)
    "$GA_RUN" "$OUT/$variant.yaml" --db "$OUT/$variant.db" --quiet >"$OUT/$variant.log" 2>&1
    echo "$(date +%s.%N) - $start" | bc >"$OUT/$variant.wall"
  ) &
done
wait
declare -A WALL
for variant in recommended paper; do
  [ -s "$OUT/$variant.wall" ] || { echo "lpes_kv_efficiency: the $variant run failed:" >&2; cat "$OUT/$variant.log" >&2; exit 1; }
  WALL[$variant]=$(cat "$OUT/$variant.wall")
done

query() { "$GA_RUN" query "$1" "$2"; }
for variant in paper recommended; do
  db="$OUT/$variant.db"
  echo
  echo "# $variant ($OUT/$variant.yaml)"
  echo
  printf 'wall time: %.0f s (search and held-out step)\n\n' "${WALL[$variant]}"
  echo "forward passes (prompts):"
  query "$db" "SELECT (SELECT sum(prompts) FROM runs) AS search,
                      (SELECT count(*) FROM sample_results WHERE evaluation_id IN
                         (SELECT evaluation_id FROM heldout_results)) AS heldout,
                      (SELECT count(*) FROM individuals) AS individuals,
                      (SELECT count(*) FROM individuals WHERE cache_hit = 1) AS from_cache,
                      (SELECT count(*) FROM individuals WHERE raced_samples IS NOT NULL) AS raced"
  echo
  "$GA_RUN" status "$db" | tail -n +2
  echo
  echo "best search fitness per generation (whole-split fitness; blend = accuracy + a tie-break below 1e-6):"
  query "$db" "SELECT generation, printf('%.4f', best_fitness) AS best, printf('%.4f', mean_fitness) AS mean
               FROM generations ORDER BY generation"
  echo
  "$GA_RUN" report "$db" | sed -n '/^## Held-out/,$p'
done
