#!/usr/bin/env python3
"""The selector's predictions against measurement, end to end.

Runs `tessera select CONFIG --json` for a world size, then `tessera bench
strategies` on every estimated candidate of the ranking (each in its own
process, as a user would compare them), and checks that each candidate's
predicted peak of tracked memory per rank (`memory.total`) is within 10% of
the largest rank's measured peak (`total_bytes` of the bench CSV), and
that its predicted bytes sent per step equal the measured ones within 1%
(strategies whose traffic the estimate rounds).

Usage: select_vs_bench.py TESSERA CONFIG WORLD WORK_DIR [--set KEY=VALUE ...]
"""
import csv
import json
import subprocess
import sys

TOLERANCE = 0.10


def entry(candidate):
    """A --strategies entry NAME[:KEY=VALUE...] from a candidate's options text."""
    parts = [candidate["strategy"]]
    text = candidate["options"].strip()
    if text:
        for pair in text.split(", "):
            key, value = (x.strip() for x in pair.split("=", 1))
            parts.append(key + "=" + value.strip('"'))
    return ":".join(parts)


def main():
    tessera, config, world, work = sys.argv[1:5]
    sets = sys.argv[5:]
    common = ["--set", f"run.world_size={world}", "--set", "checkpoint.dir=\"\"",
              "--set", "run.metrics=\"\""] + sets
    select = subprocess.run([tessera, "select", config, "--json", "--memory-per-rank", "64GiB"]
                            + common, capture_output=True, text=True, check=False)
    if select.returncode != 0:
        sys.exit(f"tessera select failed ({select.returncode}):\n{select.stderr}")
    ranking = json.loads(select.stdout)
    candidates = [c for c in ranking["candidates"] if "memory" in c]
    if not candidates:
        sys.exit("tessera select estimated no candidate:\n" + select.stdout)
    entries = [entry(c) for c in candidates]
    csv_path = f"{work}/select_vs_bench_{world}.csv"
    bench = subprocess.run([tessera, "bench", "strategies", config, "--steps", "2",
                            "--strategies", ",".join(entries), "--csv", csv_path] + common,
                           capture_output=True, text=True, check=False)
    print(bench.stdout)
    if bench.returncode != 0:
        sys.exit(f"tessera bench strategies failed ({bench.returncode}):\n{bench.stderr}")
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    if len(rows) != len(candidates):
        sys.exit(f"{len(candidates)} candidates but {len(rows)} bench rows")
    failures = []
    print(f"{'candidate':58} {'predicted':>12} {'measured':>12} {'error':>7}"
          f" {'sent pred':>11} {'sent meas':>11}")
    for c, e, row in zip(candidates, entries, rows):
        predicted = c["memory"]["total"]
        measured = int(row["total_bytes"])
        error = (predicted - measured) / measured
        sent_pred = c["bytes_per_step"]
        sent_meas = float(row["sent_bytes_per_step"])
        print(f"{e:58} {predicted:12d} {measured:12d} {error:+7.1%} {sent_pred:11d} {sent_meas:11.0f}")
        if abs(error) > TOLERANCE:
            failures.append(f"{e}: predicted {predicted} bytes per rank, measured {measured} "
                            f"({error:+.1%})")
        if abs(sent_pred - sent_meas) > 0.01 * max(sent_meas, 1.0):
            failures.append(f"{e}: predicted {sent_pred} bytes sent per step, measured "
                            f"{sent_meas:.0f}")
    if failures:
        sys.exit("predictions off:\n  " + "\n  ".join(failures))
    print(f"all {len(candidates)} candidates within {TOLERANCE:.0%}")


if __name__ == "__main__":
    main()
