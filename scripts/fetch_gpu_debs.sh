#!/usr/bin/env bash
# Downloads (does not install) the Debian packages midtune builds and runs
# against, for a GPU machine that has a CUDA toolkit, CMake and a compiler but
# not these libraries and no network (scripts/gpu_suite.sh unpacks them into
# a prefix there). Run here, on a Debian machine with apt:
#   scripts/fetch_gpu_debs.sh DEST_DIR      (23 packages, ~7 MB; with the headers below ~10 MB)
# Besides the -dev packages of scripts/setup.sh, the shared libraries they
# link to: oneTBB's CMake files name libtbbbind, and cpp-httplib's pkg-config
# file requires brotli.
# Also cudnn-frontend's headers (DEST_DIR/cudnn-frontend/include, 3 MB), for
# the cuDNN attention body against the GPU machine's own cuDNN.
set -euo pipefail
dest=${1:?usage: scripts/fetch_gpu_debs.sh DEST_DIR}
frontend=$("$(dirname "$0")"/fetch_cudnn_frontend.sh)
mkdir -p "$dest"
cd "$dest"
rm -rf cudnn-frontend
mkdir -p cudnn-frontend
cp -r "$frontend" cudnn-frontend/include
[ -n "$(ls /var/lib/apt/lists 2>/dev/null | grep -v lock)" ] || apt-get update -q >/dev/null
apt-get download -q \
  libeigen3-dev libtbb-dev libtbb12 libtbbmalloc2 libtbbbind-2-5 nlohmann-json3-dev \
  libsqlite3-dev libsqlite3-0 sqlite3 libreadline8 libcli11-dev libgtest-dev libgmock-dev \
  libyaml-cpp-dev 'libyaml-cpp0.*' libcpp-httplib-dev 'libcpp-httplib0.*' libbrotli-dev libbrotli1 \
  libxxhash-dev libxxhash0 zlib1g-dev libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 \
  2>&1 | grep -v 'Download is performed unsandboxed' || true
echo "$(ls -1 ./*.deb | wc -l) packages, $(du -sh . | cut -f1) in $dest"
