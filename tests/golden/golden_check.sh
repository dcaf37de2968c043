#!/usr/bin/env bash
# Golden check for changes that must not change behaviour (refactorings):
# runs the quickstart and small searches of every method (tests/golden/
# experiments: PHS, Ms-PoE, CALIOPE, LPES+SIW) with a `before` and an `after`
# ga-run, each into a fresh database, and compares the databases fact by fact
# (tests/golden/compare_results.py): same individuals, fitness values,
# per-sample results and held-out table, bit for bit.
#
#   tests/golden/golden_check.sh BEFORE AFTER
#     BEFORE, AFTER: a ga-run binary, or a git revision to build one from
#     (built in a temporary worktree, release, ga-run only). AFTER defaults
#     to build/ga-run.
#   GOLDEN_DIR=/some/dir keeps the databases there (default: a temp dir).
#   LOGPROB_TOLERANCE=1e-3 lets per-sample gold log-probabilities differ by
#   that much (float-order changes); every other fact must match exactly.
#
# A change that reorders float arithmetic on purpose (SIW's key-0 correction
# moved out of the attention kernel) cannot be bit-identical: the int8
# activation path turns last-digit differences into whole quantisation steps.
# tests/golden/rounding_floor.py measures, on one build, how far results move
# under a 1e-6 relative change of a parameter; differences between the builds
# within that floor are rounding, not behaviour.
#
# Needs the test model (scripts/fetch_model.sh). Takes about 5 minutes per
# side on 2 cores. Results depend on the CPU's instruction set (AVX2 and
# AVX-512 kernels round differently), so both sides run on this machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
[ $# -ge 1 ] || { sed -n 2,25p "$0"; exit 2; }
work=${GOLDEN_DIR:-$(mktemp -d)}
mkdir -p "$work"
# Worktrees made for revisions are unregistered again on exit.
trap 'for w in "$work"/src-*; do [ -d "$w" ] && git worktree remove --force "$w" 2>/dev/null; done; true' EXIT

# A ga-run binary for $1 (a path to one, or a revision to build).
binary_for() {
  local what=$1 label=$2
  if [ -x "$what" ] && [ -f "$what" ]; then
    realpath "$what"
    return
  fi
  local rev src
  rev=$(git rev-parse --verify "$what^{commit}") || { echo "golden_check: '$what' is neither a binary nor a revision" >&2; exit 2; }
  src="$work/src-$label"
  if [ ! -d "$src" ]; then
    git worktree add --detach "$src" "$rev" >&2
  fi
  cmake -S "$src" -B "$src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMIDTUNE_BUILD_TESTS=OFF >/dev/null
  cmake --build "$src/build" --target ga-run >&2
  echo "$src/build/ga-run"
}

before=$(binary_for "$1" before)
after=$(binary_for "${2:-build/ga-run}" after)
echo "before: $before"
echo "after:  $after"

experiments=(experiments/quickstart.yaml tests/golden/experiments/*.yaml)
status=0
for side in before after; do
  bin=${!side}
  rm -f "$work/$side.db"*
  for experiment in "${experiments[@]}"; do
    echo "[$side] $experiment" >&2
    "$bin" "$root/$experiment" --db "$work/$side.db" >"$work/$side-$(basename "$experiment" .yaml).log" 2>&1 \
      || { echo "golden_check: $side failed on $experiment (log: $work/$side-$(basename "$experiment" .yaml).log)"; exit 1; }
  done
done
python3 tests/golden/compare_results.py ${LOGPROB_TOLERANCE:+--logprob-tolerance "$LOGPROB_TOLERANCE"} \
  "$work/before.db" "$work/after.db" || status=1
echo "databases: $work/before.db $work/after.db"
exit $status
