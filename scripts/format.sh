#!/usr/bin/env bash
# Formats every C/C++ source of the project with clang-format; with --check,
# changes nothing and fails if a file is not formatted.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
mapfile -t files < <(git ls-files -co --exclude-standard -- '*.h' '*.hpp' '*.c' '*.cpp' |
                     grep -v '^build')
if [[ "${1:-}" == "--check" ]]; then
  clang-format --dry-run -Werror "${files[@]}"
else
  clang-format -i "${files[@]}"
fi
