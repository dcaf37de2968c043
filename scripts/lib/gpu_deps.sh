# The carried Debian packages (scripts/fetch_gpu_debs.sh) on a lent GPU
# machine, which has a CUDA toolkit, CMake and a compiler but not midtune's
# libraries and no network. Source it, then:
#   gpu_deps_unpack DEB_DIR   unpack them into a prefix (never into /: that
#                             would replace the machine's own sqlite, zlib,
#                             pcre2) and export the variables below
#   gpu_deps_env              only export the variables (a later call on the
#                             same machine, the prefix already there)
#   gpu_configure [--no-cudnn] configure build-gpu/ for the GPU at hand (with
#                             cuDNN's attention where gpu_cudnn_args finds it)
gpu_deps_prefix=/opt/midtune-deps

gpu_deps_env() {
  local lib=$gpu_deps_prefix/usr/lib/x86_64-linux-gnu
  export CMAKE_PREFIX_PATH=$gpu_deps_prefix/usr:$lib/cmake PKG_CONFIG_SYSROOT_DIR=$gpu_deps_prefix
  export PKG_CONFIG_PATH=$lib/pkgconfig:$gpu_deps_prefix/usr/share/pkgconfig LD_LIBRARY_PATH=$lib
  # sqlite3 for bench/mpi_engine.sh
  export CPATH=$gpu_deps_prefix/usr/include LIBRARY_PATH=$lib PATH=$PATH:$gpu_deps_prefix/usr/bin
}

gpu_deps_unpack() {
  local f
  mkdir -p "$gpu_deps_prefix"
  for f in "$1"/*.deb; do dpkg -x "$f" "$gpu_deps_prefix"; done
  if [ -d "$1/cudnn-frontend" ]; then
    rm -rf "$gpu_deps_prefix/cudnn-frontend"
    cp -r "$1/cudnn-frontend" "$gpu_deps_prefix/cudnn-frontend"
  fi
  gpu_deps_env
}

# cuDNN's attention body: cuDNN from the machine's PyTorch environment (the
# nvidia-cudnn-cu13 wheel: include/, lib/libcudnn.so.9), cudnn-frontend's
# headers carried with the packages. Prints CMake's arguments (none where
# either is missing: the build keeps the flash body); the programs find the
# library by the run path CMake gives them.
gpu_cudnn_args() {
  local frontend=$gpu_deps_prefix/cudnn-frontend/include site library
  [ -f "$frontend/cudnn_frontend.h" ] || return 0
  site=$(python3 -c 'import nvidia.cudnn as c; print(list(c.__path__)[0])' 2>/dev/null) || return 0
  library=$(ls "$site"/lib/libcudnn.so* 2>/dev/null | head -1)
  [ -f "$site/include/cudnn.h" ] && [ -n "$library" ] || return 0
  echo "-DMIDTUNE_CUDNN_FRONTEND_DIR=$frontend -DCUDNN_INCLUDE_DIR=$site/include -DCUDNN_LIBRARY=$library"
}

gpu_configure() {
  local cudnn=-DMIDTUNE_CUDNN=OFF found
  # --no-cudnn: the findings runs, which use the flash body and must not
  # wait on a build against cuDNN headers of another version. (Said either
  # way: the tree's cache keeps the last value.)
  if [ "${1:-}" != --no-cudnn ]; then
    found=$(gpu_cudnn_args)
    [ -z "$found" ] || cudnn="-DMIDTUNE_CUDNN=ON $found"
  fi
  # CMake 4 refuses packages that still ask for CMake < 3.5 compatibility.
  # shellcheck disable=SC2086 # the cuDNN arguments are words without spaces
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=native \
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5 $cudnn >build-gpu.configure.log 2>&1 || { cat build-gpu.configure.log; return 1; }
  grep 'midtune: cuDNN\|midtune: no cuDNN' build-gpu.configure.log || true
}
