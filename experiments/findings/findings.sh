#!/usr/bin/env bash
# The findings on real models, step by step: where a model loses the middle
# of a KV-retrieval prompt (baseline curves), then every method searched
# there with its held-out comparison.
#
#   experiments/findings/findings.sh calibrate [--device cpu|cuda] SET...
#                                                           evaluate each SET's baseline files
#                                                           (--device: on this device, not the files')
#   experiments/findings/findings.sh table [--svg F] [--pick] SET...
#                                                           pooled baseline accuracy by gold position, 95 % Wilson
#                                                           (files still running: their samples so far, apart)
#                                                           (--svg: every set's curve drawn in one plot;
#                                                           --pick: then the first SET, in the order given,
#                                                           whose middle is lost: "pick: SET", exit 1 if none)
#   experiments/findings/findings.sh check [--device cpu|cuda] INTERVENTION.json SET
#                                                           one intervention on SET's baseline items (every gold
#                                                           position), paired item by item with the baseline curve
#   experiments/findings/findings.sh search [--keep-going] [--device cpu|cuda] SET [METHOD...]
#                                                           search every method file of SET in turn
#                                                           (--keep-going: past a method that fails; exit 1 at the end;
#                                                           --device: on this device, which a resume must name again)
#
# Calibration: a SET names SET-baseline*.yaml here (qwen05b-kv75 ->
# qwen05b-kv75-baseline-1.yaml ...). A set's baseline files differ only in
# seed and name, so their held-out items are distinct and pool into one
# curve; each is `ga-run eval FILE --split heldout`, on generated KV
# pairs, a Lost-in-the-Middle KV file, or its NQ questions (kind: mdqa).
# Check: a method's searches and held-out rows see gold 0, 0.5 and 1 only;
# its setting on the calibration's five positions shows what it does
# between them (`ga-run eval FILE --split heldout --intervention`, stored
# like the baseline's), pooled over the set's files: per position the two
# counts, the items only one answers, the exact McNemar p and, on
# teacher-forced sets, the mean paired change of the gold log-probability
# (95 % bootstrap interval). A setting given without its default fields
# pairs with the full form ga-run stored.
# Search: SET-<method>.yaml for the methods below, in that order (Ms-PoE
# first: its paper setting's collapse is the open question), or the METHODs
# named; each is `ga-run FILE`: the search, then the held-out rows (best,
# baseline, the paper's default where the method has one).
#
# After each set's calibration, each method's search and each check, the
# results database is copied to snapshots/DB-after-SET.db,
# DB-after-METHOD.db or DB-after-check-NAME-HASH.db (NAME the setting's
# file, HASH its content's) beside it and the copy's sha256 printed: a
# row's figures come from that copy and its sha256 is what
# bench/RESULTS.md records. A snapshot already there is kept, never
# overwritten.
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
method_order=(mspoe lpes siw caliope phs combo temperature selfextend string)

usage() {
  echo "usage: $0 calibrate [--device cpu|cuda] SET...  |  $0 table [--svg FILE] [--pick] SET...  |  $0 check [--device cpu|cuda] INTERVENTION.json SET  |  $0 search [--keep-going] [--device cpu|cuda] SET [METHOD...]   (SET: a file prefix here, e.g. qwen05b-kv75)" >&2
  exit 2
}

[ $# -ge 2 ] || usage
action=$1
shift
case "$action" in calibrate | table | check | search) ;; *) usage ;; esac

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
# Call it as db=$(db_of FILE) || exit 2: its exit leaves only the subshell.
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

# Runs one step; a failure stops the script, naming the step (with
# --keep-going it is counted, the step returns 1 and the next one runs).
keep_going=false
failed_steps=()
step() {
  local file=$1 start=$SECONDS
  shift
  echo "$me: $(date -u +%FT%TZ) $(basename "$file")"
  if ! "$GA_RUN" "$@"; then
    echo "$me: $(basename "$file") failed after $((SECONDS - start)) s; the same command resumes" >&2
    $keep_going || exit 1
    failed_steps+=("$(basename "$file")")
    return 1
  fi
  echo "$me: $(basename "$file") done in $((SECONDS - start)) s"
}

