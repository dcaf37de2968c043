#!/usr/bin/env bash
# A real model onto a lent GPU machine, which has no network and takes at
# most 64 MiB a call (the working tree included): here the cached file is cut
# into parts of 56 MiB under .gpu-carry/ (git ignores it), each call of the
# device tool carries one part, and there the parts are joined into that
# machine's model cache and checked by the sha256 pinned in
# scripts/fetch_real_model.sh, which then finds the file as if it had
# downloaded it. The machine keeps carried files between calls while it
# stays warm (30 s after each), so the parts go in consecutive calls.
#
#   scripts/gpu_carry.sh split NAME   here: NAME's parts, then the list of
#                                     paths to carry, one call each
#   scripts/gpu_carry.sh have NAME    there: which parts arrived, which not
#   scripts/gpu_carry.sh join NAME    there: the parts joined and checked;
#                                     prints the model's path
# NAME: a model of scripts/fetch_real_model.sh (qwen2.5-coder-1.5b: 20 parts,
# qwen2.5-coder-0.5b: 9). A part is named FILE.part-NN-of-MM, so each one
# says how many make the whole.
# Exit status: 0 done; 1 a part is missing or the joined file is not the
# pinned one (the message says which); 2 usage.
set -euo pipefail
cd "$(dirname "$0")/.."
me=gpu_carry
PART_BYTES=$((56 * 1024 * 1024))  # with the ~5 MB working tree, under the 64 MiB a call carries
CACHE_DIR="${MIDTUNE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/midtune}"

usage() {
  echo "usage: scripts/gpu_carry.sh split|have|join NAME   (NAME: a model of scripts/fetch_real_model.sh)" >&2
  exit 2
}
[ $# -eq 2 ] || usage
action=$1 name=$2
# GPU_CARRY_DIR: elsewhere than .gpu-carry/ (a test's scratch folder).
dir=${GPU_CARRY_DIR:-.gpu-carry}/$name

# The parts present, sorted; sets total (MM of the names) and file (FILE).
parts=() total=0 file=""
scan() {
  shopt -s nullglob
  parts=("$dir"/*.part-*-of-*)
  shopt -u nullglob
  [ ${#parts[@]} -gt 0 ] || { echo "$me: no parts of $name in $dir" >&2; exit 1; }
  mapfile -t parts < <(printf '%s\n' "${parts[@]}" | sort)
  local first
  first=$(basename "${parts[0]}")
  total=$((10#${first##*-of-}))
  file=${first%.part-*}
}

# The part numbers from 0 to total-1 that are not there, space-separated.
missing() {
  local n out=""
  for ((n = 0; n < total; n++)); do
    [ -f "$dir/$file.part-$(printf %02d "$n")-of-$(printf %02d "$total")" ] || out+=" $n"
  done
  echo "${out# }"
}

case "$action" in
  split)
    model=$(scripts/fetch_real_model.sh "$name")
    size=$(stat -c %s "$model")
    total=$(((size + PART_BYTES - 1) / PART_BYTES))
    file=$(basename "$model")
    rm -rf "$dir"
    mkdir -p "$dir"
    split -b "$PART_BYTES" -d -a 2 "$model" "$dir/$file.part-"
    for part in "$dir/$file".part-??; do mv "$part" "$part-of-$(printf %02d "$total")"; done
    echo "$me: $file ($size bytes) in $total parts under $dir/; carry one a call:" >&2
    ls -1 "$dir"/*.part-*-of-* | sort
    ;;
  have)
    scan
    gaps=$(missing)
    echo "$me: $name: $((total - $(wc -w <<<"$gaps"))) of $total parts here${gaps:+; missing: $gaps}"
    ;;
  join)
    scan
    gaps=$(missing)
    if [ -n "$gaps" ]; then
      echo "$me: $name: parts $gaps of $total have not arrived (carry them: $dir/)" >&2
      exit 1
    fi
    mkdir -p "$CACHE_DIR"
    # Beside the cache, then one rename: the file appears whole or not at all.
    cat "${parts[@]}" >"$CACHE_DIR/.$file.joining"
    mv "$CACHE_DIR/.$file.joining" "$CACHE_DIR/$file"
    scripts/fetch_real_model.sh --cached "$name"
    ;;
  *) usage ;;
esac
