#!/usr/bin/env bash
# End-to-end test of a model plugin built outside the tree: installs the
# whole project into a fresh prefix, builds examples/third_party_model (the
# residual MLP classifier `resmlp` and its gradient check) against that
# prefix with clang++ and libc++, checks the plugin's ELF, runs the gradient
# check, then uses the model through the INSTALLED tessera CLI with the
# example's config:
#   - `plugins --describe` shows a model of the current model API and its
#     declared options with their defaults;
#   - training lowers the loss under ddp and zero3 on 2 in-memory ranks, and
#     both reach the parameters and losses of `none` on 1 rank (float
#     tolerance);
#   - pipeline on 2 stages reaches the same parameters; zb1 is refused
#     naming the first unit that cannot split its backward;
#   - a misspelt model option is refused naming the config file, the line or
#     the override, the unknown key and the declared keys; an out-of-range
#     value is refused with the model's own message.
#
# Usage: third_party_model_test.sh <tessera build dir> <example source dir>
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

sdk_test_label="sdk model test"
# shellcheck source=tests/sdk/sdk_test_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/sdk_test_lib.sh"

# Hermetic: nothing from the caller's environment picks plugins or compilers.
fresh_work_dir "$work"
prefix=$work/prefix
plugin_dir=$work/plugins.d
example_build=$work/example-build
plugin_file=libtessera_model_resmlp.so
config=$example_dir/resmlp.toml
tessera=$prefix/bin/tessera

step a "install the project into a fresh prefix"
install_project "$build_dir" "$prefix" "$work/install.log" "$tessera" \
  "$prefix/include/tessera/sdk/model.hpp" "$prefix/include/tessera/sdk/rng.hpp" \
  "$prefix/include/tessera/c/model.h" "$prefix/lib/tessera/plugins/libtessera_strategy_zero3.so" \
  "$prefix/lib/tessera/plugins/libtessera_backend_inmemory.so"

step b "build examples/third_party_model with clang++ and libc++ against the prefix"
command -v clang++ >/dev/null || fail "clang++ is not installed (Debian: clang, libc++-dev, libc++abi-dev)"
CC=clang CXX=clang++ run_logged "$work/configure.log" \
  cmake -S "$example_dir" -B "$example_build" -G "$generator" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS=-stdlib=libc++ \
  -DCMAKE_PREFIX_PATH="$prefix" \
  -DRESMLP_WERROR=ON
cache=$example_build/CMakeCache.txt
grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++' "$cache" ||
  fail "the example was not configured with clang++: $(grep '^CMAKE_CXX_COMPILER:' "$cache")"
grep -qx "Tessera_DIR:PATH=$package_dir" "$cache" ||
  fail "find_package(Tessera) did not use the fresh prefix: $(grep '^Tessera_DIR' "$cache")"
run_logged "$work/build.log" cmake --build "$example_build" -j2
built=$example_build/$plugin_file
gradcheck=$example_build/resmlp_gradcheck
[[ -f $built ]] || fail "the build produced no $plugin_file" "$work/build.log"
[[ -x $gradcheck ]] || fail "the build produced no resmlp_gradcheck" "$work/build.log"
mkdir -p "$plugin_dir"
cp "$built" "$plugin_dir/"

step c "the plugin and the gradient check link libc++ (not libstdc++); the plugin exports one symbol"
for elf in "$built" "$gradcheck"; do
  needed=$(readelf -d "$elf" | grep NEEDED || true)
  echo "$(basename "$elf"): $(grep -o '\[[^]]*\]' <<<"$needed" | tr '\n' ' ')"
  grep -q 'libc++\.so\.1' <<<"$needed" || fail "$(basename "$elf") does not need libc++.so.1"
  if grep -q 'libstdc++' <<<"$needed"; then fail "$(basename "$elf") needs libstdc++"; fi
  if grep -q 'libtessera' <<<"$needed"; then fail "$(basename "$elf") links a Tessera library"; fi
done
exports=$(nm -D --defined-only "$built" | awk '{print $NF}')
[[ $exports == "tessera_plugin_entry" ]] ||
  fail "the plugin must export only tessera_plugin_entry, it exports: $(tr '\n' ' ' <<<"$exports")"

step d "resmlp_gradcheck: the units' gradients match central differences"
run_logged "$work/gradcheck.log" "$gradcheck"
cat "$work/gradcheck.log"
grep -q '^resmlp gradcheck: all checks passed$' "$work/gradcheck.log" ||
  fail "the gradient check did not report success" "$work/gradcheck.log"

