#!/usr/bin/env bash
# Shared set-up for the top-level scripts: checks the Debian packages the
# build needs (installing them with apt when run as root), then configures and
# builds the project into $TESSERA_BUILD_DIR (default: build).
set -euo pipefail

TESSERA_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TESSERA_BUILD_DIR="${TESSERA_BUILD_DIR:-$TESSERA_ROOT/build}"
TESSERA_JOBS="${TESSERA_JOBS:-$(nproc)}"

# Debian 12 packages: toolchain, the libraries Tessera builds on, and clang +
# libc++ for the out-of-tree SDK test.
TESSERA_PACKAGES=(
  cmake ninja-build g++ make pkg-config file binutils python3
  libopenblas-dev libboost-dev libtomlplusplus-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libc++-dev libc++abi-dev clang-format clang-tidy
  libopenmpi-dev openmpi-bin
  libgloo-dev libhiredis-dev redis-server
)

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

install_dependencies() {
  local missing=()
  local pkg
  for pkg in "${TESSERA_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$pkg")
    fi
  done
  if ((${#missing[@]} == 0)); then
    log "all build dependencies are installed"
    return 0
  fi
  if [[ $(id -u) -eq 0 ]]; then
    log "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
  else
    echo "tessera: missing Debian packages; install them as root with:" >&2
    echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
}

# configure_and_build BUILD_DIR [extra cmake args...]
configure_and_build() {
  local dir="$1"
  shift
  log "configuring $dir"
  cmake -S "$TESSERA_ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
  log "building $dir"
  cmake --build "$dir" -j "$TESSERA_JOBS"
}
