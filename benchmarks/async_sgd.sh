#!/usr/bin/env bash
# async_sgd with one slowed worker, beside synchronous training: the
# quick-start gpt (examples/quickstart.toml) for STEPS steps with one log
# step (the last) and no checkpoints, so nothing but the strategy
# synchronises the ranks between the first and the last step.
#
#   benchmarks/async_sgd.sh [BUILD_DIR] [STEPS] [DELAY_MS]
#
# Rows, each on the in-memory backend (ranks as threads) and on gloo (a
# process per rank, tessera launch):
#   ddp                  2 ranks, nobody slowed (the reference pace)
#   async s=4            1 server + 2 workers, nobody slowed
#   async s=4 no predict the same with the servers' replies not predicted
#   async s=0 slowed     1 server + 2 workers, world rank 2 (worker 1)
#                        sleeping DELAY_MS per step: synchronous SGD with a
#                        straggler, what ddp does with one
#   async s=4 slowed     the same at staleness 4
#   async s=STEPS slowed the same with a bound no worker reaches in the
#                        run (unbounded asynchrony): the other worker never
#                        waits for the slowed one
#   async s=0 rotating   both workers slowed in turn: world rank 1 sleeps
#                        DELAY_MS at even steps, rank 2 at odd ones
#                        (delay_every = 2), so every step has a straggler
#                        and each worker is one every other step
#   async s=4 rotating   the same at staleness 4
# Printed per row: the mean step time of the slowest rank over the run
# (the host's summary), the steps per second it makes, the steps per
# second of the fastest rank (the summary's "ranks' mean steps differ"
# line; the same as the slowest's when it has none), and the final loss.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-${here}/../build}"
steps="${2:-100}"
delay="${3:-20}"
tessera="${build}/bin/tessera"
config="${here}/../examples/quickstart.toml"
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT

common=(--set "run.steps=${steps}" --set "run.log_every=${steps}" --set 'checkpoint.dir=""'
        --set 'run.metrics=""' --set 'optimizer.warmup_steps=5')

row() {
  local backend="$1" label="$2" ranks="$3"
  shift 3
  local cmd=("${tessera}" train "${config}" "${common[@]}" --set "backend.name=\"${backend}\""
             --set "run.world_size=${ranks}" "$@")
  if [[ "${backend}" == gloo ]]; then
    cmd=("${tessera}" launch -n "${ranks}" --run-id "async-bench-$$" -- "${cmd[@]}")
  fi
  (cd "${tmp}" && "${cmd[@]}") > "${tmp}/out.log" 2>&1 || {
    echo "${label} on ${backend} failed:" >&2
    tail -20 "${tmp}/out.log" >&2
    exit 1
  }
  local ms fast loss
  ms="$(grep -o 'mean step [0-9.]* ms' "${tmp}/out.log" | tail -1 | awk '{print $3}')"
  fast="$( (grep -o 'fastest rank [0-9]* [0-9.]* ms' "${tmp}/out.log" || true) | tail -1 | awk '{print $4}')"
  loss="$(grep -o 'final loss [0-9.]*' "${tmp}/out.log" | tail -1 | awk '{print $3}')"
  awk -v b="${backend}" -v l="${label}" -v ms="${ms}" -v fast="${fast:-${ms}}" -v loss="${loss}" \
    'BEGIN { printf "%-9s %-20s %10s %10.1f %12.1f %10s\n", b, l, ms, 1000 / ms, 1000 / fast, loss }'
}

printf '%-9s %-20s %10s %10s %12s %10s\n' backend row 'step(ms)' 'steps/s' 'fastest/s' loss
for backend in inmemory gloo; do
  row "${backend}" ddp 2 --set 'strategy.name="ddp"'
  async=(--set 'strategy.name="async_sgd"' --set 'strategy.options.servers=1')
  row "${backend}" "async s=4" 3 "${async[@]}" --set 'strategy.options.staleness=4'
  row "${backend}" "async s=4 no predict" 3 "${async[@]}" --set 'strategy.options.staleness=4' \
    --set 'strategy.options.predict=false'
  slowed=(--set "strategy.options.delay_ms=${delay}" --set 'strategy.options.delay_ranks="2"')
  row "${backend}" "async s=0 slowed" 3 "${async[@]}" --set 'strategy.options.staleness=0' \
    "${slowed[@]}"
  row "${backend}" "async s=4 slowed" 3 "${async[@]}" --set 'strategy.options.staleness=4' \
    "${slowed[@]}"
  row "${backend}" "async s=${steps} slowed" 3 "${async[@]}" \
    --set "strategy.options.staleness=${steps}" "${slowed[@]}"
  rotating=(--set "strategy.options.delay_ms=${delay}" --set 'strategy.options.delay_ranks="1,2"'
            --set 'strategy.options.delay_every=2')
  row "${backend}" "async s=0 rotating" 3 "${async[@]}" --set 'strategy.options.staleness=0' \
    "${rotating[@]}"
  row "${backend}" "async s=4 rotating" 3 "${async[@]}" --set 'strategy.options.staleness=4' \
    "${rotating[@]}"
done