# A copy of the results database as a step left it, whose sha256 goes beside
# the step's figures in bench/RESULTS.md: the live file keeps growing as
# later steps run. A snapshot already there is kept, as a recorded row names
# it; a new one is written under another name first, so an interrupted copy
# is never taken for one.
snapshot() {
  local db=$1 tag=$2 dir out
  dir="$(dirname "$db")/snapshots"
  out="$dir/$(basename "$db" .db)-after-$tag.db"
  mkdir -p "$dir"
  if [ -e "$out" ]; then
    echo "$me: snapshot $out kept: sha256 $(sha256sum "$out" | cut -d' ' -f1)"
    return 0
  fi
  rm -f "$out.partial"
  # SQLite's backup: a plain copy of a file in WAL mode can miss its last commits.
  if ! python3 -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))' \
    "$db" "$out.partial" || ! mv "$out.partial" "$out"; then
    echo "$me: could not copy $db to $out" >&2
    return 1
  fi
  echo "$me: snapshot $out: sha256 $(sha256sum "$out" | cut -d' ' -f1)"
}

if [ "$action" != table ]; then
  [ -x "$GA_RUN" ] || { echo "$me: $GA_RUN not built (scripts/setup.sh)" >&2; exit 2; }
fi

# --device DEV (calibrate, search): the files' engine on this device.
device=()
take_device() {
  [ $# -ge 3 ] || usage
  device=(--device "$2")
}

if [ "$action" = calibrate ]; then
  if [ "$1" = --device ]; then
    take_device "$@"
    shift 2
  fi
  for set in "$@"; do
    mapfile -t files < <(baseline_files "$set")
    [ ${#files[@]} -gt 0 ] || exit 2
    db=$(db_of "${files[0]}") || exit 2
    lock_db "$db"
    for f in "${files[@]}"; do step "$f" eval "$f" --split heldout "${device[@]}"; done
    snapshot "$db" "$set" || exit 1
    exec 9>&-
  done
  echo "$me: $(date -u +%FT%TZ) all done"
  exit 0
fi

if [ "$action" = check ]; then
  if [ "${1:-}" = --device ]; then
    take_device "$@"
    shift 2
  fi
  [ $# -eq 2 ] || usage
  intervention=$1 set=$2
  [ -f "$intervention" ] || { echo "$me: no intervention file $intervention" >&2; exit 2; }
  mapfile -t files < <(baseline_files "$set")
  [ ${#files[@]} -gt 0 ] || exit 2
  db=$(db_of "${files[0]}") || exit 2
  lock_db "$db"
  for f in "${files[@]}"; do step "$f" eval "$f" --split heldout --intervention "$intervention" "${device[@]}"; done
  # The check's rows come from this copy: named by the setting's file and
  # its content, so a changed file under the same name gets its own.
  snapshot "$db" "check-$(basename "$intervention" .json)-$(sha256sum <"$intervention" | cut -c1-8)" || exit 1
  exec 9>&-
  PYTHONPATH="$here" python3 - "$db" "$intervention" "${files[@]}" <<'PY'
import json, math, os, random, sqlite3, sys

from baseline_slice import heldout_slice

db, intervention_path, files = sys.argv[1], sys.argv[2], sys.argv[3:]
wanted = json.load(open(intervention_path))


def mcnemar(b, c):
    """Exact two-sided McNemar p over the discordant pairs."""
    n, k = b + c, min(b, c)
    return 1.0 if n == 0 else min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)


def mean_interval(diffs, resamples=2000):
    """Mean of paired differences and its 95 % percentile bootstrap interval
    (a fixed seed: the same rows print the same interval)."""
    rng = random.Random(2027)
    means = sorted(sum(rng.choices(diffs, k=len(diffs))) / len(diffs) for _ in range(resamples))
    return sum(diffs) / len(diffs), means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]


def covers(stored, given):
    """Every field the file gives, the stored intervention has with that value
    (ga-run stores the canonical form: the fields a file leaves out at
    their defaults, e.g. Ms-PoE's seed)."""
    if isinstance(given, dict):
        return isinstance(stored, dict) and all(k in stored and covers(stored[k], v) for k, v in given.items())
    return stored == given


con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
pairs = {}  # position -> [(baseline correct, intervention correct, baseline gold log-p, intervention's)]
for path in files:
    patterns, _ = heldout_slice(path)
    latest, forms = {}, set()
    for eid, iv in con.execute(
            "SELECT id, intervention FROM evaluations WHERE status = 'ok' AND dataset_slice LIKE ? "
            "AND dataset_slice LIKE ? AND dataset_slice LIKE ? ORDER BY id", patterns):
        stored = json.loads(iv)
        if stored == {}:
            latest["baseline"] = eid  # the latest evaluation of each
        elif covers(stored, wanted):
            latest["intervention"] = eid
            forms.add(iv)
    if len(forms) > 1:
        sys.exit(f"{os.path.basename(path)}: {intervention_path} matches {len(forms)} stored interventions "
                 f"({'; '.join(sorted(forms))}): give every field, as `ga-run eval` prints it after 'intervention:'")
    if len(latest) < 2:
        sys.exit(f"{os.path.basename(path)}: no {' and no '.join(r for r in ('baseline', 'intervention') if r not in latest)} "
                 f"evaluation in {db} (calibrate the set first)")
    rows = {role: dict((sid, (pos, c, lp)) for sid, pos, c, lp in con.execute(
        "SELECT sample_id, gold_position, correct, gold_logprob FROM sample_results WHERE evaluation_id = ?", (eid,)))
        for role, eid in latest.items()}
    for sid, (pos, c, lp) in rows["baseline"].items():
        if sid in rows["intervention"]:
            _, ci, lpi = rows["intervention"][sid]
            pairs.setdefault(pos, []).append((c, ci, lp, lpi))

shown = json.loads(next(iter(forms))) if forms else wanted  # as stored: every field
print(f"check: {json.dumps(shown, sort_keys=True)} against the baseline, item by item ({len(files)} files)")
# Teacher-forced sets store each item's gold log-probability: its paired
# change tells settings apart where neither answers (generated answers
# have none, and the column is left out).
graded = any(lp is not None and lpi is not None for v in pairs.values() for *_, lp, lpi in v)
print(f"{'position':>8} {'baseline':>9} {'with it':>9} {'change':>8} {'only it/only base':>18} {'McNemar p':>10}"
      + (f"  {'gold log-p change [95 %]':>27}" if graded else ""))
middle_b = middle_i = middle_n = 0
middle_diffs = []
for pos in sorted(pairs):
    v = pairs[pos]
    n, kb, ki = len(v), sum(b for b, *_ in v), sum(i for _, i, *_ in v)
    only_i, only_b = sum(1 for b, i, *_ in v if i and not b), sum(1 for b, i, *_ in v if b and not i)
    line = (f"{pos:>8g} {f'{kb}/{n}':>9} {f'{ki}/{n}':>9} {100 * (ki - kb) / n:>+7.1f}  {f'{only_i}/{only_b}':>18} "
            f"{mcnemar(only_i, only_b):>10.3g}")
    diffs = [lpi - lp for *_, lp, lpi in v if lp is not None and lpi is not None]
    if graded and diffs:
        line += "  {:>+9.2f} [{:+.2f}, {:+.2f}]".format(*mean_interval(diffs)).rjust(29)
    print(line)
    if 0 < pos < 1:
        middle_b, middle_i, middle_n = middle_b + kb, middle_i + ki, middle_n + n
        middle_diffs += diffs
if middle_n:
    print(f"between the ends: {middle_i}/{middle_n} with it, {middle_b}/{middle_n} without"
          + (", gold log-p change {:+.2f} [{:+.2f}, {:+.2f}] nats".format(*mean_interval(middle_diffs))
             if middle_diffs else ""))
PY
  exit $?
fi

if [ "$action" = search ]; then
  while :; do
    case "$1" in
      --keep-going) keep_going=true; shift ;;
      --device) take_device "$@"; shift 2 ;;
      *) break ;;
    esac
    [ $# -ge 1 ] || usage
  done
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
  db=$(db_of "${files[0]}") || exit 2
  lock_db "$db"
  for f in "${files[@]}"; do
    m=$(basename "$f" .yaml)
    if step "$f" "$f" "${device[@]}"; then snapshot "$db" "${m#"$set_name"-}" || exit 1; fi
  done
  if [ ${#failed_steps[@]} -gt 0 ]; then
    echo "$me: $(date -u +%FT%TZ) done, but these failed: ${failed_steps[*]}" >&2
    exit 1
  fi
  echo "$me: $(date -u +%FT%TZ) all done"
  exit 0
fi

# table [--svg FILE] [--pick] SET...: every set's pooled curve, optionally drawn.
svg=()
if [ "${1:-}" = --svg ]; then
  [ $# -ge 3 ] || usage
  svg=(--svg "$2")
  shift 2
fi
pick=()
if [ "${1:-}" = --pick ]; then
  [ $# -ge 2 ] || usage
  pick=(--pick)
  shift
fi
groups=()
for set in "$@"; do
  mapfile -t files < <(baseline_files "$set")
  [ ${#files[@]} -gt 0 ] || exit 2
  db=$(db_of "${files[0]}") || exit 2
  groups+=("$set" "$db" "${#files[@]}" "${files[@]}")
done
PYTHONPATH="$here" python3 - "${svg[@]}" "${pick[@]}" "${groups[@]}" <<'PY'
import json, math, os, sqlite3, sys

from baseline_slice import heldout_slice


def wilson(k, n, z=1.959964):
    if n == 0:
        return (0.0, 0.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


def write_svg(path, curves):
    """Accuracy by gold position, one line per set, 95 % Wilson bars."""
    w, h, left, right, top, bottom = 560, 340, 60, 150, 20, 50
    pw, ph = w - left - right, h - top - bottom
    x = lambda p: left + p * pw
    y = lambda a: top + (1 - a) * ph
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>']
    for a in range(0, 101, 20):
        out.append(f'<line x1="{left}" y1="{y(a / 100):.1f}" x2="{left + pw}" y2="{y(a / 100):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y(a / 100) + 4:.1f}" text-anchor="end">{a}</text>')
    for p in (0, 0.25, 0.5, 0.75, 1):
        out.append(f'<text x="{x(p):.1f}" y="{top + ph + 18}" text-anchor="middle">{p:g}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{h - 8}" text-anchor="middle">gold position (fraction of the pairs)</text>')
    out.append(f'<text transform="rotate(-90)" x="{-(top + ph / 2)}" y="16" text-anchor="middle">accuracy %</text>')
    for i, (name, by_pos) in enumerate(curves):
        c = colours[i % len(colours)]
        pts = []
        for pos in sorted(by_pos):
            k, n = sum(by_pos[pos]), len(by_pos[pos])
            lo, hi = wilson(k, n)
            pts.append(f"{x(pos):.1f},{y(k / n):.1f}")
            out.append(f'<line x1="{x(pos):.1f}" y1="{y(lo):.1f}" x2="{x(pos):.1f}" y2="{y(hi):.1f}" stroke="{c}"/>')
            out.append(f'<circle cx="{x(pos):.1f}" cy="{y(k / n):.1f}" r="3" fill="{c}"><title>{name} {pos:g}: {k}/{n}</title></circle>')
        out.append(f'<polyline points="{" ".join(pts)}" fill="none" stroke="{c}" stroke-width="2"/>')
        n_items = min(len(v) for v in by_pos.values())
        out.append(f'<text x="{left + pw + 10}" y="{top + 16 + 18 * i}" fill="{c}">{name} (n ≥ {n_items} a position)</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")

def curve(set_name, db, files):
    if not os.path.exists(db):
        print(f"{set_name}: no results yet ({db} does not exist)")
        return None
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    by_pos, tokens, missing, used, models, precisions = {}, [], [], [], set(), set()
    so_far, so_far_count = {}, [0, 0]  # the unfinished files' samples stored so far
    for path in files:
        patterns, expected = heldout_slice(path)
        # The baseline's intervention is the empty object. The model is told
        # apart by its identity's name and content hash, which name no file:
        # one database per model, and a file matched under two models is
        # refused below. The same weights run on another device or precision
        # (a CPU calibration, then a GPU's) are one model: a file's latest
        # complete evaluation counts.
        rows = con.execute(
            "SELECT id, model FROM evaluations WHERE intervention = '{}' AND status = 'ok' "
            "AND dataset_slice LIKE ? AND dataset_slice LIKE ? AND dataset_slice LIKE ? ORDER BY id",
            patterns).fetchall()
        done, begun = None, []
        for eid, model in rows:
            m = json.loads(model)
            models.add((m.get("name"), m.get("content_hash")))
            samples = con.execute("SELECT gold_position, correct, prompt_tokens FROM sample_results "
                                  "WHERE evaluation_id = ?", (eid,)).fetchall()
            if len(samples) == expected:  # complete: every item at every position
                done, precision = samples, m.get("precision", "native")
            elif len(samples) > len(begun):  # an evaluation under way (or stopped)
                begun = samples
        if done is None:
            missing.append(os.path.basename(path))
            for pos, correct, _ in begun:
                so_far.setdefault(pos, []).append(correct)
            so_far_count[0] += len(begun)
            so_far_count[1] += expected
            continue
        used.append(os.path.basename(path))
        precisions.add(precision)
        for pos, correct, tok in done:
            by_pos.setdefault(pos, []).append(correct)
            if tok:
                tokens.append(tok)

    complete = not missing and bool(by_pos)
    if len(models) > 1:
        sys.exit(f"{set_name}: {db} holds these files' items under {len(models)} models: {sorted(models)}")
    if models:
        name, content_hash = next(iter(models))
        shown = f"; precision {', '.join(sorted(precisions))}" if precisions else ""
        print(f"{set_name}: {name} ({content_hash}{shown})")
    print(f"{set_name}: {len(used)} of {len(files)} files evaluated"
          + (f" (missing: {', '.join(missing)})" if missing else "")
          + (f", prompt tokens {min(tokens)}-{max(tokens)} (mean {sum(tokens) / len(tokens):.0f})" if tokens else ""))
    def table(counts):
        print(f"{'position':>8} {'correct':>9} {'accuracy':>9}  95 % Wilson")
        for pos in sorted(counts):
            k, n = sum(counts[pos]), len(counts[pos])
            lo, hi = wilson(k, n)
            print(f"{pos:>8g} {f'{k}/{n}':>9} {100 * k / n:>8.1f}%  [{100 * lo:.1f}, {100 * hi:.1f}]")
    if by_pos:
        table(by_pos)
    if so_far:
        # A look at a long calibration while it runs; never drawn or picked.
        print(f"{set_name}: so far, unfinished files: {so_far_count[0]} of {so_far_count[1]} prompts "
              "(not part of the curve)")
        table(so_far)
    return by_pos, complete


def middle_is_lost(by_pos):
    """The setting a search needs: the middle (the position nearest 0.5) at
    70 % or less and at least 15 points under the better end, with room to
    improve."""
    acc = {pos: 100 * sum(v) / len(v) for pos, v in by_pos.items()}
    middle = acc[min(acc, key=lambda pos: abs(pos - 0.5))]
    better_end = max(acc[min(acc)], acc[max(acc)])
    return middle <= 70 and better_end - middle >= 15


# argv: [--svg FILE] [--pick] then, per set, "SET DB N FILE..." groups.
args = sys.argv[1:]
svg = None
if args[:1] == ["--svg"]:
    svg, args = args[1], args[2:]
pick = args[:1] == ["--pick"]
if pick:
    args = args[1:]
curves, lost = [], []
while args:
    set_name, db, n = args[0], args[1], int(args[2])
    files, args = args[3:3 + n], args[3 + n:]
    result = curve(set_name, db, files)
    if result and result[0]:
        curves.append((set_name, result[0]))
        if result[1] and middle_is_lost(result[0]):
            lost.append(set_name)
if svg:
    write_svg(svg, curves)
    print(f"plot: {svg}")
if pick:
    # The first set given whose every file is evaluated and whose middle is lost.
    print(f"pick: {lost[0] if lost else 'none'}")
    sys.exit(0 if lost else 1)
PY
