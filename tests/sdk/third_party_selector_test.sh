#!/usr/bin/env bash
# End-to-end test of a selector plugin built outside the tree: installs the
# whole project into a fresh prefix, builds examples/third_party_selector
# (the memory-first selector `frugal`) against that prefix with clang++ and
# libc++, twice: as `frugal`, and with FRUGAL_REPLACE_AUTO=ON as `auto`.
# Checks both plugins' ELF, then, through the INSTALLED tessera CLI on the
# example's config (4 in-memory ranks):
#   - `plugins --describe frugal` shows its options;
#   - `select --selector frugal` chooses, among the candidates that fit, the
#     one with the least memory per rank (fewest bytes sent on a tie), and
#     gives every candidate a reason;
#   - `train` with strategy "auto" and selector "frugal" trains under that
#     choice and logs it;
#   - the `auto` build, on --plugin-path or TESSERA_PLUGIN_PATH, replaces
#     the built-in `auto`: `select` without --selector runs the example's
#     policy, while without that directory the built-in one runs;
#   - a budget nothing fits exits 1 with a message listing every need.
#
# Usage: third_party_selector_test.sh <tessera build dir> <example source dir>
#            <work dir> <cmake generator>
# Every step prints what it does; the first failing check stops the test with
# a message naming the step and showing the evidence.
set -euo pipefail

