# The carried Debian packages (scripts/fetch_gpu_debs.sh) on a lent GPU
# machine, which has a CUDA toolkit, CMake and a compiler but not midtune's
# libraries and no network. Source it, then:
#   gpu_deps_unpack DEB_DIR   unpack them into a prefix (never into /: that
#                             would replace the machine's own sqlite, zlib,
#                             pcre2) and export the variables below
#   gpu_deps_env              only export the variables (a later call on the
#                             same machine, the prefix already there)
#   gpu_configure             configure build-gpu/ for the GPU at hand
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
  gpu_deps_env
}

gpu_configure() {
  # CMake 4 refuses packages that still ask for CMake < 3.5 compatibility.
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=native \
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5 >build-gpu.configure.log 2>&1 || { cat build-gpu.configure.log; return 1; }
}
