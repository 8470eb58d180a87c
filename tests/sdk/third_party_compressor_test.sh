#!/usr/bin/env bash
# End-to-end test of a compressor plugin built outside the tree: installs the
# whole project into a fresh prefix, builds examples/third_party_compressor
# (the sign compressor `signsgd`) against that prefix with clang++ and libc++
# and -Werror, checks its ELF, then through the INSTALLED tessera CLI:
#   - `plugins --describe signsgd` (with --plugin-path and with
#     TESSERA_PLUGIN_PATH) shows its kind and options;
#   - `train` of the example's config (ddp, 4 in-memory ranks, 30 steps)
#     logs `compression: signsgd`, sends well under the f32 bytes (sign bits:
#     about 1/32 of a rank's gradients per encoding) and lowers the loss;
#   - the same under zero2 on 2 ranks (which allreduces each unit through
#     the compressor and keeps its piece);
#   - zero3 refuses it (exit 1, naming "summable"), and a bad `chunk` is
#     refused naming the option.
#
# Usage: third_party_compressor_test.sh <tessera build dir> <example source dir>
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

sdk_test_label="sdk compressor test"
# shellcheck source=tests/sdk/sdk_test_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/sdk_test_lib.sh"

fresh_work_dir "$work"
prefix=$work/prefix
plugin_dir=$work/plugins
config=$example_dir/signsgd.toml
tessera=$prefix/bin/tessera
# Short runs with no output files: the config's own paths are not written.
short=(--set run.steps=30 --set run.log_every=5 --set optimizer.warmup_steps=0
  --set run.metrics= --set checkpoint.dir=)

step a "install the project into a fresh prefix"
install_project "$build_dir" "$prefix" "$work/install.log" "$tessera" \
  "$prefix/include/tessera/sdk/compressor.hpp" "$prefix/include/tessera/c/compressor.h" \
  "$prefix/lib/tessera/plugins/libtessera_compressor_int8.so" \
  "$prefix/lib/tessera/plugins/libtessera_strategy_ddp.so" \
  "$prefix/lib/tessera/plugins/libtessera_strategy_zero2.so" \
  "$prefix/lib/tessera/plugins/libtessera_strategy_zero3.so" \
  "$prefix/lib/tessera/plugins/libtessera_model_gpt.so" \
  "$prefix/lib/tessera/plugins/libtessera_backend_inmemory.so"

step b "build the example with clang++ and libc++ (-DSIGNSGD_WERROR=ON)"
command -v clang++ >/dev/null || fail "clang++ is not installed (Debian: clang, libc++-dev, libc++abi-dev)"
build=$work/signsgd-build
CC=clang CXX=clang++ run_logged "$work/configure.log" \
  cmake -S "$example_dir" -B "$build" -G "$generator" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS=-stdlib=libc++ \
  -DCMAKE_PREFIX_PATH="$prefix" -DSIGNSGD_WERROR=ON
cache=$build/CMakeCache.txt
grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++' "$cache" ||
  fail "the example was not configured with clang++: $(grep '^CMAKE_CXX_COMPILER:' "$cache")"
grep -qx "Tessera_DIR:PATH=$package_dir" "$cache" ||
  fail "find_package(Tessera) did not use the fresh prefix: $(grep '^Tessera_DIR' "$cache")"
# The compile flags: in build.ninja (Ninja) or CMakeFiles/*/flags.make (Makefiles).
grep -rqs -- '-Werror' "$build/build.ninja" "$build/CMakeFiles" ||
  fail "-DSIGNSGD_WERROR=ON did not add -Werror to the compile flags"
run_logged "$work/build.log" cmake --build "$build" -j2
built=$build/libtessera_compressor_signsgd.so
[[ -f $built ]] || fail "the build produced no $(basename "$built")" "$work/build.log"
mkdir -p "$plugin_dir"
cp "$built" "$plugin_dir/"
needed=$(readelf -d "$built" | grep NEEDED || true)
grep -q 'libc++\.so\.1' <<<"$needed" || fail "signsgd does not need libc++.so.1: $needed"
if grep -q 'libstdc++' <<<"$needed"; then fail "signsgd needs libstdc++"; fi
exports=$(nm -D --defined-only "$built" | awk '{print $NF}')
[[ $exports == "tessera_plugin_entry" ]] ||
  fail "signsgd must export only tessera_plugin_entry, it exports: $(tr '\n' ' ' <<<"$exports")"
echo "$(basename "$built"): links libc++, exports only tessera_plugin_entry"

