#!/usr/bin/env python3
"""Training step time of two pipestudio builds side by side, on the same projects.

For each case, alternately --repeat times: `train PROJECT ARGS --steps N --json` with the baseline
build, then with the new one; a run's time is the median of its steps after the first two, a case's
the median of its runs. Prints both and new / base (below 1: the new build is faster).

Usage: train_step_ab.py --base BIN --new BIN --case 'NAME|PROJECT|TRAIN ARGS' [--case ...]
                        [--steps N] [--repeat R]
"""
import argparse
import json
import shlex
import statistics
import subprocess
import sys


def step_ms(binary, project, args, steps):
    done = subprocess.run([binary, "train", project, *args, "--steps", str(steps), "--json"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{binary} train {project} failed: {done.stderr.strip()[-300:]}")
    times = [json.loads(line)["step_ms"] for line in done.stdout.splitlines() if line.startswith('{"busy_ms"')]
    if len(times) < 3:
        raise RuntimeError(f"{binary} train {project}: fewer than 3 steps reported")
    return statistics.median(times[2:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--case", action="append", required=True, help="NAME|PROJECT|TRAIN ARGS")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for case in args.case:
        name, project, train_args = case.split("|", 2)
        runs = {"base": [], "new": []}
        for _ in range(args.repeat):
            for key in ("base", "new"):
                runs[key].append(step_ms(getattr(args, key), project, shlex.split(train_args), args.steps))
        b, n = statistics.median(runs["base"]), statistics.median(runs["new"])
        print(f"{name:20} base {b:8.2f} ms  new {n:8.2f} ms  new/base {n / b:.3f}  "
              f"(base {' '.join(f'{x:.2f}' for x in runs['base'])}; new {' '.join(f'{x:.2f}' for x in runs['new'])})",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
