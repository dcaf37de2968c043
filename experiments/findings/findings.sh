#!/usr/bin/env bash
# The findings on real models, step by step: where a model loses the middle
# of a KV-retrieval prompt (baseline curves), then every method searched
# there with its held-out comparison.
#
#   experiments/findings/findings.sh calibrate SET...      evaluate each SET's baseline files
#   experiments/findings/findings.sh table SET...          pooled baseline accuracy by gold position, 95 % Wilson
#   experiments/findings/findings.sh search SET [METHOD...]  search every method file of SET in turn
#
# Calibration: a SET names SET-baseline*.yaml here (qwen05b-kv75 ->
# qwen05b-kv75-baseline-1.yaml ...). A set's baseline files differ only in
# seed and name, so their held-out items are distinct and pool into one
# curve; each is `ga-run eval FILE --split heldout`.
# Search: SET-<method>.yaml for the methods below, in that order (Ms-PoE
# first: its paper setting's collapse is the open question), or the METHODs
# named; each is `ga-run FILE`: the search, then the held-out rows (best,
# baseline, the paper's default where the method has one).
#
# Every step is its own resume: a finished file is answered from the results
# database in seconds, an interrupted search resumes exactly, and `ga-run
# eval` stores its samples 16 prompts at a time, so a kill or a reboot loses
# at most one slice. The files of a set share a results database, and one
# findings.sh at a time works on it (they would share the cores). Run it
# under nice on shared cores:
#
#   nohup nice -n 10 experiments/findings/findings.sh search qwen05b-kv75 > /tmp/findings.log 2>&1 &
#
# Exit status: 0 done; 1 a step failed; 2 usage; 3 another findings.sh holds
# the results database's lock.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
GA_RUN=${GA_RUN:-$root/build/ga-run}
me=findings.sh
method_order=(mspoe lpes siw caliope phs combo)

usage() {
  echo "usage: $0 calibrate|table SET...  |  $0 search SET [METHOD...]   (SET: a file prefix here, e.g. qwen05b-kv75)" >&2
  exit 2
}

[ $# -ge 2 ] || usage
action=$1
shift
case "$action" in calibrate | table | search) ;; *) usage ;; esac

baseline_files() {
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

# One findings.sh per results database (fd 9 holds the lock until released).
lock_db() {
  local db=$1
  mkdir -p "$(dirname "$db")"
  exec 9>>"$db.lock"
  if ! flock -n 9; then
    echo "$me: another findings.sh holds $db.lock" >&2
    exit 3
  fi
}

# Runs one step; a failure stops the script, naming the step.
step() {
  local file=$1 start=$SECONDS
  shift
  echo "$me: $(date -u +%FT%TZ) $(basename "$file")"
  if ! "$GA_RUN" "$@"; then
    echo "$me: $(basename "$file") failed after $((SECONDS - start)) s; the same command resumes" >&2
    exit 1
  fi
  echo "$me: $(basename "$file") done in $((SECONDS - start)) s"
}

if [ "$action" != table ]; then
  [ -x "$GA_RUN" ] || { echo "$me: $GA_RUN not built (scripts/setup.sh)" >&2; exit 2; }
fi

if [ "$action" = calibrate ]; then
  for set in "$@"; do
    mapfile -t files < <(baseline_files "$set")
    [ ${#files[@]} -gt 0 ] || exit 2
    lock_db "$(db_of "${files[0]}")"
    for f in "${files[@]}"; do step "$f" eval "$f" --split heldout; done
    exec 9>&-
  done
  echo "$me: $(date -u +%FT%TZ) all done"
  exit 0
fi

if [ "$action" = search ]; then
  set_name=$1
  shift
  methods=("$@")
  named=$#
  [ "$named" -gt 0 ] || methods=("${method_order[@]}")
  files=()
  for m in "${methods[@]}"; do
    f="$here/$set_name-$m.yaml"
    if [ -f "$f" ]; then
      files+=("$f")
    elif [ "$named" -gt 0 ]; then
      echo "$me: no file $f" >&2
      exit 2
    fi
  done
  [ ${#files[@]} -gt 0 ] || { echo "$me: no method files $here/$set_name-<method>.yaml" >&2; exit 2; }
  lock_db "$(db_of "${files[0]}")"
  for f in "${files[@]}"; do step "$f" "$f"; done
  echo "$me: $(date -u +%FT%TZ) all done"
  exit 0
fi

for set in "$@"; do
  mapfile -t files < <(baseline_files "$set")
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
    # One count for every position, or one per position ("[30, 100, 30]",
    # stored in the slice identity as "30/100/30").
    counts = [int(c) for c in n.strip("[]").split(",")]
    positions = len(key(text, "gold_positions").strip("[]").split(","))
    expected = sum(counts) if len(counts) > 1 else counts[0] * positions
    n = "/".join(str(c) for c in counts)
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
