# Wall-clock time per phase for scripts/setup.sh and scripts/test.sh, so a
# CI log shows where its minutes went. Source it, then
#
#   phase "release build"     starts a phase (ending the one before)
#   slowest_tests LOG 10      the ten slowest tests in ctest's output LOG
#
# The table goes to stderr when the script exits, also after a failure (the
# phase it was in is marked). Nothing here changes what the scripts do.
phases_script=$(basename "$0")
phases_names=()
phases_seconds=()
phases_current=""
phases_started=$SECONDS
phases_began=$SECONDS

phase_end() {
  [ -n "$phases_current" ] || return 0
  phases_names+=("$phases_current")
  phases_seconds+=($((SECONDS - phases_started)))
  phases_current=""
}

phase() {
  phase_end
  phases_current=$1
  phases_started=$SECONDS
  echo "$phases_script: phase: $1" >&2
}

phases_report() {
  local status=$? open=$phases_current i
  phase_end
  {
    echo "== $phases_script: time per phase (exit $status)"
    for i in "${!phases_names[@]}"; do
      if [ "${phases_names[$i]}" = "$open" ] && [ "$status" != 0 ]; then
        printf '%7d s  %s (failed here)\n' "${phases_seconds[$i]}" "${phases_names[$i]}"
      else
        printf '%7d s  %s\n' "${phases_seconds[$i]}" "${phases_names[$i]}"
      fi
    done
    printf '%7d s  total\n' $((SECONDS - phases_began))
  } >&2
  return "$status"
}
trap phases_report EXIT

# The N slowest tests in a saved ctest console output (ctest -j keeps no
# per-test times in its own log).
slowest_tests() {
  [ -f "$1" ] || return 0
  echo "== $phases_script: the $2 slowest tests" >&2
  sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+).* ([0-9.]+) sec$/\2 \1/p' "$1" |
    sort -rn | awk -v n="$2" 'NR <= n { printf "%8.1f s  %s\n", $1, $2 }' >&2 || true
}
