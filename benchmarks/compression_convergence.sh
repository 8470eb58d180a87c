#!/usr/bin/env bash
# Convergence under gradient compression: the quick start (examples/
# quickstart.toml: gpt on 4 thread ranks, ddp) trained for STEPS steps with
# each compressor, over SEEDS seeds, against the same runs uncompressed.
# Prints one row per configuration: the final loss of every seed (the mean
# loss of its last 50 steps: one step's loss is one batch's, noisy), their
# mean, the mean's difference from the uncompressed mean, and the bytes
# sent per step against f32's. Further `tessera train` arguments after the
# three positional ones apply to every run (e.g. --set optimizer.name=...).
#
# Usage: benchmarks/compression_convergence.sh [BUILD_DIR] [STEPS] [SEEDS] [ARGS...]
#        (defaults: build, 300, 3)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build}
steps=${2:-300}
seeds=${3:-3}
shift $(($# < 3 ? $# : 3))
common=("$@")
tessera=$build/bin/tessera
metrics=$(mktemp)
trap 'rm -f "$metrics"' EXIT
[[ -x $tessera ]] || { echo "no $tessera: build first" >&2; exit 2; }

# name | --set arguments
configs=(
  "none|"
  "fp16|--set compression.name=fp16"
  "bf16|--set compression.name=bf16"
  "int8|--set compression.name=int8"
  "topk 0.01|--set compression.name=topk --set compression.options.ratio=0.01"
  "topk 0.01, no error feedback|--set compression.name=topk --set compression.options.ratio=0.01 --set compression.options.error_feedback=false"
  "powersgd rank 4|--set compression.name=powersgd --set compression.options.rank=4"
)

# final_loss ARGS...: trains and prints "<loss> <sent MiB> <f32 MiB>", the
# loss being the mean over the last 50 steps (fewer in a shorter run).
final_loss() {
  local out
  rm -f "$metrics"
  out=$("$tessera" train examples/quickstart.toml --set run.steps="$steps" \
    --set run.log_every=1 --set run.metrics="$metrics" "${common[@]}" "$@" 2>&1) || {
    echo "$out" >&2
    return 1
  }
  local loss sent raw
  loss=$(sed -n 's/.*"loss":\([-0-9.e+]*\).*/\1/p' "$metrics" | tail -50 |
    awk '{s += $1} END {printf "%.4f", s / NR}')
  sent=$(sed -n 's/.*| sent \([0-9.]*\) MiB (f32 \([0-9.]*\) MiB).*/\1/p' <<<"$out" | tail -1)
  raw=$(sed -n 's/.*| sent \([0-9.]*\) MiB (f32 \([0-9.]*\) MiB).*/\2/p' <<<"$out" | tail -1)
  echo "$loss ${sent:--} ${raw:--}"
}

printf '%-32s %-26s %8s %9s %16s\n' "compression" "final loss per seed" "mean" "vs none" "MiB/step (f32)"
base=""
for entry in "${configs[@]}"; do
  name=${entry%%|*}
  read -r -a args <<<"${entry#*|}"
  losses=()
  sent="-"
  raw="-"
  for ((s = 1; s <= seeds; s++)); do
    read -r loss sent raw < <(final_loss --set run.seed="$s" "${args[@]}")
    losses+=("$loss")
  done
  mean=$(printf '%s\n' "${losses[@]}" | awk '{s += $1} END {printf "%.4f", s / NR}')
  [[ -z $base ]] && base=$mean
  diff=$(awk -v m="$mean" -v b="$base" 'BEGIN {printf "%+.2f%%", (m - b) / b * 100}')
  bytes="-"
  [[ $sent != "-" ]] && bytes="$sent ($raw)"
  printf '%-32s %-26s %8s %9s %16s\n' "$name" "${losses[*]}" "$mean" "$diff" "$bytes"
done
