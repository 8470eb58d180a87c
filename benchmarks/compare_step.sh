#!/usr/bin/env bash
# Side-by-side training-step benchmark on benchmarks/gpt_step.toml (gpt, 4
# layers, d_model 128, seq_len 64, vocab 256, global batch 32, AdamW):
#
#   none     Tessera `none` on one rank, 1 thread: step time, model FLOP/s
#            and MFU against the sgemm rate the run measured at start-up
#   ddp      Tessera `ddp` on 2 gloo processes (tessera launch), 1 thread
#            each, against PyTorch DDP (gloo, 2 processes, 1 thread each)
#   threads  Tessera `none` on one rank with 2 threads against PyTorch on
#            one process with 2 intra-op threads
#
#   benchmarks/compare_step.sh [BUILD_DIR] [ROUNDS]
#
# Each round runs every row once, Tessera and PyTorch alternately, so both
# see the same machine load; the first 5 steps of each run are skipped
# (warm-up) and the mean step time of the other 30 is printed, with the
# ratio PyTorch / Tessera. Needs python3-torch (Debian) for the peer.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-${here}/../build}"
rounds="${2:-3}"
python=/usr/bin/python3
tessera="${build}/bin/tessera"
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT

# Mean step ms, model GFLOP/s per rank and MFU % over steps 6..35 of the
# metrics file (log lines at steps 10..35 average the steps since the
# previous line).
summarise() {
  "${python}" - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
timed = [r for r in rows if r["step"] > 5]
step = sum(r["step_seconds"] for r in timed) / len(timed)
flops = sum(r["model_flops_per_second"] for r in timed) / len(timed)
mfu = sum(r["mfu"] for r in timed) / len(timed)
print(f"{step * 1e3:.1f} {flops / 1e9:.1f} {mfu * 100:.1f}")
PY
}

tessera_none() {  # THREADS
  rm -f "${tmp}/m.jsonl"
  "${tessera}" train "${here}/gpt_step.toml" --log-level error --set "run.metrics=${tmp}/m.jsonl" \
    --set "run.threads_per_rank=$1" > /dev/null
  summarise "${tmp}/m.jsonl"
}

tessera_ddp() {
  rm -f "${tmp}/m.jsonl"
  "${tessera}" launch -n 2 --no-prefix -- "${tessera}" train "${here}/gpt_step.toml" \
    --log-level error --set "run.metrics=${tmp}/m.jsonl" --set backend.name=gloo \
    --set strategy.name=ddp --set run.world_size=2 > /dev/null
  summarise "${tmp}/m.jsonl"
}

torch_ms() {  # RANKS THREADS
  "${python}" "${here}/torch_ddp_gpt.py" --ranks "$1" --threads "$2" --batch 32 --steps 30 \
    --warmup 5 | "${python}" -c 'import json, sys; print("%.1f" % json.load(sys.stdin)["step_ms"])'
}

ratio() { "${python}" -c "print(f'{$1 / $2:.2f}')"; }

printf '%-6s %-8s %-10s %-14s %-8s %-11s %s\n' round row "tessera ms" "GFLOP/s/rank" "MFU %" "pytorch ms" \
  "pytorch/tessera"
for ((i = 1; i <= rounds; i++)); do
  read -r ms flops mfu < <(tessera_none 1)
  printf '%-6s %-8s %-10s %-14s %-8s %-11s %s\n' "${i}" none "${ms}" "${flops}" "${mfu}" - -
  read -r ms flops mfu < <(tessera_ddp)
  p_ms="$(torch_ms 2 1)"
  printf '%-6s %-8s %-10s %-14s %-8s %-11s %s\n' "${i}" ddp "${ms}" "${flops}" "${mfu}" "${p_ms}" \
    "$(ratio "${p_ms}" "${ms}")"
  read -r ms flops mfu < <(tessera_none 2)
  p_ms="$(torch_ms 1 2)"
  printf '%-6s %-8s %-10s %-14s %-8s %-11s %s\n' "${i}" threads "${ms}" "${flops}" "${mfu}" \
    "${p_ms}" "$(ratio "${p_ms}" "${ms}")"
done