if [[ $# -lt 4 ]]; then
  echo "usage: $0 BUILD_DIR EXAMPLE_DIR WORK_DIR GENERATOR" >&2
  exit 2
fi
build_dir=$1
example_dir=$2
work=$3
generator=$4

sdk_test_label="sdk selector test"
# shellcheck source=tests/sdk/sdk_test_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/sdk_test_lib.sh"

fresh_work_dir "$work"
prefix=$work/prefix
frugal_dir=$work/frugal.d
replace_dir=$work/replace-auto.d
config=$example_dir/frugal.toml
tessera=$prefix/bin/tessera
# Short runs with no output files: the config's own paths are not written.
short=(--set run.steps=4 --set run.log_every=1 --set optimizer.warmup_steps=0
  --set run.metrics= --set checkpoint.dir=)

step a "install the project into a fresh prefix"
install_project "$build_dir" "$prefix" "$work/install.log" "$tessera" \
  "$prefix/include/tessera/sdk/selector.hpp" "$prefix/include/tessera/c/selector.h" \
  "$prefix/lib/tessera/plugins/libtessera_selector_auto.so" \
  "$prefix/lib/tessera/plugins/libtessera_strategy_zero3.so" \
  "$prefix/lib/tessera/plugins/libtessera_backend_inmemory.so"

# build_example NAME DEST_DIR [cmake args...]: configures and builds the
# example with clang++/libc++ and -Werror into $work/NAME-build, and copies
# the plugin into DEST_DIR.
build_example() {
  local name=$1 dest=$2
  shift 2
  local dir=$work/$name-build
  CC=clang CXX=clang++ run_logged "$work/$name-configure.log" \
    cmake -S "$example_dir" -B "$dir" -G "$generator" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS=-stdlib=libc++ \
    -DCMAKE_PREFIX_PATH="$prefix" -DFRUGAL_WERROR=ON "$@"
  local cache=$dir/CMakeCache.txt
  grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++' "$cache" ||
    fail "$name was not configured with clang++: $(grep '^CMAKE_CXX_COMPILER:' "$cache")"
  grep -qx "Tessera_DIR:PATH=$package_dir" "$cache" ||
    fail "find_package(Tessera) did not use the fresh prefix: $(grep '^Tessera_DIR' "$cache")"
  run_logged "$work/$name-build.log" cmake --build "$dir" -j2
  local built=$dir/libtessera_selector_$name.so
  [[ -f $built ]] || fail "the build produced no $(basename "$built")" "$work/$name-build.log"
  mkdir -p "$dest"
  cp "$built" "$dest/"

  local needed exports
  needed=$(readelf -d "$built" | grep NEEDED || true)
  grep -q 'libc++\.so\.1' <<<"$needed" || fail "$name does not need libc++.so.1: $needed"
  if grep -q 'libstdc++' <<<"$needed"; then fail "$name needs libstdc++"; fi
  exports=$(nm -D --defined-only "$built" | awk '{print $NF}')
  [[ $exports == "tessera_plugin_entry" ]] ||
    fail "$name must export only tessera_plugin_entry, it exports: $(tr '\n' ' ' <<<"$exports")"
  echo "$(basename "$built"): links libc++, exports only tessera_plugin_entry"
}

step b "build the example with clang++ and libc++, as frugal and as auto (FRUGAL_REPLACE_AUTO=ON)"
command -v clang++ >/dev/null || fail "clang++ is not installed (Debian: clang, libc++-dev, libc++abi-dev)"
build_example frugal "$frugal_dir"
build_example auto "$replace_dir" -DFRUGAL_REPLACE_AUTO=ON

step c "the installed CLI describes frugal's options"
run_logged "$work/describe.log" "$tessera" plugins --plugin-path "$frugal_dir" --describe frugal
cat "$work/describe.log"
grep -Eq '^ *headroom +float +0\.2 +fraction of the memory budget' "$work/describe.log" ||
  fail "--describe does not show headroom (float, default 0.2, help)" "$work/describe.log"
grep -Eq '^ *without_prefetch +bool +true ' "$work/describe.log" ||
  fail "--describe does not show without_prefetch (bool, default true)" "$work/describe.log"

# run_json OUT CMD...: runs a command with its stdout (the JSON) in OUT and
# its stderr (log lines, e.g. the duplicate warning) in OUT.err.
run_json() {
  local out=$1
  shift
  echo "+ $*"
  local status=0
  "$@" >"$out" 2>"$out.err" || status=$?
  [[ $status -eq 0 ]] || fail "command failed (exit $status): $*" "$out.err"
}

# check_choice JSON SELECTOR: the ranking's chosen row fits and needs the
# least memory per rank of the rows that fit (fewest bytes sent on a tie);
# every row has a reason; prints the chosen label ("zero3 {prefetch = false}").
check_choice() {
  python3 - "$@" <<'PY'
import json, sys
path, selector = sys.argv[1], sys.argv[2]
s = json.load(open(path))
if s["selector"] != selector:
    sys.exit(f"selector is {s['selector']!r}, expected {selector!r}")
rows = s["candidates"]
chosen = [r for r in rows if r["chosen"]]
if len(chosen) != 1 or rows[s["chosen"]] is not chosen[0]:
    sys.exit(f"expected exactly one chosen row at index {s['chosen']}")
c = chosen[0]
fit = [r for r in rows if r["fits"]]
if not c["fits"]:
    sys.exit(f"the chosen row does not fit: {c}")
key = lambda r: (r["memory"]["total"], r["bytes_per_step"])
best = min(fit, key=key)
if key(c) != key(best):
    sys.exit(f"chose {c['strategy']} {c['options']!r} with {key(c)}, but "
             f"{best['strategy']} {best['options']!r} needs {key(best)}")
if not c["reason"].startswith("least memory per rank: needs "):
    sys.exit(f"the chosen row's reason is not frugal's: {c['reason']!r}")
for r in rows:
    if not r["reason"]:
        sys.exit(f"{r['strategy']} {r['options']!r} has no reason")
over = [r for r in rows if "memory" in r and not r["fits"]]
for r in over:
    if " per rank > " not in r["reason"]:
        sys.exit(f"{r['strategy']} is over the budget but says {r['reason']!r}")
for r in fit:
    if r is not c and not any(w in r["reason"] for w in ("than the choice", "more per step",
                                                         "ties with the choice")):
        sys.exit(f"{r['strategy']} fits but its reason does not compare: {r['reason']!r}")
print(f"{len(rows)} candidates, {len(fit)} fit, {len(over)} over the budget; chosen "
      f"{c['strategy']} {c['options']!r}: {c['memory']['total']} bytes per rank", file=sys.stderr)
print(c["strategy"] + (" {" + c["options"] + "}" if c["options"] else ""))
PY
}

step d "tessera select --selector frugal chooses the least memory per rank among the fitting"
run_json "$work/select.json" "$tessera" select "$config" --plugin-path "$frugal_dir" \
  --selector frugal --json
choice=$(check_choice "$work/select.json" frugal 2>"$work/select-check.log") ||
  fail "the ranking is not frugal's: $(cat "$work/select-check.log")" "$work/select.json"
cat "$work/select-check.log"
# A budget between the leanest and the heaviest estimate: some candidates
# are over it, and the choice stays.
budget=$(python3 -c '
import json, sys
totals = [r["memory"]["total"] for r in json.load(open(sys.argv[1]))["candidates"] if "memory" in r]
print(int((min(totals) + max(totals)) / 2 / 0.8) + 1)' "$work/select.json")
run_json "$work/select-tight.json" "$tessera" select "$config" --plugin-path "$frugal_dir" \
  --memory-per-rank "$budget" --json
tight=$(check_choice "$work/select-tight.json" frugal 2>"$work/select-tight-check.log") ||
  fail "with a budget of $budget bytes: $(cat "$work/select-tight-check.log")" "$work/select-tight.json"
cat "$work/select-tight-check.log"
if grep -q ' 0 over the budget' "$work/select-tight-check.log"; then
  fail "a budget of $budget bytes left no candidate over it"
fi
[[ $tight == "$choice" ]] || fail "with a budget of $budget bytes frugal chose $tight, not $choice"
run_logged "$work/select.txt" "$tessera" select "$config" --plugin-path "$frugal_dir"
cat "$work/select.txt"
grep -Fqx "chosen: $choice" "$work/select.txt" ||
  fail "the config's own [strategy.options] selector = \"frugal\" did not give $choice" \
    "$work/select.txt"

step e "tessera train with strategy auto and selector frugal trains under the choice"
run_logged "$work/train.log" "$tessera" train "$example_dir/../quickstart.toml" \
  --plugin-path "$frugal_dir" --set strategy.name=auto \
  --set 'strategy.options.selector="frugal"' --set run.memory_per_rank='"64MiB"' "${short[@]}"
grep -F "strategy auto: selector 'frugal' chose $choice on 4 ranks" "$work/train.log" ||
  fail "the run log does not name frugal's choice ($choice)" "$work/train.log"
grep -Eq 'final loss [0-9]' "$work/train.log" || fail "the run did not finish" "$work/train.log"
grep -o 'final loss [0-9.]*' "$work/train.log"

step f "the auto build on the plugin path replaces the built-in auto"
# A configuration that says strategy "auto" and nothing else: the quick start.
plain=("$example_dir/../quickstart.toml" --set strategy.name=auto --memory-per-rank 64MiB)
run_logged "$work/builtin.txt" "$tessera" select "${plain[@]}"
grep -q "^# selector 'auto'" "$work/builtin.txt" || fail "no selector 'auto' header" "$work/builtin.txt"
if grep -q 'least memory per rank' "$work/builtin.txt"; then
  fail "without the replacement the built-in auto should run" "$work/builtin.txt"
fi
run_logged "$work/replaced.txt" "$tessera" select "${plain[@]}" --plugin-path "$replace_dir"
cat "$work/replaced.txt"
grep -q "^# selector 'auto'" "$work/replaced.txt" || fail "no selector 'auto' header" "$work/replaced.txt"
grep -q 'least memory per rank: needs ' "$work/replaced.txt" ||
  fail "--plugin-path did not replace auto: frugal's reasons are missing" "$work/replaced.txt"
grep -Fq "libtessera_selector_auto.so rejected: duplicate of $replace_dir/libtessera_selector_auto.so" \
  "$work/replaced.txt" || fail "the built-in auto is not reported as a duplicate" "$work/replaced.txt"
run_json "$work/replaced.json" "$tessera" select "${plain[@]}" --plugin-path "$replace_dir" --json
replaced=$(check_choice "$work/replaced.json" auto 2>"$work/replaced-check.log") ||
  fail "the replacement's ranking is not frugal's: $(cat "$work/replaced-check.log")" \
    "$work/replaced.json"
[[ $replaced == "$choice" ]] || fail "the replacement chose $replaced, frugal chose $choice"
run_json "$work/replaced-env.json" env TESSERA_PLUGIN_PATH="$replace_dir" \
  "$tessera" select "${plain[@]}" --json
check_choice "$work/replaced-env.json" auto >/dev/null 2>"$work/replaced-env-check.log" ||
  fail "TESSERA_PLUGIN_PATH did not replace auto: $(cat "$work/replaced-env-check.log")" \
    "$work/replaced-env.json"
run_logged "$work/replaced-describe.log" "$tessera" plugins --plugin-path "$replace_dir" \
  --describe auto
grep -q 'examples/third_party_selector' "$work/replaced-describe.log" ||
  fail "--describe auto does not show the example's summary" "$work/replaced-describe.log"
echo "selector 'auto' from $replace_dir chose $replaced, with frugal's reasons"

step g "a budget nothing fits exits 1 and lists every candidate's need"
status=0
"$tessera" select "$config" --plugin-path "$frugal_dir" --memory-per-rank 1KiB \
  >"$work/nofit.log" 2>&1 || status=$?
cat "$work/nofit.log"
[[ $status -eq 1 ]] || fail "expected exit code 1, got $status" "$work/nofit.log"
grep -Fq "frugal: no candidate fits 819 B allowed (budget 1.0 KiB from --memory-per-rank less 20% headroom) on 4 ranks:" \
  "$work/nofit.log" || fail "the message does not say what is allowed" "$work/nofit.log"
for name in ddp zero1 zero2 zero3 fsdp; do
  grep -Eq "[:;] $name needs [0-9.]+ MiB per rank" "$work/nofit.log" ||
    fail "the message does not list $name's need" "$work/nofit.log"
done

echo
echo "=== sdk selector test: all steps passed"
