#!/usr/bin/env bash
# The GPU tests of a build, taken to a machine with a GPU that lacks the
# build's dependencies (a GPU node with only the driver, the CUDA Toolkit and
# NCCL; no Debian packages, no network).
#
#   scripts/gpu_bundle.sh pack BUILD_DIR BUNDLE.tar.gz
#       On the build machine: packs into BUNDLE.tar.gz the CLI, the plugins and
#       the test executables that label `gpu` and the CUDA emulation run
#       (stripped of debug information), the build tree's CTest files, and
#       every shared library they load that is not part of the C/C++
#       runtime, CUDA or NCCL (toml++, spdlog, fmt, hiredis, Gloo, OpenBLAS,
#       ...): about 21 MB. The mpi backend is left out: it needs Open MPI's
#       runtime.
#
#   scripts/gpu_bundle.sh run BUNDLE.tar.gz OUT_DIR [CTEST_ARGS...]
#       On the GPU machine, from a checkout of the same commit: unpacks the
#       bundle into a new temporary directory, makes the build and source
#       paths the tests were built with point at it and at this checkout
#       (symbolic links; an existing path other than those is an error),
#       puts the bundled libraries, NCCL's and CUDA's on
#       the loader's path, checks that every bundled program finds its
#       libraries, then runs the CUDA emulation tests and `ctest -L gpu`
#       (or CTEST_ARGS), each into a log in OUT_DIR. Exits non-zero when a
#       check or a test fails.
#
#   scripts/gpu_bundle.sh exec BUNDLE.tar.gz COMMAND [ARGS...]
#       The same set-up, then COMMAND with the bundle's programs on PATH
#       (`tessera train benchmarks/gpt_step.toml --set run.device='"cuda"'`).
#
# NCCL is looked for in the loader's cache, then in the Python package
# nvidia-nccl-cu13 (PyTorch's), then under CUDA_HOME (default /usr/local/cuda);
# TESSERA_NCCL_LIB_DIR overrides the search.
set -euo pipefail

die() {
  echo "gpu_bundle.sh: $*" >&2
  exit 1
}

# Programs the bundle carries: the CLI, the ranks the launched tests start,
# and the test executables of label gpu and of the emulation.
programs=(tessera tessera_conformance_rank tessera_core_cuda_tests tessera_nccl_gpu_tests
          tessera_multiprocess_tests tessera_cuda_emulation_tests)
# Libraries the GPU machine brings: the C and C++ runtimes, CUDA, NCCL.
system_libs='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia-)[.-]'

# The ELF files (programs and libraries) under a directory.
elf_files() {
  find "$1" -type f \( -name '*.so' -o -perm -u+x \) -print | while read -r f; do
    [[ $(head -c 4 "$f" | od -An -c | tr -d ' ') == 177ELF ]] && echo "$f"
  done
  return 0
}

pack() {
  local build=$1 tarball=$2
  [[ -f $build/CMakeCache.txt ]] || die "$build is not a configured build directory"
  build=$(cd "$build" && pwd -P)
  local source
  source=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
  [[ -n $source ]] || die "$build/CMakeCache.txt names no source directory"
  local p
  for p in "${programs[@]}"; do
    [[ -x $build/bin/$p ]] || die "$build/bin/$p is missing (build it, and configure with CUDA and NCCL)"
  done
  [[ $tarball == *.tar.gz ]] || die "the bundle's name must end in .tar.gz, got $tarball"
  pack_work=$(mktemp -d)
  trap 'rm -rf "$pack_work"' EXIT
  local bundle=$pack_work/bundle
  mkdir -p "$bundle/build/bin" "$bundle/deps"
  printf '%s\n%s\n' "$build" "$source" >"$bundle/paths"
  for p in "${programs[@]}"; do
    strip --strip-debug -o "$bundle/build/bin/$p" "$build/bin/$p"
  done
  # The plugins and the CUDA units' library, the mpi backend left out.
  (cd "$build" && find lib -name '*.so' ! -name 'libtessera_backend_mpi.so') |
    while read -r f; do
      mkdir -p "$bundle/build/$(dirname "$f")"
      strip --strip-debug -o "$bundle/build/$f" "$build/$f"
    done
  # CTest's files, so that ctest runs in the bundled tree as in the build.
  (cd "$build" && find . \( -name CTestTestfile.cmake -o -name '*_tests.cmake' \
    -o -name '*_include.cmake' \) -print) |
    while read -r f; do
      mkdir -p "$bundle/build/$(dirname "$f")"
      cp "$build/$f" "$bundle/build/$f"
    done
  # Every library a bundled ELF file loads, except what the GPU machine has.
  elf_files "$bundle/build" | while read -r f; do
    ldd "$f" | awk '$3 ~ /^\// { print $1, $3 }'
  done | sort -u | while read -r name path; do
      [[ $name =~ $system_libs ]] && continue
      [[ -e $bundle/deps/$name ]] || cp -L "$path" "$bundle/deps/$name"
    done
  tar czf "$tarball" -C "$pack_work" bundle
  echo "packed $build into $tarball ($(du -h "$tarball" | cut -f1)), with"
  echo "  $(ls "$bundle/deps" | wc -l) libraries: $(ls "$bundle/deps" | tr '\n' ' ')"
}

