#!/usr/bin/env bash
# Runs clang-tidy (configuration in .clang-tidy) over the project's sources
# using the compile database of a configured build directory.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
cd "$root"
mapfile -t files < <(git ls-files -co --exclude-standard -- 'core/*.cpp' 'apps/*.cpp' \
                     'plugins/*.cpp' | grep -v '^build')
run-clang-tidy -quiet -p "$build" -j "$(nproc)" "${files[@]}"
