#!/usr/bin/env bash
# Shared set-up for the top-level scripts: checks the Debian packages the
# build needs (installing them with apt when run as root), configures and
# builds the project into $TESSERA_BUILD_DIR (default: build), and times each
# phase of the script that sources it.
set -euo pipefail

TESSERA_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TESSERA_BUILD_DIR="${TESSERA_BUILD_DIR:-$TESSERA_ROOT/build}"
TESSERA_JOBS="${TESSERA_JOBS:-$(nproc)}"

# Debian 12 packages: toolchain, the libraries Tessera builds on, clang +
# libc++ for the out-of-tree SDK test, and clang's sanitizer runtimes for the
# sanitizer builds of scripts/test.sh.
TESSERA_PACKAGES=(
  cmake ninja-build g++ make pkg-config file binutils python3
  libopenblas-dev libboost-dev libtomlplusplus-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libc++-dev libc++abi-dev libclang-rt-14-dev clang-format clang-tidy
  libopenmpi-dev openmpi-bin
  libgloo-dev libhiredis-dev redis-server
)

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

# Phase timing. `phase NAME` ends the phase in progress and starts NAME; when
# the script exits, every phase's wall time and the total are printed (the
# phase in progress is marked FAILED if the script exits non-zero), so a run's
# log always ends with where its time went.
_tessera_phase_names=()
_tessera_phase_us=()
_tessera_phase_name=""
_tessera_phase_start=0
_tessera_run_start="${EPOCHREALTIME//[.,]/}"
_tessera_now_us() { printf '%s' "${EPOCHREALTIME//[.,]/}"; }
_tessera_phase_close() {
  if [[ -n "$_tessera_phase_name" ]]; then
    _tessera_phase_names+=("$_tessera_phase_name")
    _tessera_phase_us+=($(($(_tessera_now_us) - _tessera_phase_start)))
    _tessera_phase_name=""
  fi
}
phase() {
  _tessera_phase_close
  _tessera_phase_name="$1"
  _tessera_phase_start="$(_tessera_now_us)"
  log "$1"
}
_tessera_seconds() { printf '%d.%d' $(($1 / 1000000)) $(($1 % 1000000 / 100000)); }
_tessera_phase_summary() {
  local rc=$? failed="" i
  [[ $rc -ne 0 ]] && failed="$_tessera_phase_name"
  _tessera_phase_close
  ((${#_tessera_phase_names[@]} == 0)) && return "$rc"
  local total=$(($(_tessera_now_us) - _tessera_run_start))
  printf '\033[1m==> wall time per phase\033[0m\n' >&2
  for i in "${!_tessera_phase_names[@]}"; do
    printf '  %-52s %8s s%s\n' "${_tessera_phase_names[$i]}" \
      "$(_tessera_seconds "${_tessera_phase_us[$i]}")" \
      "$([[ -n "$failed" && $i -eq $((${#_tessera_phase_names[@]} - 1)) ]] && echo '  FAILED')" >&2
  done
  printf '  %-52s %8s s (%d min %02d s)\n' "total" "$(_tessera_seconds "$total")" \
    $((total / 60000000)) $((total / 1000000 % 60)) >&2
  return "$rc"
}
trap _tessera_phase_summary EXIT

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

# configure BUILD_DIR [extra cmake args...]
# Ninja, RelWithDebInfo with line tables only (-g1: enough for backtraces,
# sanitizer reports and perf, and much cheaper to compile than full -g), and
# unity builds: each target's sources are compiled in batches, so the
# standard and third-party headers are parsed and their templates compiled
# once per batch instead of once per file (see docs/testing.md). Extra
# arguments come last and can override any of these.
configure() {
  local dir="$1"
  shift
  cmake -S "$TESSERA_ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
    -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=0 "$@"
}

# build BUILD_DIR [targets...]   (default: every target)
build() {
  local dir="$1"
  shift
  local targets=()
  (($# > 0)) && targets=(--target "$@")
  cmake --build "$dir" -j "$TESSERA_JOBS" "${targets[@]}"
}