nccl_lib_dir() {
  if [[ -n ${TESSERA_NCCL_LIB_DIR:-} ]]; then
    echo "$TESSERA_NCCL_LIB_DIR"
    return
  fi
  local found
  found=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 / { print $NF; exit }')
  if [[ -n $found ]]; then
    dirname "$found"
    return
  fi
  found=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' \
    2>/dev/null || true)
  if [[ -n $found && -e $found/libnccl.so.2 ]]; then
    echo "$found"
    return
  fi
  echo "${CUDA_HOME:-/usr/local/cuda}/lib64"
}

# link PATH TARGET: PATH becomes a symbolic link to TARGET; a link there
# already is replaced, anything else is an error.
link() {
  local path=$1 target=$2
  if [[ -L $path ]]; then
    rm "$path"
  elif [[ -e $path ]]; then
    die "$path exists and is not a symbolic link; run where that path is free"
  fi
  mkdir -p "$(dirname "$path")"
  ln -s "$target" "$path"
}

# setup BUNDLE.tar.gz: unpacks the bundle into a new temporary directory,
# links the build's and the source's paths to it and to this checkout, and
# exports LD_LIBRARY_PATH and PATH for its programs; sets `bundle` and
# `build`. Fails when a bundled program does not find a library.
setup() {
  local tarball=$1
  [[ -f $tarball ]] || die "$tarball does not exist"
  bundle=$(mktemp -d)/bundle
  tar xzf "$tarball" -C "$(dirname "$bundle")"
  [[ -f $bundle/paths ]] || die "$tarball is not a bundle made by 'gpu_bundle.sh pack'"
  local root source
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
  build=$(sed -n 1p "$bundle/paths")
  source=$(sed -n 2p "$bundle/paths")
  link "$build" "$bundle/build"
  [[ $source == "$root" ]] || link "$source" "$root"
  local nccl cuda=${CUDA_HOME:-/usr/local/cuda}
  nccl=$(nccl_lib_dir)
  export LD_LIBRARY_PATH="$bundle/deps:$nccl:$cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PATH="$build/bin:$PATH"
  echo "bundle: $bundle (built at $build from $source); NCCL: $nccl; CUDA: $cuda"
  local missing
  missing=$(elf_files "$bundle/build" | while read -r f; do
    ldd "$f" | awk -v f="$f" '/not found/ { print f ": " $1 }'
  done)
  [[ -z $missing ]] || die "libraries not found:"$'\n'"$missing"
}

run() {
  local tarball=$1 out=$2
  shift 2
  setup "$tarball"
  mkdir -p "$out"
  {
    nvidia-smi -L 2>&1 || true
    tessera plugins 2>&1
  } >"$out/environment.log"
  local status=0
  echo "== CUDA emulation tests"
  tessera_cuda_emulation_tests >"$out/emulation.log" 2>&1 || status=1
  tail -n 3 "$out/emulation.log"
  local args=("$@")
  ((${#args[@]} > 0)) || args=(-L gpu)
  echo "== ctest ${args[*]}"
  (cd "$build" && ctest --output-on-failure --timeout 300 "${args[@]}") >"$out/ctest.log" 2>&1 ||
    status=1
  grep -E 'tests passed|tests failed|\*\*\*|Failed|Skipped' "$out/ctest.log" | tail -n 20 || true
  return "$status"
}

case "${1:-}" in
  pack)
    [[ $# -eq 3 ]] || die "usage: $0 pack BUILD_DIR BUNDLE.tar.gz"
    pack "$2" "$3"
    ;;
  run)
    [[ $# -ge 3 ]] || die "usage: $0 run BUNDLE.tar.gz OUT_DIR [CTEST_ARGS...]"
    run "$2" "$3" "${@:4}"
    ;;
  exec)
    [[ $# -ge 3 ]] || die "usage: $0 exec BUNDLE.tar.gz COMMAND [ARGS...]"
    setup "$2"
    exec "${@:3}"
    ;;
  *)
    die "usage: $0 pack BUILD_DIR BUNDLE.tar.gz | run BUNDLE.tar.gz OUT_DIR [CTEST_ARGS...] |" \
      "exec BUNDLE.tar.gz COMMAND [ARGS...]"
    ;;
esac
