#!/usr/bin/env python3
"""Where a GPT-2 training step spends its GPU time, in the engine and in PyTorch eager, side by side:
the evidence for the CUDA backend's speed work (issue P14).

    python3 tests/gpu/op_breakdown.py PIPESTUDIO OUT_DIR [--device cuda:0] [--layers 12 --hidden 768
        --heads 12 --seq 1024 --batch 8 --vocab 50257] [--precision fp32|tf32|bf16]

Engine: `pipestudio profile --device cuda:N --precision P` on the benchmark's model, whose table
gives each IR op's forward and backward device time (CUPTI) summed over its nodes. PyTorch: one
training step of the same model (tests/engine/torch_reference.py's gpt2_loss, AdamW) under
torch.profiler after two warm-ups, its self device time per aten operator and per kernel name.
Writes OUT_DIR/engine_ops.txt and OUT_DIR/torch_ops.txt and prints both. Measures; asserts nothing.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "engine"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from torch_reference import gpt2_loss  # noqa: E402
from train_step_vs_torch import gpt2_params  # noqa: E402


def engine_table(a):
    with tempfile.TemporaryDirectory() as d:
        project = os.path.join(d, "bench.pstudio")
        subprocess.run([a.pipestudio, "new", "-m", "gpt2-small", "--layers", str(a.layers), "--hidden", str(a.hidden),
                        "--heads", str(a.heads), "--seq", str(a.seq), "--vocab", str(a.vocab), "--max-positions",
                        str(a.seq), "-b", str(a.batch), "--dropout", "0", "-o", project], check=True,
                       capture_output=True)
        run = subprocess.run([a.pipestudio, "profile", project, "--device", a.device, "--micro-batches",
                              str(a.batch), "--repeats", "3", "--warmup", "1", "--as", "h100-80gb",
                              "--precision", a.precision],
                             capture_output=True, text=True)
        return run.stdout + run.stderr


def torch_table(a):
    torch.manual_seed(0)
    device = torch.device(a.device)
    torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
    h, layers = a.hidden, a.layers
    p = gpt2_params(a, device)
    opt = torch.optim.AdamW(p.values(), lr=1e-3, weight_decay=0.01)
    ids = torch.randint(0, a.vocab, (a.batch, a.seq), device=device)
    labels = torch.randint(0, a.vocab, (a.batch, a.seq), device=device)
    cfg = {"layers": layers, "hidden": h, "heads": a.heads}

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = gpt2_loss(p, ids, labels, cfg)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    step()
    step()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        step()
    averages = prof.key_averages()
    key = "self_device_time_total" if hasattr(averages[0], "self_device_time_total") else "self_cuda_time_total"
    out = [f"PyTorch {torch.__version__}, {a.precision}, one step after two warm-ups: self device time per operator"]
    out.append(averages.table(sort_by=key, row_limit=45))
    kernels = {}
    for e in prof.events():  # the device-side events: kernels, copies, sets
        if str(getattr(e, "device_type", "")).endswith("CUDA"):
            us = getattr(e, "device_time_total", None)
            us = getattr(e, "cuda_time_total", 0.0) if us is None else us
            kernels[e.name] = kernels.get(e.name, 0.0) + us
    if kernels:
        total = sum(kernels.values())
        out.append(f"Kernels: {len(kernels)} names, {total / 1e3:.2f} ms device time")
        for name, us in sorted(kernels.items(), key=lambda kv: -kv[1])[:40]:
            out.append(f"  {us / 1e3:8.2f} ms  {100 * us / total:5.1f}%  {name[:110]}")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pipestudio")
    ap.add_argument("out")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16"], help="GEMMs of both sides")
    for name, default in (("layers", 12), ("hidden", 768), ("heads", 12), ("seq", 1024), ("batch", 8),
                          ("vocab", 50257)):
        ap.add_argument("--" + name, type=int, default=default)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for name, text in (("engine_ops.txt", engine_table(a)), ("torch_ops.txt", torch_table(a))):
        with open(os.path.join(a.out, name), "w") as f:
            f.write(text + "\n")
        print(text)


if __name__ == "__main__":
    main()
