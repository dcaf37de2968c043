#!/usr/bin/env bash
# The findings' runs on a lent GPU machine (docs/findings.md "On a GPU" has
# the sequence of calls). A session gets ~15 minutes of such a machine, in
# calls of at most 10 minutes that each carry at most 64 MiB, and the
# machine keeps what a call left (files, a process started with setsid) for
# 30 s after it: the build starts in the background in the first call, the
# model arrives a part a call (scripts/gpu_carry.sh) while it compiles, and
# the runs go in the last calls. Every step resumes, so a call that runs out
# of time loses nothing stored; after each step the results files and the
# log are copied to $OUT, which comes back even from a call cut off.
#
#   scripts/gpu_findings.sh build DEB_DIR   unpack the packages (scripts/fetch_gpu_debs.sh),
#                                           configure build-gpu/ and start building ga-run
#                                           in the background; returns at once
#   scripts/gpu_findings.sh status          the build's state and the carried parts
#   scripts/gpu_findings.sh run STEP...     wait for the build, join the carried models,
#                                           run the steps in order
# STEP:
#   calibrate:SET          findings.sh calibrate SET (the baseline curve)
#   search:SET             findings.sh search --keep-going SET: every method,
#                          also past one that fails (one the GPU cannot run)
#   pick:SET,SET...        the first of those sets whose middle is lost
#                          (findings.sh table --pick), then search:SET of it
# The 1.5B's plan: run calibrate:qwen15b-kv75 calibrate:qwen15b-kv140
#                      pick:qwen15b-kv75,qwen15b-kv140 calibrate:qwen15b-kv50
# Exit status: 0 every step done; 1 a step or the build failed; 2 usage.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/gpu_deps.sh
me=gpu_findings
out=${OUT:-.}
state=build-gpu/findings-build.state  # running, ok or failed
build_log=build-gpu/findings-build.log
log=$out/gpu_findings.log
findings=experiments/findings/findings.sh

usage() {
  sed -n '/^#   scripts\/gpu_findings.sh build/,/^# Exit status/p' "$0" >&2
  exit 2
}

# The results files into $OUT (the log is written there): each database
# through SQLite's backup (a plain copy of a file in WAL mode can miss its
# last commits).
save() {
  local db
  for db in results/findings/*.db; do
    [ -f "$db" ] || continue
    python3 -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))' \
      "$db" "$out/$(basename "$db")" || echo "$me: could not copy $db to $out" >&2
  done
  # findings.sh's snapshots (each written once, after its step) as they are.
  if compgen -G 'results/findings/snapshots/*.db' >/dev/null; then
    mkdir -p "$out/snapshots"
    cp -p results/findings/snapshots/*.db "$out/snapshots/" || echo "$me: could not copy the snapshots to $out" >&2
  fi
}

wait_for_build() {
  while [ "$(cat "$state" 2>/dev/null)" = running ]; do sleep 5; done
  if [ "$(cat "$state" 2>/dev/null)" != ok ]; then
    echo "$me: the build $(cat "$state" 2>/dev/null || echo 'was never started (gpu_findings.sh build)')" >&2
    tail -30 "$build_log" 2>/dev/null >&2
    return 1
  fi
}

# Every model whose parts were carried, joined into the cache once.
join_models() {
  local dir name
  for dir in .gpu-carry/*/; do
    [ -d "$dir" ] || continue
    name=$(basename "$dir")
    scripts/fetch_real_model.sh --cached "$name" >/dev/null 2>&1 && continue
    scripts/gpu_carry.sh join "$name" || return 1
  done
}

case "${1:-}" in
  build)
    [ $# -eq 2 ] || usage
    gpu_deps_unpack "$2"
    mkdir -p build-gpu
    gpu_configure --no-cudnn || exit 1
    echo running >"$state"
    # setsid: the build outlives this call, and the next calls carry the
    # model's parts while it compiles.
    setsid bash -c "cmake --build build-gpu -j\$(nproc) --target ga-run >'$build_log' 2>&1 \
      && echo ok >'$state' || echo 'failed (see $build_log)' >'$state'" </dev/null >/dev/null 2>&1 &
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null
    echo "$me: building ga-run in the background (build-gpu/, log $build_log)"
    ;;
  status)
    echo "$me: build $(cat "$state" 2>/dev/null || echo 'not started'): $(tail -n 1 "$build_log" 2>/dev/null)"
    for dir in .gpu-carry/*/; do [ -d "$dir" ] && scripts/gpu_carry.sh have "$(basename "$dir")"; done
    ;;
  run)
    shift
    [ $# -gt 0 ] || usage
    gpu_deps_env
    {
      wait_for_build || exit 1
      join_models || exit 1
      build-gpu/ga-run devices
      export GA_RUN=$PWD/build-gpu/ga-run
      # Also every minute: a call cut off at its limit brings back what was
      # stored up to a minute before, not only up to the last finished step.
      (while sleep 60; do save; done) >>"$log" 2>&1 &  # not into the pipe: tee would wait for it
      saver=$!
      trap 'kill $saver 2>/dev/null' EXIT
      failed=0
      for step in "$@"; do
        what=${step%%:*} arg=${step#*:}
        echo "$me: $(date -u +%FT%TZ) $step"
        case "$what" in
          calibrate) $findings calibrate "$arg" || failed=1 ;;
          search) $findings search --keep-going "$arg" || failed=1 ;;
          pick)
            # shellcheck disable=SC2086 # the sets, comma-separated
            set_name=$($findings table --pick ${arg//,/ } | tee /dev/stderr | awk '/^pick: / { print $2 }')
            if [ -z "$set_name" ] || [ "$set_name" = none ]; then
              echo "$me: no set of $arg loses the middle (or one is not calibrated yet): nothing to search"
            else
              $findings search --keep-going "$set_name" || failed=1
            fi
            ;;
          *) echo "$me: unknown step '$step' (calibrate:SET, search:SET, pick:SET,SET...)"; failed=1 ;;
        esac
        save
      done
      echo "$me: $(date -u +%FT%TZ) $([ $failed = 0 ] && echo 'all steps done' || echo 'a step FAILED, see above')"
      exit $failed
    } 2>&1 | tee -a "$log"
    exit "${PIPESTATUS[0]}"
    ;;
  *) usage ;;
esac
