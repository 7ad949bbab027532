#!/usr/bin/env python3
"""Planner speed at the sizes users plan (issue P19's table), as process wall time of the CLI.

    python3 tests/bench/planner_speed.py PIPESTUDIO [--baseline OTHER_PIPESTUDIO] [--repeat 3]

Rows: `plan` of a 1T-parameter GPT (128 layers, hidden 25600, 160 heads, seq 2048; dawnpiper, 64
stages, 1F1B, M=128, a100-80gb), `maxbatch --algo all` on gpt2-xl (8 stages, a100-40gb), `search`
on gpt2-xl (8 stages, gpipe/1f1b/kfkb:2/zb-h1 x micro-batch sizes 1/2/4/8 x dawnpiper/pipedream,
global batch 64), `plan` gpt2-xl dawnpiper 8 stages. Each row prints the median of --repeat runs;
with --baseline the other binary runs each row right after this one (same machine, same projects)
and the line adds the ratio baseline / this (above 1: this build is faster) and whether the two
printed the same answer (JSON output compared, search times left out). Nothing here passes or fails
on time; the script exits non-zero only if a command fails or the answers differ.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROWS = [
    ("plan 1T GPT, dawnpiper, 64 stages, 1f1b, M=128, a100-80gb", "t1",
     ["plan", "{t1}", "-a", "dawnpiper", "-s", "64", "--schedule", "1f1b", "-m", "128", "-d", "a100-80gb",
      "--no-save", "--json"]),
    ("maxbatch --algo all, gpt2-xl, 8 stages, a100-40gb", "xl",
     ["maxbatch", "{xl}", "--algo", "all", "-s", "8", "-d", "a100-40gb", "--json"]),
    ("search gpt2-xl, 8 stages, 4 schedules x 4 sizes x 2 algorithms, global 64", "xl",
     ["search", "{xl}", "-a", "dawnpiper,pipedream", "-s", "8", "-d", "a100-40gb", "--schedules",
      "gpipe,1f1b,kfkb:2,zb-h1", "--micro-batch-sizes", "1,2,4,8", "--global-batch", "64", "--no-save",
      "--json", "--top", "1000"]),
    ("plan gpt2-xl, dawnpiper, 8 stages, a100-40gb", "xl",
     ["plan", "{xl}", "-a", "dawnpiper", "-s", "8", "-d", "a100-40gb", "--no-save", "--json"]),
]


def make_projects(binary, folder):
    t1 = os.path.join(folder, "t1.pstudio")
    xl = os.path.join(folder, "xl.pstudio")
    subprocess.run([binary, "new", "-m", "gpt2-xl", "--layers", "128", "--hidden", "25600", "--heads", "160",
                    "--seq", "2048", "--max-positions", "2048", "-o", t1, "--force"], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run([binary, "new", "-m", "gpt2-xl", "-o", xl, "--force"], check=True, stdout=subprocess.DEVNULL)
    return {"t1": t1, "xl": xl}


def strip_times(value):
    """The answer without the search's own timings, for comparing two builds."""
    if isinstance(value, dict):
        return {k: strip_times(v) for k, v in value.items() if k not in ("search_seconds", "reason")}
    if isinstance(value, list):
        return [strip_times(v) for v in value]
    return value


def run(binary, args):
    start = time.perf_counter()
    p = subprocess.run([binary] + args, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if p.returncode != 0:
        sys.exit(f"{' '.join([binary] + args)} failed ({p.returncode}): {p.stderr.strip()}")
    return seconds, p.stdout


def parse(stdout):
    return strip_times(json.loads(stdout))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pipestudio")
    ap.add_argument("--baseline", help="another pipestudio binary, run side by side")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    same = True
    with tempfile.TemporaryDirectory() as folder:
        projects = make_projects(a.pipestudio, folder)
        print(f"{'row':<76} {'this s':>8}" + (f" {'base s':>8} {'base/this':>9} answer" if a.baseline else ""))
        for label, _, template in ROWS:
            args = [x.format(**projects) for x in template]
            mine, theirs = [], []
            out_mine = out_theirs = None
            for _ in range(a.repeat):
                s, out_mine = run(a.pipestudio, args)
                mine.append(s)
                if a.baseline:
                    s, out_theirs = run(a.baseline, args)
                    theirs.append(s)
            line = f"{label:<76} {statistics.median(mine):>8.2f}"
            if a.baseline:
                agree = parse(out_mine) == parse(out_theirs)
                same = same and agree
                line += (f" {statistics.median(theirs):>8.2f} {statistics.median(theirs) / statistics.median(mine):>9.1f}"
                         f" {'same' if agree else 'DIFFERENT'}")
            print(line, flush=True)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
