#!/usr/bin/env python3
"""The GPU benchmark of issue P14: GPT-2 small (124M: 12 layers, 768 hidden, 12 heads, GPT-2's
50257-token vocabulary, seq 1024) trained by PipeStudio's engine and by PyTorch eager on the same
GPU, same model, batch and AdamW, in TF32 and in bf16 GEMMs: tokens/s, the ratio engine / PyTorch
and the model FLOP utilisation of each (6 x parameters x tokens/s over the card's dense peak at
that precision). Each precision is one side-by-side run of tests/bench/train_step_vs_torch.py.

    python3 tests/bench/gpu_vs_torch.py PIPESTUDIO [--device cuda:0] [--batch 8] [--steps 8]
        [--peak-tf32 495 --peak-bf16 989]     (the peaks default to an H100 SXM's dense figures)

Reports; asserts nothing about speed (the issue's goal, faster than PyTorch and MFU >= 40% in
bf16, is read off the output). Exits non-zero when a run fails.
"""
import argparse
import os
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pipestudio")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--timeout", type=int, default=240, help="seconds per precision")
    ap.add_argument("--peak-tf32", type=float, default=495.0, help="dense TF32 TFLOPS of the GPU")
    ap.add_argument("--peak-bf16", type=float, default=989.0, help="dense bf16 TFLOPS of the GPU")
    a = ap.parse_args()
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train_step_vs_torch.py")
    failed = 0
    for precision, peak in (("tf32", a.peak_tf32), ("bf16", a.peak_bf16)):
        cmd = [sys.executable, script, a.pipestudio, "--device", a.device, "--precision", precision,
               "--peak-tflops", str(peak), "--layers", "12", "--hidden", "768", "--heads", "12", "--seq", "1024",
               "--vocab", "50257", "--batch", str(a.batch), "--steps", str(a.steps)]
        try:
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
        except subprocess.TimeoutExpired:
            print(f"{precision}: FAILED, over {a.timeout} s")
            failed += 1
            continue
        if run.returncode != 0:
            print(f"{precision}: FAILED ({run.returncode})\n{run.stderr[-2000:]}")
            failed += 1
            continue
        print(run.stdout.strip())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
