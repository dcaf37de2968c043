#!/usr/bin/env bash
# Fetch cudnn-frontend, the header-only C++ API over cuDNN's graph backend
# that the GPU engine's cuDNN attention body is written against: the
# nvidia-cudnn-frontend wheel from PyPI (pinned version and sha256), of which
# only include/ is kept. Prints the include folder on stdout; a second run
# downloads nothing. Only builds with CUDA and cuDNN use it (CMake looks for
# it in the same cache: MIDTUNE_CUDNN_FRONTEND_DIR).
set -euo pipefail

me=fetch_cudnn_frontend
CACHE_DIR="${MIDTUNE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/midtune}"
VERSION=1.32.0
# One wheel of the release, named exactly: its headers are those of every
# wheel of it (the wheels differ only in their Python module).
WHEEL="nvidia_cudnn_frontend-$VERSION-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
WHEEL_SHA256="c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0"
DIR="$CACHE_DIR/cudnn-frontend-$VERSION"

if [ -f "$DIR/.complete" ]; then
  echo "$DIR/include"
  exit 0
fi
mkdir -p "$CACHE_DIR"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "$me: downloading nvidia-cudnn-frontend==$VERSION from PyPI" >&2
if ! python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary :all: \
  --python-version 3.11 --platform manylinux_2_28_x86_64 "nvidia-cudnn-frontend==$VERSION" -d "$tmp" >&2; then
  echo "$me: pip could not download nvidia-cudnn-frontend==$VERSION (network, or PyPI)" >&2
  exit 1
fi
if [ ! -f "$tmp/$WHEEL" ]; then
  echo "$me: pip downloaded $(ls "$tmp"), not $WHEEL" >&2
  exit 1
fi
got=$(sha256sum "$tmp/$WHEEL" | cut -d' ' -f1)
if [ "$got" != "$WHEEL_SHA256" ]; then
  echo "$me: $WHEEL: sha256 $got, expected $WHEEL_SHA256" >&2
  exit 1
fi
rm -rf "$DIR.part"
mkdir -p "$DIR.part"
python3 - "$tmp/$WHEEL" "$DIR.part" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    members = [m for m in wheel.namelist() if m.startswith("include/")]
    if not any(m == "include/cudnn_frontend.h" for m in members):
        sys.exit("fetch_cudnn_frontend: the wheel holds no include/cudnn_frontend.h")
    wheel.extractall(sys.argv[2], members)
PY
touch "$DIR.part/.complete"
rm -rf "$DIR"
mv "$DIR.part" "$DIR"
echo "$DIR/include"
