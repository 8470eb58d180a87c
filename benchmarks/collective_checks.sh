#!/usr/bin/env bash
# What comparing every collective across the ranks costs a ddp step
# (backend.check_collectives, docs/training.md "When ranks disagree"):
#
#   benchmarks/collective_checks.sh [BUILD_DIR] [ROUNDS]
#
# The quick-start gpt under ddp, 60 steps, with the check on and off in
# alternating runs (ROUNDS pairs, default 3) on inmemory (2 and 4 thread
# ranks), mpi (mpirun, 2 ranks) and gloo (tessera launch, 2 ranks); once
# with ddp's default buckets (one allreduce a step for this model) and once
# with 10 KiB buckets (18 allreduces a step: the
# worst case for a per-collective cost). Prints the
# median of each side's mean step time and their ratio.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-${here}/../build}"
rounds="${2:-3}"
tessera="${build}/bin/tessera"
config="${here}/../examples/quickstart.toml"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# mean step time in ms of one run: launcher, ranks, check, extra --set...
run_once() {
  local launcher="$1" ranks="$2" check="$3"
  shift 3
  local sets=(--set run.steps=60 --set run.log_every=1000 --set 'run.metrics=""'
              --set 'checkpoint.dir=""' --set optimizer.warmup_steps=0
              --set "run.world_size=${ranks}" --set "backend.check_collectives=${check}" "$@")
  local cmd
  case "${launcher}" in
    inmemory) cmd=("${tessera}" train "${config}" "${sets[@]}") ;;
    mpi) cmd=(mpirun --oversubscribe -np "${ranks}" "${tessera}" train "${config}"
              --set backend.name=mpi "${sets[@]}") ;;
    gloo) cmd=("${tessera}" launch -n "${ranks}" --no-prefix -- "${tessera}" train "${config}"
               --set backend.name=gloo "${sets[@]}") ;;
  esac
  "${cmd[@]}" 2>&1 | sed -n 's/.*mean step \([0-9.]*\) ms.*/\1/p' | head -1
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

printf '%-9s %-6s %-12s %12s %12s %8s\n' backend ranks buckets "on (ms)" "off (ms)" on/off
for buckets in default 10KiB; do
  extra=()
  if [[ "${buckets}" == 10KiB ]]; then
    extra=(--set strategy.options.bucket_mb=0.01 --set strategy.options.first_bucket_mb=0.01)
  fi
  for setup in "inmemory 2" "inmemory 4" "mpi 2" "gloo 2"; do
    read -r launcher ranks <<<"${setup}"
    on=() off=()
    for ((i = 0; i < rounds; ++i)); do
      on+=("$(run_once "${launcher}" "${ranks}" true "${extra[@]}")")
      off+=("$(run_once "${launcher}" "${ranks}" false "${extra[@]}")")
    done
    m_on="$(printf '%s\n' "${on[@]}" | median)"
    m_off="$(printf '%s\n' "${off[@]}" | median)"
    printf '%-9s %-6s %-12s %12s %12s %8.3f\n' "${launcher}" "${ranks}" "${buckets}" \
      "${m_on}" "${m_off}" "$(echo "${m_on} / ${m_off}" | bc -l)"
  done
done