# check_describe LOG: the description shows the kind and both options.
check_describe() {
  grep -Eq '^kind: +compressor' "$1" || fail "--describe does not say kind compressor" "$1"
  grep -Eq '^ *chunk +int +0 +elements per f32 scale' "$1" ||
    fail "--describe does not show chunk (int, default 0, help)" "$1"
  grep -Eq '^ *error_feedback +bool +true +keep what the signs lost' "$1" ||
    fail "--describe does not show error_feedback (bool, default true, help)" "$1"
}

step c "the installed CLI describes signsgd's options (--plugin-path, TESSERA_PLUGIN_PATH)"
run_logged "$work/describe.log" "$tessera" plugins --plugin-path "$plugin_dir" --describe signsgd
cat "$work/describe.log"
check_describe "$work/describe.log"
run_logged "$work/describe-env.log" env TESSERA_PLUGIN_PATH="$plugin_dir" \
  "$tessera" plugins --describe signsgd
check_describe "$work/describe-env.log"

# check_run LOG MAX_RATIO: the run logged its compressor, every step line
# sends at most MAX_RATIO of the f32 bytes, and the final loss is below the
# first logged one. Prints a summary line.
check_run() {
  local log=$1 max_ratio=$2
  grep -Fq "compression: signsgd ($plugin_dir/libtessera_compressor_signsgd.so), chunk = 0, error_feedback = true" \
    "$log" || fail "the run does not log 'compression: signsgd' with its options" "$log"
  python3 - "$log" "$max_ratio" <<'PY' || fail "the run's step lines are wrong" "$log"
import re, sys
path, max_ratio = sys.argv[1], float(sys.argv[2])
text = open(path).read()
steps = re.findall(r"^step +\d+/\d+ \| loss ([0-9.]+) .*\| sent ([0-9.]+) MiB \(f32 ([0-9.]+) MiB\)",
                   text, re.M)
if len(steps) < 2:
    sys.exit(f"expected step lines with 'sent X MiB (f32 Y MiB)', found {len(steps)}")
for loss, sent, f32 in steps:
    if not float(sent) > 0 or float(sent) > max_ratio * float(f32):
        sys.exit(f"sent {sent} MiB is not in (0, {max_ratio} x f32 {f32} MiB]")
final = re.search(r"final loss ([0-9.]+)", text)
if not final:
    sys.exit("no 'final loss' in the summary")
first = float(steps[0][0])
if not float(final.group(1)) < first:
    sys.exit(f"the loss did not fall: first logged {first}, final {final.group(1)}")
print(f"{len(steps)} step lines: sent {steps[-1][1]} MiB (f32 {steps[-1][2]} MiB); "
      f"loss {first} -> {final.group(1)}")
PY
}

step d "tessera train with signsgd under ddp on 4 ranks: compressed bytes, the loss falls"
run_logged "$work/train-ddp.log" "$tessera" train "$config" --plugin-path "$plugin_dir" "${short[@]}"
# ddp f32: a ring allreduce, 2(N-1)/N x 4P bytes; signsgd: an allgather of
# (N-1) encodings of P/8 bytes and a scale per bucket, about 1/16 of that.
check_run "$work/train-ddp.log" 0.125

step e "tessera train with signsgd under zero2 on 2 ranks"
run_logged "$work/train-zero2.log" "$tessera" train "$config" --plugin-path "$plugin_dir" \
  --set strategy.name=zero2 --set run.world_size=2 "${short[@]}"
# zero2 also allgathers the updated f32 parameters, (N-1)/N x 4P, which
# signsgd does not compress: below 3/4 of the f32 bytes, not 1/16.
check_run "$work/train-zero2.log" 0.75

# refused LOG TEXT CMD...: CMD exits 1 and its output contains TEXT.
refused() {
  local log=$1 text=$2
  shift 2
  echo "+ $*"
  local status=0
  "$@" >"$log" 2>&1 || status=$?
  [[ $status -eq 1 ]] || fail "expected exit code 1, got $status" "$log"
  grep -Fq -- "$text" "$log" || fail "the error does not say '$text'" "$log"
  grep 'tessera: error:' "$log" || fail "no 'tessera: error:' line" "$log"
}

step f "zero3 refuses a gather compressor, and a bad chunk is refused by name"
refused "$work/zero3.log" "takes only summable compressors" \
  "$tessera" train "$config" --plugin-path "$plugin_dir" --set strategy.name=zero3 "${short[@]}"
grep -Fq "compressor 'signsgd' is of kind 'gather'" "$work/zero3.log" ||
  fail "the refusal does not name signsgd and its kind" "$work/zero3.log"
refused "$work/chunk.log" "option 'chunk' = -1 must be 0 (one scale per bucket) or in [1, 2^30]" \
  "$tessera" train "$config" --plugin-path "$plugin_dir" --set compression.options.chunk=-1 \
  "${short[@]}"

echo
echo "=== sdk compressor test: all steps passed"
