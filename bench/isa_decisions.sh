#!/usr/bin/env bash
# How often two CPU kernel paths part on a per-sample decision: runs one small
# fixed-candidate experiment (a grid of PI scales on generated KV data,
# teacher-forced; every candidate is the same whatever the path decides) once
# with MIDTUNE_ISA=$OTHER (default scalar) and once on the machine's default
# path, each into its own database, and compares every (intervention, item)
# both evaluated: the correct/incorrect decision and the gold log-probability.
# The README's provenance guarantee quotes its figure.
#
#   bench/isa_decisions.sh [GA_RUN]          (default build/ga-run)
#   OTHER=scalar WORK=/some/dir SAMPLES=2 PAIRS=2 SCALES="1.0, 1.1, 1.2"
#
# Cost: the scalar path prefills ~50x slower than AVX2 (85 s against 1.5 s of
# CPU for a 500-token prompt; ~55 s for the 2-pair prompts here), so the
# default search (3 scales x 3 positions x 2 items) is ~17 minutes of CPU,
# and the held-out step after it ~8 more. Interrupt the scalar run once its
# search is stored (`sqlite3 WORK/scalar.db "SELECT count(*) FROM
# sample_results"` reaches 18) and run again with COMPARE_ONLY=1 WORK=...:
# the comparison uses whatever both databases hold. Needs the test model
# (scripts/fetch_model.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
ga_run=$(realpath "${1:-build/ga-run}")
other=${OTHER:-scalar}
work=${WORK:-$(mktemp -d)}
model=${MIDTUNE_MODEL:-$HOME/.cache/midtune/SmolLM2-135M-Instruct.Q4_1.gguf}
mkdir -p "$work"
cat >"$work/isa-decisions.yaml" <<YAML
name: isa-decisions
seed: 77
backend: {kind: engine, model: $model, threads: ${THREADS:-2}}
dataset: {kind: kv, pairs: ${PAIRS:-2}, gold_positions: [0.0, 0.5, 1.0], search_samples: ${SAMPLES:-2},
          heldout_samples: 1, metric: teacher_forced, prime_answer: true}
objective: {kind: pi, pi: {min: 1.0, max: 1.5, step: 0.05}}
search: {strategy: grid, grid: {values: {scale: [${SCALES:-1.0, 1.1, 1.2}]}}}
YAML
for isa in default "$other"; do
  [ "${COMPARE_ONLY:-0}" = 1 ] && break
  rm -f "$work/$isa.db"*
  start=$(date +%s)
  if [ "$isa" = default ]; then
    env -u MIDTUNE_ISA "$ga_run" "$work/isa-decisions.yaml" --db "$work/$isa.db" --quiet
  else
    MIDTUNE_ISA=$isa "$ga_run" "$work/isa-decisions.yaml" --db "$work/$isa.db" --quiet
  fi
  echo "$isa: $(( $(date +%s) - start )) s wall, kernel path $(sqlite3 "$work/$isa.db" \
    "SELECT json_extract(provenance, '\$.execution.kernel_path') FROM runs LIMIT 1")"
done
sqlite3 "$work/default.db" <<SQL
ATTACH '$work/$other.db' AS other;
WITH pairs AS (
  SELECT a.correct AS a_correct, b.correct AS b_correct, a.gold_logprob AS a_lp, b.gold_logprob AS b_lp
  FROM evaluations ea JOIN sample_results a ON a.evaluation_id = ea.id
  JOIN other.evaluations eb ON eb.intervention = ea.intervention AND eb.dataset_slice = ea.dataset_slice
  JOIN other.sample_results b ON b.evaluation_id = eb.id AND b.sample_id = a.sample_id)
SELECT 'decisions compared: ' || count(*) || ', differing: ' || sum(a_correct != b_correct) ||
       ', correct (default path): ' || sum(a_correct) ||
       ', max |gold log-prob difference|: ' || printf('%.4f', max(abs(a_lp - b_lp))) ||
       ' nats, mean: ' || printf('%.4f', avg(abs(a_lp - b_lp))) FROM pairs;
SQL
echo "databases: $work/default.db $work/$other.db"