step e "the installed CLI describes the model: kind, model API, options and defaults"
api_major=$(awk '/#define TESSERA_MODEL_API_MAJOR/ {print $3}' "$prefix/include/tessera/c/model.h")
api_minor=$(awk '/#define TESSERA_MODEL_API_MINOR/ {print $3}' "$prefix/include/tessera/c/model.h")
[[ -n $api_major && -n $api_minor ]] || fail "no TESSERA_MODEL_API_MAJOR/MINOR in the installed model.h"
run_logged "$work/describe.log" "$tessera" plugins --plugin-path "$plugin_dir" --describe resmlp
cat "$work/describe.log"
expect_line() {
  grep -Eq "$1" "$work/describe.log" || fail "--describe does not show $2" "$work/describe.log"
}
expect_line '^kind: +model$' "kind model"
expect_line "^API: +model ${api_major}\\.${api_minor}\$" "API: model ${api_major}.${api_minor}"
expect_line '^ +input +int +16 +features per example' "input (int, default 16, help)"
expect_line '^ +width +int +32 +width of the residual stream' "width (int, default 32, help)"
expect_line '^ +hidden +int list +\[64, 64\] +hidden width of each residual block' \
  "hidden (int list, default [64, 64], help)"
expect_line '^ +classes +int +4 +number of classes' "classes (int, default 4, help)"
expect_line '^ +residual_init +float +0\.5 +initial std' "residual_init (float, default 0.5, help)"

steps=40
# train NAME [--set ...]: a run of the example config with its metrics and
# its last checkpoint under $work/NAME.
train() {
  local name=$1
  shift
  run_logged "$work/$name.log" "$tessera" train "$config" --plugin-path "$plugin_dir" \
    --set run.steps="$steps" --set run.log_every=1 \
    --set run.metrics="$work/$name/metrics.jsonl" --set checkpoint.dir="$work/$name/ckpt" \
    --set checkpoint.every=0 "$@"
  grep -q "^model: resmlp (.*/plugins.d/$plugin_file)" "$work/$name.log" ||
    fail "the run did not use the built plugin" "$work/$name.log"
  echo "$name: $(grep -o 'final loss [0-9.]*' "$work/$name.log")"
}

# The loss falls: the mean of the last 4 steps is below half the first 4's.
loss_falls() {
  python3 - "$work/$1/metrics.jsonl" <<'PY'
import json, sys
losses = [json.loads(line)["loss"] for line in open(sys.argv[1])]
first, last = sum(losses[:4]) / 4, sum(losses[-4:]) / 4
print(f"{len(losses)} steps: loss {losses[0]:.4f} -> {losses[-1]:.4f}; "
      f"mean of the first 4 {first:.4f}, of the last 4 {last:.4f}")
if not last < 0.5 * first:
    sys.exit(f"the loss did not fall by half: {first:.4f} -> {last:.4f}")
PY
}

# Python reads the metrics and the checkpoints (safetensors: an 8-byte
# little-endian header length, a JSON header, then the raw tensors), as in
# third_party_strategy_test.sh.
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
def losses(run):
    with open(f"{run}/metrics.jsonl") as f:
        return [json.loads(line)["loss"] for line in f]
ta, tb = tensors(a), tensors(b)
expected = {f"{u}.{p}" for u, ps in [("proj", "wb"), ("head", "wb")] for p in ps}
expected |= {f"block{i}.{p}" for i in range(2) for p in ("w1", "b1", "w2", "b2")}
if set(ta) != expected or set(tb) != expected:
    sys.exit(f"the checkpoints hold {sorted(ta)} and {sorted(tb)}, expected {sorted(expected)}")
worst, where = 0.0, ""
for name in ta:
    scale = max(abs(x) for x in tb[name]) or 1.0
    diff = max(abs(x - y) for x, y in zip(ta[name], tb[name])) / scale
    if diff > worst:
        worst, where = diff, name
la, lb = losses(a), losses(b)
if len(la) != steps or len(lb) != steps:
    sys.exit(f"expected {steps} logged steps, got {len(la)} and {len(lb)}")
loss_diff = max(abs(x - y) / abs(y) for x, y in zip(la, lb))
print(f"{len(ta)} parameter tensors, largest relative difference {worst:.3g} ({where or '-'}); "
      f"per-step losses within {loss_diff:.3g}; final loss {la[-1]:.6f} vs {lb[-1]:.6f}")
