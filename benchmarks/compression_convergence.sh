#!/usr/bin/env bash
# Convergence under gradient compression: the quick start (examples/
# quickstart.toml: gpt on 4 thread ranks, ddp) trained for STEPS steps with
# each compressor, over SEEDS seeds, against the same runs uncompressed.
# Prints one row per configuration: the final loss of every seed, their mean,
# the mean's difference from the uncompressed mean, and the bytes sent per
# step against f32's.
#
# Usage: benchmarks/compression_convergence.sh [BUILD_DIR] [STEPS] [SEEDS]
#        (defaults: build, 300, 3)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build}
steps=${2:-300}
seeds=${3:-3}
tessera=$build/bin/tessera
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

# final_loss ARGS...: trains and prints "<final loss> <sent MiB> <f32 MiB>".
final_loss() {
  local out
  out=$("$tessera" train examples/quickstart.toml --set run.steps="$steps" \
    --set run.log_every="$steps" --set run.metrics= "$@" 2>&1) || {
    echo "$out" >&2
    return 1
  }
  local loss sent raw
  loss=$(sed -n 's/.*final loss \([0-9.]*\).*/\1/p' <<<"$out" | tail -1)
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
