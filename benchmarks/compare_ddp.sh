#!/usr/bin/env bash
# Side-by-side DDP benchmark: Tessera's ddp on 2 in-memory ranks against
# PyTorch DDP (gloo, 2 processes, 1 thread each) on the same gpt (4 layers,
# d_model 128, seq_len 64, vocab 256), global batch 16, AdamW.
#
#   benchmarks/compare_ddp.sh [BUILD_DIR] [ROUNDS]
#
# Runs the two alternately ROUNDS times (default 2) so both see the same
# machine load, skips the first 5 steps of each run (warm-up) and prints the
# mean step time of each run, Tessera's communication wait share and the
# ratio PyTorch / Tessera. Needs python3-torch (Debian) for the peer.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-${here}/../build}"
rounds="${2:-2}"
python=/usr/bin/python3
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT

tessera_run() {
  "${build}/bin/tessera" train "${here}/gpt_ddp.toml" --log-level error \
    --set "run.metrics=${tmp}/metrics.jsonl" > /dev/null
  # Log lines at steps 10..35 average the steps since the previous line:
  # their mean is the mean over steps 6..35.
  "${python}" - "${tmp}/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
timed = [r for r in rows if r["step"] > 5]
step = sum(r["step_seconds"] for r in timed) / len(timed)
wait = sum(r["comm_wait_share"] * r["step_seconds"] for r in timed) / sum(r["step_seconds"] for r in timed)
print(f"{step * 1e3:.1f} {wait * 100:.1f}")
PY
  rm -f "${tmp}/metrics.jsonl"
}

torch_run() {
  "${python}" "${here}/torch_ddp_gpt.py" --ranks 2 --steps 30 --warmup 5 |
    "${python}" -c 'import json, sys; print("%.1f" % json.load(sys.stdin)["step_ms"])'
}

printf '%-6s %-18s %-16s %-18s %s\n' round "tessera step ms" "tessera wait %" "pytorch step ms" "pytorch/tessera"
for ((i = 1; i <= rounds; i++)); do
  read -r t_ms t_wait < <(tessera_run)
  p_ms="$(torch_run)"
  ratio="$("${python}" -c "print(f'{${p_ms} / ${t_ms}:.2f}')")"
  printf '%-6s %-18s %-16s %-18s %s\n' "${i}" "${t_ms}" "${t_wait}" "${p_ms}" "${ratio}"
done