if worst > tol:
    sys.exit(f"parameters differ by {worst:.3g} > {tol} in {where}")
if loss_diff > tol:
    sys.exit(f"the losses differ by {loss_diff:.3g} > {tol}")
PY
}

step f "training: the loss falls under ddp and zero3 (2 ranks) and none (1 rank)"
train none --set strategy.name=none --set run.world_size=1
train ddp --set strategy.name=ddp --set run.world_size=2
train zero3 --set strategy.name=zero3 --set run.world_size=2
for run in none ddp zero3; do
  loss_falls "$run" >"$work/falls-$run.log" 2>&1 ||
    fail "the loss did not fall under $run" "$work/falls-$run.log"
  echo "$run: $(cat "$work/falls-$run.log")"
done

step g "ddp and zero3 on 2 ranks reach the parameters and losses of none on 1 rank"
for run in ddp zero3; do
  compare_runs "$work/$run" "$work/none" "$steps" 1e-5 >"$work/compare-$run.log" 2>&1 ||
    fail "$run does not match none" "$work/compare-$run.log"
  echo "$run vs none: $(cat "$work/compare-$run.log")"
done

step g2 "pipeline: 2 stages reach none's parameters; zb1 refuses the units that do not split"
train pipeline --set strategy.name=pipeline --set run.world_size=2 --set data.micro_batches=2
compare_runs "$work/pipeline" "$work/none" "$steps" 1e-5 >"$work/compare-pipeline.log" 2>&1 ||
  fail "pipeline does not match none" "$work/compare-pipeline.log"
echo "pipeline vs none: $(cat "$work/compare-pipeline.log")"
status=0
"$tessera" train "$config" --plugin-path "$plugin_dir" --set run.steps=1 --set checkpoint.dir= \
  --set run.metrics= --set optimizer.warmup_steps=0 --set strategy.name=pipeline \
  --set strategy.options.schedule=zb1 \
  --set data.micro_batches=2 >"$work/zb1.log" 2>&1 || status=$?
cat "$work/zb1.log"
[[ $status -eq 1 ]] || fail "zb1 was not refused with exit status 1 (got $status)" "$work/zb1.log"
grep -qF 'needs every unit to split its backward into input and weight halves, but unit 0 (proj) cannot; use schedule = "1f1b"' \
  "$work/zb1.log" || fail "the refusal does not name the unit that cannot split" "$work/zb1.log"

# refused LOG CONFIG [--set ...]: the run must fail with exit status 1.
refused() {
  local log=$1 cfg=$2
  shift 2
  local status=0
  "$tessera" train "$cfg" --plugin-path "$plugin_dir" --set run.steps=1 --set checkpoint.dir= \
    --set run.metrics= "$@" >"$log" 2>&1 || status=$?
  cat "$log"
  [[ $status -eq 1 ]] || fail "the run was not refused with exit status 1 (got $status)" "$log"
  if grep -Eq '[.][ch]pp:[0-9]' "$log"; then fail "the refusal carries a source location" "$log"; fi
}
declared="declared: input, width, hidden, classes, residual_init; did you mean 'width'?"

step h "a misspelt model option is refused naming the file, the line or override, and the keys"
# In the file: the copy has 'widht = 3' right after the model's name.
typo_config=$work/typo.toml
sed '/^name = "resmlp"$/a widht = 3' "$config" >"$typo_config"
line=$(grep -n '^widht = 3$' "$typo_config" | cut -d: -f1)
[[ -n $line ]] || fail "could not write the misspelt config"
refused "$work/typo-file.log" "$typo_config"
grep -qF "$typo_config: [model]: unknown option 'widht' (line $line); $declared" \
  "$work/typo-file.log" || fail "the refusal does not name the file, line $line and keys" \
  "$work/typo-file.log"
# From the command line.
refused "$work/typo-set.log" "$config" --set model.widht=3
grep -qF "$config: [model]: unknown option 'widht' (--set model.widht=3); $declared" \
  "$work/typo-set.log" || fail "the refusal does not name the file, the override and keys" \
  "$work/typo-set.log"

step i "an out-of-range model option is refused with the model's message"
refused "$work/range.log" "$config" --set model.classes=1
grep -qF "$config: [model]: " "$work/range.log" ||
  fail "the refusal does not say where the [model] table came from" "$work/range.log"
grep -qF "model 'resmlp': key 'classes' must be >= 2, got 1" "$work/range.log" ||
  fail "the refusal does not carry the model's message" "$work/range.log"

echo
echo "=== sdk model test: all steps passed"
