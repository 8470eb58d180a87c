#!/usr/bin/env bash
# The strategy comparison of docs/benchmarks.md: `tessera bench strategies`
# on benchmarks/gpt_strategies.toml (gpt, about 3.2 M parameters, in-memory
# rank threads) under ddp, zero1, zero2, zero3 and fsdp, with 2 and 4 ranks,
# each strategy in a process of its own:
#
#   benchmarks/strategies.sh [BUILD_DIR] [OUT_DIR]
#
# Writes strategies-<N>ranks.txt (the table as printed) and
# strategies-<N>ranks.csv into OUT_DIR (default: a temporary directory that
# is printed) and prints every table. TESSERA_BENCH_STEPS sets the steps per
# strategy (default 10; the first is left out of the means as warm-up).
# Takes well under a minute on two cores.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-${here}/../build}"
out="${2:-$(mktemp -d)}"
mkdir -p "${out}"
tessera="${build}/bin/tessera"
steps="${TESSERA_BENCH_STEPS:-10}"
strategies="ddp,zero1,zero2,zero3,fsdp"

for ranks in 2 4; do
  echo "## ${ranks} ranks"
  echo "\$ tessera bench strategies benchmarks/gpt_strategies.toml --strategies ${strategies}" \
    "--set run.world_size=${ranks} --steps ${steps}"
  "${tessera}" bench strategies "${here}/gpt_strategies.toml" --strategies "${strategies}" \
    --set "run.world_size=${ranks}" --steps "${steps}" --log-level error \
    --csv "${out}/strategies-${ranks}ranks.csv" | tee "${out}/strategies-${ranks}ranks.txt"
  echo
done
echo "tables and CSV files in ${out}"
