#!/usr/bin/env bash
# async_sgd's loss against ddp's on the quick start (examples/quickstart.toml:
# gpt, 300 steps, AdamW at 3e-3, grad_clip 1.0): ddp on 4 ranks, and
# async_sgd at staleness 4 with 1 server + 4 workers, with the servers'
# replies predicted (the default) and without, for each seed given.
#
#   benchmarks/async_sgd_loss.sh [BUILD_DIR] [SEED ...]   (default seeds: 42 1 2 3 4 5 6)
#
# Extra `--set` arguments for every run (another optimizer, stragglers) go
# in ASYNC_LOSS_SETS, e.g.
#   ASYNC_LOSS_SETS='--set optimizer.name="sgd" --set optimizer.lr=0.3' benchmarks/async_sgd_loss.sh
#
# A log line every 50 steps, no checkpoints. Printed per seed and row: the
# final loss (the last step's batch) and the mean loss of steps 251-300
# (the summary's window mean); then the mean of each over the seeds and its
# ratio to ddp's. async_sgd at staleness >= 1 depends on the order in which
# pushes arrive, so two runs of one seed differ.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-${here}/../build}"
shift || true
seeds=("$@")
[[ ${#seeds[@]} -gt 0 ]] || seeds=(42 1 2 3 4 5 6)
tessera="${build}/bin/tessera"
config="${here}/../examples/quickstart.toml"
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT

common=(--set 'run.log_every=50' --set 'checkpoint.dir=""' --set 'run.metrics=""')
# shellcheck disable=SC2206  # split into words on purpose
extra=(${ASYNC_LOSS_SETS:-})
rows=("ddp" "async s=4" "async s=4 no predict")
args() {
  case "$1" in
    "ddp") echo "--set run.world_size=4 --set strategy.name=\"ddp\"" ;;
    "async s=4") echo "--set run.world_size=5 --set strategy.name=\"async_sgd\"" ;;
    *) echo "--set run.world_size=5 --set strategy.name=\"async_sgd\" --set strategy.options.predict=false" ;;
  esac
}

printf '%-6s %-22s %10s %10s\n' seed row final 'mean 251-300'
declare -A final_sum mean_sum
for seed in "${seeds[@]}"; do
  for r in "${rows[@]}"; do
    # shellcheck disable=SC2046  # args() prints words on purpose
    (cd "${tmp}" && "${tessera}" train "${config}" "${common[@]}" ${extra[@]+"${extra[@]}"} --set "run.seed=${seed}" \
      $(args "${r}")) > "${tmp}/out.log" 2>&1 || {
      echo "${r} (seed ${seed}) failed:" >&2
      tail -20 "${tmp}/out.log" >&2
      exit 1
    }
    line="$(grep 'final loss' "${tmp}/out.log" | tail -1)"
    final="$(grep -o 'final loss [0-9.]*' <<< "${line}" | awk '{print $3}')"
    mean="$(grep -o '(mean [0-9.]*' <<< "${line}" | awk '{print $2}')"
    printf '%-6s %-22s %10s %10s\n' "${seed}" "${r}" "${final}" "${mean}"
    final_sum[${r}]="$(awk -v a="${final_sum[${r}]:-0}" -v b="${final}" 'BEGIN { print a + b }')"
    mean_sum[${r}]="$(awk -v a="${mean_sum[${r}]:-0}" -v b="${mean}" 'BEGIN { print a + b }')"
  done
done
n=${#seeds[@]}
for r in "${rows[@]}"; do
  awk -v r="${r}" -v n="${n}" -v f="${final_sum[${r}]}" -v m="${mean_sum[${r}]}" \
    -v f0="${final_sum[ddp]}" -v m0="${mean_sum[ddp]}" \
    'BEGIN { printf "%-6s %-22s %10.4f %10.4f   (x ddp: %.3f, %.3f)\n", "mean", r, f / n, m / n, f / f0, m / m0 }'
done
