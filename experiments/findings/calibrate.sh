#!/usr/bin/env bash
# Baseline position curves for the findings: where a real model loses the
# middle of a KV-retrieval prompt, before any method is searched there.
#
#   experiments/findings/calibrate.sh run SET...    evaluate every file of each SET
#   experiments/findings/calibrate.sh table SET...  pooled accuracy by gold position, 95 % Wilson intervals
#
# A SET is a file-name prefix: qwen05b-kv75 means qwen05b-kv75-baseline*.yaml
# here. A set's files differ only in seed and name, so their held-out items are
# distinct and pool into one curve. `run` is its own resume: a file already
# evaluated is answered from the results database in seconds ("from the
# cache"), and `ga-run eval` stores its samples 16 prompts at a time, so the
# file in flight at a kill or a reboot resumes from its last stored slice
# ("resumed: N of M prompts were stored"). Run it under nice on shared cores:
#
#   nohup nice -n 19 experiments/findings/calibrate.sh run qwen05b-kv75 > /tmp/calibrate.log 2>&1 &
#
# Exit status: 0 done; 1 an evaluation failed; 2 usage; 3 another calibrate.sh
# holds the results database's lock (one run at a time: they share the cores).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
GA_RUN=${GA_RUN:-$root/build/ga-run}
me=calibrate.sh

usage() {
  echo "usage: $0 run|table SET...   (SET: a file prefix here, e.g. qwen05b-kv75)" >&2
  exit 2
}

[ $# -ge 2 ] || usage
action=$1
shift
case "$action" in run | table) ;; *) usage ;; esac

files_of() {
  local set=$1 found=()
  shopt -s nullglob
  found=("$here/$set"-baseline*.yaml)
  shopt -u nullglob
  if [ ${#found[@]} -eq 0 ]; then
    echo "$me: no files $here/$set-baseline*.yaml" >&2
    exit 2
  fi
  printf '%s\n' "${found[@]}" | sort -V
}

# storage.db of a file, resolved as ga-run resolves it (relative to the file).
db_of() {
  local db
  db=$(awk '$1 == "db:" { print $2; exit }' "$1")
  [ -n "$db" ] || { echo "$me: $1 names no storage.db" >&2; exit 2; }
  case "$db" in /*) echo "$db" ;; *) echo "$(dirname "$1")/$db" ;; esac
}

if [ "$action" = run ]; then
  [ -x "$GA_RUN" ] || { echo "$me: $GA_RUN not built (scripts/setup.sh)" >&2; exit 2; }
  for set in "$@"; do
    mapfile -t files < <(files_of "$set")
    [ ${#files[@]} -gt 0 ] || exit 2
    db=$(db_of "${files[0]}")
    mkdir -p "$(dirname "$db")"
    exec 9>>"$db.lock"
    if ! flock -n 9; then
      echo "$me: another calibration holds $db.lock" >&2
      exit 3
    fi
    for f in "${files[@]}"; do
      echo "$me: $(date -u +%FT%TZ) $(basename "$f")"
      start=$SECONDS
      if ! "$GA_RUN" eval "$f" --split heldout; then
        echo "$me: $(basename "$f") failed after $((SECONDS - start)) s; the same command resumes" >&2
        exit 1
      fi
      echo "$me: $(basename "$f") done in $((SECONDS - start)) s"
    done
    exec 9>&-
  done
  echo "$me: $(date -u +%FT%TZ) all done"
  exit 0
fi

for set in "$@"; do
  mapfile -t files < <(files_of "$set")
  [ ${#files[@]} -gt 0 ] || exit 2
  python3 - "$set" "$(db_of "${files[0]}")" "${files[@]}" <<'PY'
import json, math, os, re, sqlite3, sys

set_name, db, files = sys.argv[1], sys.argv[2], sys.argv[3:]

def key(text, name):
    m = re.search(rf"^\s*{name}:\s*([^#\n]+)", text, re.M)
    return m.group(1).strip() if m else None

def wilson(k, n, z=1.959964):
    if n == 0:
        return (0.0, 0.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))

if not os.path.exists(db):
    sys.exit(f"{set_name}: no results yet ({db} does not exist)")
con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
by_pos, tokens, missing, used, models = {}, [], [], [], set()
for path in files:
    text = open(path).read()
    pairs, seed, n = key(text, "pairs"), key(text, "seed"), key(text, "heldout_samples")
    expected = int(n) * len(key(text, "gold_positions").strip("[]").split(","))
    # The slice identity ga-run stores with each evaluation; the baseline's
    # intervention is the empty object. The model is told apart by its
    # identity (name and content hash), which names no file: one database per
    # model, and a file matched under two models is refused below.
    rows = con.execute(
        "SELECT id, model FROM evaluations WHERE intervention = '{}' AND status = 'ok' "
        "AND dataset_slice LIKE ? AND dataset_slice LIKE ? AND dataset_slice LIKE ?",
        ("%datasets-v1;kind=kv;source=generated;%", f"%;chunks={pairs};%;primed=1;%",
         f"%;split=heldout;samples={n};seed={seed};%")).fetchall()
    done = None
    for eid, model in rows:
        models.add(model)
        samples = con.execute("SELECT gold_position, correct, prompt_tokens FROM sample_results "
                              "WHERE evaluation_id = ?", (eid,)).fetchall()
        if len(samples) == expected:  # complete: every item at every position
            done = samples
    if done is None:
        missing.append(os.path.basename(path))
        continue
    used.append(os.path.basename(path))
    for pos, correct, tok in done:
        by_pos.setdefault(pos, []).append(correct)
        if tok:
            tokens.append(tok)

if len(models) > 1:
    sys.exit(f"{set_name}: {db} holds these files' items under {len(models)} models: {sorted(models)}")
if models:
    m = json.loads(next(iter(models)))
    print(f"{set_name}: {m.get('name')} ({m.get('content_hash')})")
print(f"{set_name}: {len(used)} of {len(files)} files evaluated"
      + (f" (missing: {', '.join(missing)})" if missing else "")
      + (f", prompt tokens {min(tokens)}-{max(tokens)} (mean {sum(tokens) / len(tokens):.0f})" if tokens else ""))
if by_pos:
    print(f"{'position':>8} {'correct':>9} {'accuracy':>9}  95 % Wilson")
    for pos in sorted(by_pos):
        k, n = sum(by_pos[pos]), len(by_pos[pos])
        lo, hi = wilson(k, n)
        print(f"{pos:>8g} {f'{k}/{n}':>9} {100 * k / n:>8.1f}%  [{100 * lo:.1f}, {100 * hi:.1f}]")
PY
done
