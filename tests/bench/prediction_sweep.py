#!/usr/bin/env python3
"""Predicted against measured on CPU devices, over configurations no test tunes on.

For each configuration: `pipestudio new` (a zoo model at a size of its own), `profile --device cpu`
(the default: every core, and one thread beside copies of the step on the other cores; --alone:
with them idle), `train` on CPU devices for a few steps, then `compare
--json`. Prints the iteration error and each device's peak-memory error; exits 1 when a row misses
the bounds (--iteration-bound, --peak-bound) so a run can gate on it. A device's predicted peak is a
range: from its peak without messages waiting (a receiver that keeps up takes each as it comes) to
the one with as many as any timing can leave (how far the other devices run ahead is the host's
scheduling); its error is 0 inside the range and the distance to its nearer end outside.

With --profile analytical no profile is measured: `compare --profile analytical` holds the run
against the analytical model on this CPU as the probe measured it (engine/cpu_probe.h), the
prediction a user sees before profiling anything.

With --trials N each configuration is profiled and trained N times, alternately (profile, run,
`compare` of that run against that profile), and a row reports the median of the N iteration errors
(the lower middle one for even N, whose predicted and measured times it prints) with their range,
and each device's worst peak error over the trials: on a host whose speed drifts from one minute
to the next (a shared VM), one profile and one run apart in time say more about the host than
about the model.

With --configs FILE the configurations are read from a JSON file instead of the list below: an
array of [name, [`new` arguments], [`train` arguments]], so a model, size or schedule of one's own
is checked the same way.

Usage: prediction_sweep.py [--pipestudio PATH] [--only NAME ...] [--steps N] [--keep DIR]
                           [--profile measured|analytical] [--trials N] [--alone] [--ab-co-run N]
                           [--configs FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

# name, `new` arguments, `train` arguments. Sizes, sequence lengths, dropout, device counts and
# schedules vary; none of these is a configuration a test or a constant was fitted on.
CONFIGS = [
    ("gpt2 4x192 s128 drop 1f1b cpu:2", ["-m", "gpt2-tiny", "--layers", "4", "--hidden", "192", "--heads", "6",
                                          "--seq", "128", "-b", "2", "--dropout", "0.1"],
     ["--devices", "cpu:2", "--schedule", "1f1b", "--micro-batches", "8"]),
    ("gpt2 4x192 s128 nodrop gpipe cpu:2", ["-m", "gpt2-tiny", "--layers", "4", "--hidden", "192", "--heads", "6",
                                             "--seq", "128", "-b", "2", "--dropout", "0"],
     ["--devices", "cpu:2", "--schedule", "gpipe", "--micro-batches", "4"]),
    ("gpt2 6x256 s256 drop zb-h1 cpu:2", ["-m", "gpt2-tiny", "--layers", "6", "--hidden", "256", "--heads", "8",
                                           "--seq", "256", "-b", "1", "--dropout", "0.1"],
     ["--devices", "cpu:2", "--schedule", "zb-h1", "--micro-batches", "6"]),
    ("gpt2 8x128 s64 drop 1f1b cpu:4", ["-m", "gpt2-tiny", "--layers", "8", "--hidden", "128", "--heads", "4",
                                         "--seq", "64", "-b", "4", "--dropout", "0.1"],
     ["--devices", "cpu:4", "--schedule", "1f1b", "--micro-batches", "8"]),
    ("gpt2 8x128 s64 nodrop interleaved:2 cpu:2", ["-m", "gpt2-tiny", "--layers", "8", "--hidden", "128", "--heads",
                                                    "4", "--seq", "64", "-b", "4", "--dropout", "0"],
     ["--devices", "cpu:2", "--stages", "4", "--schedule", "interleaved:2", "--micro-batches", "8"]),
    ("gpt2 4x320 s96 drop kfkb:2 cpu:2", ["-m", "gpt2-tiny", "--layers", "4", "--hidden", "320", "--heads", "5",
                                           "--seq", "96", "-b", "2", "--dropout", "0.1"],
     ["--devices", "cpu:2", "--schedule", "kfkb:2", "--micro-batches", "8"]),
    ("bert 4x256 s128 drop 1f1b cpu:2", ["-m", "bert-base", "--layers", "4", "--hidden", "256", "--heads", "4",
                                          "--seq", "128", "-b", "2", "--vocab", "256", "--dropout", "0.1"],
     ["--devices", "cpu:2", "--schedule", "1f1b", "--micro-batches", "4"]),
    ("gpt2 8x192 s128 drop gpipe cpu:4", ["-m", "gpt2-tiny", "--layers", "8", "--hidden", "192", "--heads", "6",
                                           "--seq", "128", "-b", "1", "--dropout", "0.1"],
     ["--devices", "cpu:4", "--schedule", "gpipe", "--micro-batches", "8"]),
    # FTPipe's async schedule with its checkpointing (every stage but the last recomputes).
    ("gpt2 6x160 s80 nodrop ftpipe-async:3 cpu:3", ["-m", "gpt2-tiny", "--layers", "6", "--hidden", "160", "--heads",
                                                     "5", "--seq", "80", "-b", "2", "--dropout", "0"],
     ["--devices", "cpu:3", "--schedule", "ftpipe-async:3", "--micro-batches", "9"]),
    # An encoder-decoder whose shared embedding both stages hold (tied gradients summed).
    ("t5 2+2x256 s64 drop 1f1b cpu:2", ["-m", "t5-small", "--layers", "2", "--decoder-layers", "2", "--hidden", "256",
                                         "--heads", "4", "--seq", "64", "--decoder-seq", "32", "-b", "2",
                                         "--dropout", "0.1"],
     ["--devices", "cpu:2", "--schedule", "1f1b", "--micro-batches", "4"]),
    # A CNN of cells whose states are read two cells later (AmoebaNet-D), under GPipe.
    ("amoebanet 6x32 i32 b16 gpipe cpu:2", ["-m", "amoebanet-tiny", "--layers", "6", "-b", "16"],
     ["--devices", "cpu:2", "--schedule", "gpipe", "--micro-batches", "4"]),
]


def peak_range_error(device):
    """The measured peak against the predicted range [no messages waiting, as many as any timing
    leaves]: 0 inside, else the relative distance to the nearer end (negative: the prediction is below
    what was measured)."""
    measured = device["measured_peak_bytes"]
    low = device.get("predicted_peak_without_messages_bytes", device["predicted_peak_bytes"])
    high = device["predicted_peak_bytes"]
    if measured < low:
        return low / measured - 1
    if measured > high:
        return high / measured - 1
    return 0.0


def run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return done.stdout


def ab_co_run(ps, project, name, pairs):
    """Iteration errors of alone and co-run profiles against one stored run, alternately."""
    errors = {"alone": [], "co-run": []}
    for _ in range(pairs):
        for kind, extra in (("alone", ["--alone"]), ("co-run", ["--co-run"])):
            run([ps, "profile", project, "--device", "cpu"] + extra)
            c = json.loads(run([ps, "compare", project, "--json", "--profile", "measured"]))
            errors[kind].append(100 * c["iteration_error"])
    for kind, values in errors.items():
        print(f"  {name} {kind:7} " + " ".join(f"{v:+.1f}%" for v in values)
              + f"  (mean {sum(values) / len(values):+.1f}%)", flush=True)


def measure(ps, project, new_args, train_args, args, name):
    """Creates the project, then profiles, trains and compares it --trials times."""
    run([ps, "new", *new_args, "-o", project, "--force"])
    trials = []
    for trial in range(max(1, args.trials)):
        if args.profile == "measured":
            run([ps, "profile", project, "--device", "cpu"] + (["--alone"] if args.alone else []))
        run([ps, "train", project, *train_args, "--steps", str(args.steps)])
        trials.append(json.loads(run([ps, "compare", project, "--json", "--profile", args.profile])))
        if args.ab_co_run > 0 and trial == 0:  # after the row's own compare: it re-profiles
            ab_co_run(ps, project, name, args.ab_co_run)
    return trials


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--pipestudio", default=os.path.join(here, "..", "..", "build", "ci", "app", "pipestudio"))
    ap.add_argument("--only", nargs="*", help="substrings of the configuration names to run")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--iteration-bound", type=float, default=0.10)
    ap.add_argument("--peak-bound", type=float, default=0.05)
    ap.add_argument("--profile", choices=["measured", "analytical"], default="measured")
    ap.add_argument("--trials", type=int, default=1,
                    help="profile-run-compare rounds per configuration, alternately; rows report the median error")
    ap.add_argument("--keep", help="directory for the projects (default: a temporary one)")
    ap.add_argument("--alone", action="store_true",
                    help="profile with `profile --alone` (the other cores idle while it measures; the default "
                         "profile keeps copies of the step running on them)")
    ap.add_argument("--ab-co-run", type=int, default=0, metavar="N",
                    help="after each run, N profiles --alone and N with --co-run, taken alternately, each "
                         "followed by `compare` on the same run: the two profiles' errors side by side")
    ap.add_argument("--configs", metavar="FILE",
                    help="a JSON array of [name, [new arguments], [train arguments]] to run instead of the built-in list")
    args = ap.parse_args()
    configs = CONFIGS
    if args.configs:
        with open(args.configs) as f:
            configs = [(str(c[0]), [str(a) for a in c[1]], [str(a) for a in c[2]]) for c in json.load(f)]
    work = args.keep or tempfile.mkdtemp(prefix="ps-sweep-")
    os.makedirs(work, exist_ok=True)
    ps = args.pipestudio
    failed = 0
    print(f"{'configuration':44} {'predicted':>10} {'measured':>10} {'iter err':>9}  peak errors by device")
    for i, (name, new_args, train_args) in enumerate(configs):
        if args.only and not any(s in name for s in args.only):
            continue
        project = os.path.join(work, f"sweep{i}.pstudio")
        try:
            trials = measure(ps, project, new_args, train_args, args, name)
        except RuntimeError as e:  # a configuration that cannot run is a row, not the end of the sweep
            failed += 1
            print(f"{name:44} FAILED: {e}", flush=True)
            continue
        errors = sorted(100 * c["iteration_error"] for c in trials)
        mid = trials[[100 * c["iteration_error"] for c in trials].index(errors[(len(errors) - 1) // 2])]
        median = statistics.median_low(errors)
        peaks = [max((peak_range_error(c["devices"][d]) for c in trials), key=abs) for d in range(len(mid["devices"]))]
        ok = abs(median) <= 100 * args.iteration_bound and all(abs(p) <= args.peak_bound for p in peaks)
        failed += 0 if ok else 1
        spread = f" ({errors[0]:+.1f}..{errors[-1]:+.1f}, {len(errors)} trials)" if len(errors) > 1 else ""
        print(f"{name:44} {mid['predicted_iteration_ms']:8.1f}ms {mid['measured_iteration_ms']:8.1f}ms "
              f"{median:+8.1f}%{spread}  " + " ".join(f"{100 * p:+.1f}%" for p in peaks)
              + ("" if ok else "  MISS"), flush=True)
    print(f"{failed} configuration(s) outside +/-{100 * args.iteration_bound:.0f}% iteration, "
          f"+/-{100 * args.peak_bound:.0f}% peak (projects in {work})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
