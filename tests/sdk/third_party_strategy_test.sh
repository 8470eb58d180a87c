#!/usr/bin/env bash
# End-to-end test of a strategy plugin built outside the tree: installs the
# whole project into a fresh prefix, builds examples/third_party_strategy
# (the local-SGD strategy `local_sgd`) against that prefix with clang++ and
# libc++, checks the plugin's ELF, then trains with it through the
# INSTALLED tessera CLI on the example's config at 2 in-memory ranks:
#   - its option is declared (default, help) and a bad value is refused;
#   - with sync_every = 1 and a linear update rule it reaches ddp's
#     parameters and loss (float tolerance);
#   - with sync_every = 4 the loss falls, and the replicas are bit-identical
#     after a sync step and differ between syncs (seen through
#     tessera_sdk_replica_check, which asks every rank for all it holds).
#
# Usage: third_party_strategy_test.sh <tessera build dir> <example source dir>
#            <work dir> <cmake generator> <replica check binary>
# Every step prints what it does; the first failing check stops the test with
# a message naming the step and showing the evidence.
set -euo pipefail

if [[ $# -lt 5 ]]; then
  echo "usage: $0 BUILD_DIR EXAMPLE_DIR WORK_DIR GENERATOR REPLICA_CHECK_EXE" >&2
  exit 2
fi
build_dir=$1
example_dir=$2
work=$3
generator=$4
replica_check=$5

sdk_test_label="sdk strategy test"
# shellcheck source=tests/sdk/sdk_test_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/sdk_test_lib.sh"

# Hermetic: nothing from the caller's environment picks plugins or compilers.
fresh_work_dir "$work"
prefix=$work/prefix
plugin_dir=$work/plugins.d
example_build=$work/example-build
plugin_file=libtessera_strategy_local_sgd.so
config=$example_dir/local_sgd.toml
tessera=$prefix/bin/tessera

step a "install the project into a fresh prefix"
install_project "$build_dir" "$prefix" "$work/install.log" "$tessera" \
  "$prefix/include/tessera/sdk/step_frame.hpp" "$prefix/include/tessera/c/strategy.h" \
  "$prefix/lib/tessera/plugins/libtessera_strategy_ddp.so" \
  "$prefix/lib/tessera/plugins/libtessera_backend_inmemory.so"

step b "build examples/third_party_strategy with clang++ and libc++ against the prefix"
command -v clang++ >/dev/null || fail "clang++ is not installed (Debian: clang, libc++-dev, libc++abi-dev)"
CC=clang CXX=clang++ run_logged "$work/configure.log" \
  cmake -S "$example_dir" -B "$example_build" -G "$generator" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS=-stdlib=libc++ \
  -DCMAKE_PREFIX_PATH="$prefix" \
  -DLOCAL_SGD_WERROR=ON
cache=$example_build/CMakeCache.txt
grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++' "$cache" ||
  fail "the example was not configured with clang++: $(grep '^CMAKE_CXX_COMPILER:' "$cache")"
grep -qx "Tessera_DIR:PATH=$package_dir" "$cache" ||
  fail "find_package(Tessera) did not use the fresh prefix: $(grep '^Tessera_DIR' "$cache")"
run_logged "$work/build.log" cmake --build "$example_build" -j2
built=$example_build/$plugin_file
[[ -f $built ]] || fail "the build produced no $plugin_file" "$work/build.log"
mkdir -p "$plugin_dir"
cp "$built" "$plugin_dir/"

step c "the plugin links libc++ (not libstdc++) and exports one symbol"
needed=$(readelf -d "$built" | grep NEEDED || true)
echo "$needed"
grep -q 'libc++\.so\.1' <<<"$needed" || fail "the plugin does not need libc++.so.1"
if grep -q 'libstdc++' <<<"$needed"; then fail "the plugin needs libstdc++"; fi
exports=$(nm -D --defined-only "$built" | awk '{print $NF}')
[[ $exports == "tessera_plugin_entry" ]] ||
  fail "the plugin must export only tessera_plugin_entry, it exports: $(tr '\n' ' ' <<<"$exports")"

step d "the installed CLI describes the option and refuses a bad value"
run_logged "$work/describe.log" "$tessera" plugins --plugin-path "$plugin_dir" --describe local_sgd
cat "$work/describe.log"
grep -Eq '^ *sync_every +int +4 +average the parameters' "$work/describe.log" ||
  fail "--describe does not show sync_every (int, default 4, help)" "$work/describe.log"
status=0
"$tessera" train "$config" --plugin-path "$plugin_dir" --set strategy.options.sync_every=0 \
  --set run.steps=1 --set optimizer.warmup_steps=0 --set checkpoint.dir= --set run.metrics= \
  >"$work/refused.log" 2>&1 || status=$?
[[ $status -eq 1 ]] || fail "sync_every = 0 was not refused with exit code 1 (got $status)" \
  "$work/refused.log"
grep -q "strategy 'local_sgd' refused its options or world size (2 ranks): option 'sync_every' must be >= 1" \
  "$work/refused.log" || fail "the refusal does not say what is wrong" "$work/refused.log"
if grep -Eq '[.][ch]pp:[0-9]' "$work/refused.log"; then
  fail "the refusal carries a source location" "$work/refused.log"
fi

# train NAME STEPS [--set ...]: a run of the example config with its
# metrics and its last checkpoint under $work/NAME.
train() {
  local name=$1 steps=$2
  shift 2
  run_logged "$work/$name.log" "$tessera" train "$config" --plugin-path "$plugin_dir" \
    --set run.steps="$steps" --set run.log_every=1 \
    --set run.metrics="$work/$name/metrics.jsonl" --set checkpoint.dir="$work/$name/ckpt" \
    --set checkpoint.every=0 "$@"
  echo "$name: $(grep -o 'final loss [0-9.]*' "$work/$name.log")"
}

# Python reads the metrics and the checkpoints (safetensors: an 8-byte
# little-endian header length, a JSON header, then the raw tensors).
compare_runs() {
  python3 - "$@" <<'PY'
import json, struct, sys
a, b, steps, tol = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
def tensors(run):
    path = f"{run}/ckpt/step-{steps:08d}/model.safetensors"
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or name.startswith("optim."):
            continue
        begin, end = info["data_offsets"]
        data = raw[8 + n + begin:8 + n + end]
        out[name] = struct.unpack(f"<{len(data) // 4}f", data)
    return out
def last_loss(run):
    with open(f"{run}/metrics.jsonl") as f:
        return [json.loads(line) for line in f][-1]["loss"]
ta, tb = tensors(a), tensors(b)
if sorted(ta) != sorted(tb):
    sys.exit(f"the checkpoints hold different tensors: {sorted(set(ta) ^ set(tb))}")
worst, where = 0.0, ""
for name in ta:
    scale = max(abs(x) for x in tb[name]) or 1.0
    diff = max(abs(x - y) for x, y in zip(ta[name], tb[name])) / scale
    if diff > worst:
        worst, where = diff, name
la, lb = last_loss(a), last_loss(b)
print(f"{len(ta)} parameter tensors, largest relative difference {worst:.3g} ({where}); "
      f"final loss {la:.6f} vs {lb:.6f}")
if worst > tol:
    sys.exit(f"parameters differ by {worst:.3g} > {tol} in {where}")
if abs(la - lb) > tol * abs(lb):
    sys.exit(f"final losses differ: {la} vs {lb}")
PY
}

step e "sync_every = 1 with a linear update rule (momentum, no clipping) reaches ddp's parameters"
linear=(--set optimizer.name=momentum --set optimizer.lr=0.05 --set optimizer.grad_clip=0.0
  --set optimizer.warmup_steps=0)
train ddp 12 --set strategy.name=ddp "${linear[@]}"
train every1 12 --set strategy.options.sync_every=1 "${linear[@]}"
compare_runs "$work/every1" "$work/ddp" 12 1e-4 >"$work/compare.log" 2>&1 ||
  fail "local_sgd with sync_every = 1 does not match ddp" "$work/compare.log"
cat "$work/compare.log"

step f "sync_every = 4 (the example's config) trains: the loss falls"
train every4 40
python3 - "$work/every4/metrics.jsonl" >"$work/falls.log" 2>&1 <<'PY' || fail "the loss did not fall" "$work/falls.log"
import json, sys
losses = [json.loads(line)["loss"] for line in open(sys.argv[1])]
first, last = sum(losses[:4]) / 4, sum(losses[-4:]) / 4
print(f"{len(losses)} steps: mean loss of the first 4 {first:.4f}, of the last 4 {last:.4f}")
if not last < 0.9 * first:
    sys.exit(f"the loss did not fall by 10%: {first:.4f} -> {last:.4f}")
PY
cat "$work/falls.log"

step g "replicas: bit-identical after a sync step (8), different between syncs (6)"
[[ -x $replica_check ]] || fail "replica check binary $replica_check does not exist"
check_replicas() {
  "$replica_check" "$config" --plugin-path "$plugin_dir" \
    --plugin-path "$prefix/lib/tessera/plugins" --set run.steps="$1" \
    --set optimizer.warmup_steps=2 --set checkpoint.dir= --set run.metrics=
}
status=0
check_replicas 8 >"$work/replicas8.log" 2>&1 || status=$?
cat "$work/replicas8.log"
[[ $status -eq 0 ]] || fail "the replicas differ after sync step 8 (exit $status)" "$work/replicas8.log"
status=0
check_replicas 6 >"$work/replicas6.log" 2>&1 || status=$?
cat "$work/replicas6.log"
[[ $status -eq 3 ]] ||
  fail "after step 6 (between syncs) the replicas should differ (exit 3), got exit $status" \
    "$work/replicas6.log"

echo
echo "=== sdk strategy test: all steps passed"
