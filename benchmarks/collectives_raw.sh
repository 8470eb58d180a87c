#!/usr/bin/env bash
# Tessera's process backends against the library calls they wrap, side by
# side in the same run (`tessera bench collectives --compare-raw`), and the
# in-memory backend for reference:
#
#   benchmarks/collectives_raw.sh [BUILD_DIR] [OUT_DIR]
#
# allreduce, allgather and reduce_scatter of f32, 1 KiB to 64 MiB, with 2 and
# 4 ranks: mpi under mpirun, gloo under `tessera launch`, inmemory as threads.
# Writes one CSV per (backend, op, ranks) into OUT_DIR (default: a temporary
# directory that is printed) and prints every table.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-${here}/../build}"
out="${2:-$(mktemp -d)}"
mkdir -p "${out}"
tessera="${build}/bin/tessera"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
sizes="1K:64M"
iters="${TESSERA_BENCH_ITERS:-20}"
common=(--sizes "${sizes}" --iters "${iters}" --warmup 5 --dtype f32)

for ranks in 2 4; do
  for op in allreduce allgather reduce_scatter; do
    echo "## ${op}, ${ranks} ranks"
    echo "### inmemory"
    "${tessera}" bench collectives --backend inmemory --ranks "${ranks}" --op "${op}" \
      "${common[@]}" --csv "${out}/inmemory-${op}-${ranks}.csv"
    echo "### mpi (mpirun) against MPI's own call"
    mpirun --oversubscribe -np "${ranks}" "${tessera}" bench collectives --backend mpi \
      --op "${op}" "${common[@]}" --compare-raw --csv "${out}/mpi-${op}-${ranks}.csv"
    echo "### gloo (tessera launch) against the gloo algorithm called directly"
    "${tessera}" launch -n "${ranks}" --no-prefix -- "${tessera}" bench collectives \
      --backend gloo --op "${op}" "${common[@]}" --compare-raw \
      --csv "${out}/gloo-${op}-${ranks}.csv"
  done
done
echo "CSV files in ${out}"
