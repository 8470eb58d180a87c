#!/usr/bin/env bash
# Runs clang-tidy (configuration in .clang-tidy) over the project's sources
# (core, apps, plugins) using the compile database of a configured build
# directory.
#
# In a unity build (CMAKE_UNITY_BUILD=ON, as scripts/common.sh configures),
# clang-tidy runs once per unity source, which #includes a batch of the
# project's .cpp files: the standard and third-party headers are parsed and
# matched once per batch instead of once per file, and every diagnostic in
# an included .cpp is reported (HeaderFilterRegex covers them). Two checks
# look only at the main file of a translation unit, misc-unused-using-decls
# and misc-unused-alias-decls, so they run once more per file, over the files
# that hold a using-declaration or a namespace alias, the only ones where
# they can fire. Every source must be covered by one of the two passes.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
jobs="${TESSERA_JOBS:-$(nproc)}"
cd "$root"
mapfile -t sources < <(git ls-files -co --exclude-standard -- 'core/*.cpp' 'apps/*.cpp' \
                       'plugins/*.cpp' | grep -v '^build')
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The compile database for clang-tidy: the build's entries plus, for each
# source inside a unity batch, its own entry (the batch's command with the
# source in place of the batch: CMake batches only sources with the same
# flags). Lists the translation units of each pass.
python3 - "$build/compile_commands.json" "$work" "$root" "${sources[@]}" <<'PY'
import json, os, re, sys
db_path, work, root, sources = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
wanted = {os.path.join(root, s): s for s in sources}
db = json.load(open(db_path))
covered, batches, own = set(), [], []
extra = []
for entry in db:
    path = os.path.join(entry["directory"], entry["file"])
    if path in wanted:
        own.append(path)
        covered.add(path)
    elif "/Unity/unity_" in path:
        included = re.findall(r'^#include "([^"]+)"', open(path).read(), re.M)
        mine = [f for f in included if f in wanted]
        if not mine:
            continue
        batches.append(path)
        for f in mine:
            covered.add(f)
            e = dict(entry)
            e["file"] = f
            if "command" in e:
                e["command"] = e["command"].replace(entry["file"], f)
            else:
                e["arguments"] = [f if a == entry["file"] else a for a in e["arguments"]]
            e.pop("output", None)
            extra.append(e)
missing = sorted(wanted[f] for f in set(wanted) - covered)
if missing:
    more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
    sys.exit(f"tidy.sh: {len(missing)} source(s) not in the compile database of {db_path} "
             f"(configure that build of this checkout first): {', '.join(missing[:5])}{more}")
json.dump(db + extra, open(os.path.join(work, "compile_commands.json"), "w"))
# A using-declaration (using a::b, using typename a::b, using ::b) or a
# namespace alias.
main_file_only = re.compile(r"\busing\s+(typename\s+)?[\w:]*::|\bnamespace\s+\w+\s*=")
# run-clang-tidy selects files by regular expression: match each one exactly.
def write(name, paths):
    with open(os.path.join(work, name), "w") as out:
        out.write("".join("^" + re.escape(p) + "$\n" for p in paths))
write("pass1", batches + own)
write("pass2", [f for f in sorted(covered - set(own)) if main_file_only.search(open(f).read())])
PY

# The project's configuration for every unit, wherever the build directory
# (and so each unity source) is.
config="$(<"$root/.clang-tidy")"
run() {  # run LIST [run-clang-tidy args...]
  local list="$work/$1"
  shift
  mapfile -t units < "$list"
  ((${#units[@]} == 0)) && return 0
  run-clang-tidy -quiet -p "$work" -j "$jobs" -config "$config" "$@" "${units[@]}" 2>&1 |
    grep -v '^[0-9]* warnings\? generated\.$' || return "${PIPESTATUS[0]}"
}
status=0
run pass1 || status=$?
run pass2 -checks='-*,misc-unused-using-decls,misc-unused-alias-decls' || status=$?
exit "$status"
