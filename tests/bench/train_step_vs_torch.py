#!/usr/bin/env python3
"""Side-by-side training-step benchmark: PipeStudio's engine against PyTorch eager on the same
machine, device, model shape, batch and thread count (GPT-2 layout, AdamW; byte vocabulary over a
text file, or with --vocab V uniform random tokens of V ids on both sides, GPT-2's own 50257 for
the 124M model).

    /usr/bin/python3 tests/bench/train_step_vs_torch.py PIPESTUDIO [--layers 4 --hidden 256 --heads 4
        --seq 256 --batch 8 --threads 2 --steps 8 --data FILE | --vocab 50257] [--device cuda:0
        --precision fp32|tf32|bf16 --peak-tflops 67] [--also-torch PYTHON] [--dropout-share 0.1]

Prints the median step time of each (the first two steps are warm-up and not counted) and the
ratio engine / PyTorch (below 1: the engine is faster). `--also-torch PYTHON` (repeatable) runs the
PyTorch side once more under another interpreter, e.g. a venv with torch 2.15 beside Debian's 1.13,
same model, batch and threads, one after the other; the ratio is then taken against the fastest. On the CPU the engine uses every core the
process may run on; give PyTorch the same count with --threads. With --device cuda:N both train on that GPU
(the engine's CUDA backend, PyTorch with TF32 off: fp32 on both sides), and each line adds the
model FLOP utilisation: 6 x parameters x tokens/s over --peak-tflops (the card's dense fp32 peak;
67 on an H100 SXM).
"""
import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "engine"))
from torch_reference import gpt2_loss  # noqa: E402


def gpt2_params(a, device):
    """The benchmark model's parameters (GPT-2's names and initialisation), on `device`."""
    h, layers = a.hidden, a.layers
    p = {}

    def param(*shape, std=0.02, value=None):
        t = torch.full(shape, value) if value is not None else torch.randn(*shape) * std
        return t.to(device).requires_grad_(True)
    p["wte.weight"], p["wpe.weight"] = param(a.vocab or 256, h), param(a.seq, h)
    for i in range(layers):
        for ln in ("ln_1", "ln_2"):
            p[f"h.{i}.{ln}.weight"], p[f"h.{i}.{ln}.bias"] = param(h, value=1.0), param(h, value=0.0)
        p[f"h.{i}.attn.c_attn.weight"], p[f"h.{i}.attn.c_attn.bias"] = param(h, 3 * h), param(3 * h, value=0.0)
        p[f"h.{i}.attn.c_proj.weight"] = param(h, h, std=0.02 / math.sqrt(2 * layers))
        p[f"h.{i}.attn.c_proj.bias"] = param(h, value=0.0)
        p[f"h.{i}.mlp.c_fc.weight"], p[f"h.{i}.mlp.c_fc.bias"] = param(h, 4 * h), param(4 * h, value=0.0)
        p[f"h.{i}.mlp.c_proj.weight"] = param(4 * h, h, std=0.02 / math.sqrt(2 * layers))
        p[f"h.{i}.mlp.c_proj.bias"] = param(h, value=0.0)
    p["ln_f.weight"], p["ln_f.bias"] = param(h, value=1.0), param(h, value=0.0)
    return p


def torch_steps(a, data):
    torch.manual_seed(0)
    torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    if device.type == "cuda":  # the engine's precision: fp32, or TF32 GEMMs
        torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
    h, layers = a.hidden, a.layers
    p = gpt2_params(a, device)
    opt = torch.optim.AdamW(p.values(), lr=1e-3, weight_decay=0.01)
    rng = np.random.default_rng(0)
    times = []
    for _ in range(a.steps):
        start = time.perf_counter()
        o = rng.integers(0, len(data) - a.seq - 1, a.batch)
        ids = torch.tensor(np.stack([data[i:i + a.seq] for i in o])).to(device)
        labels = torch.tensor(np.stack([data[i + 1:i + a.seq + 1] for i in o])).to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = gpt2_loss(p, ids, labels, {"layers": layers, "hidden": h, "heads": a.heads})
        opt.zero_grad()
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return times[2:], sum(t.numel() for t in p.values())


def engine_steps(a, dropout=0.0):
    with tempfile.TemporaryDirectory() as d:
        project = os.path.join(d, "bench.pstudio")
        subprocess.run([a.pipestudio, "new", "-m", "gpt2-small", "--layers", str(a.layers), "--hidden", str(a.hidden),
                        "--heads", str(a.heads), "--seq", str(a.seq), "--vocab", str(a.vocab or 256),
                        "--max-positions", str(a.seq),
                        "-b", str(a.batch), "--dropout", str(dropout), "-o", project], check=True,
                       capture_output=True)
        # One CPU device uses every core. On a GPU no step is timed action by action (no stored
        # timeline), as PyTorch's steps are not: each step's time ends when the device is done.
        where = [] if a.device == "cpu" else ["--devices", a.device, "--precision", a.precision,
                                              "--trace-iterations", "0", "--trace-every", "0"]
        data = ["--data-format", "random", "--vocab", str(a.vocab)] if a.vocab else ["--data", a.data]
        out = subprocess.run([a.pipestudio, "train", project, "--steps", str(a.steps)] + data + where,
                             check=True, capture_output=True, text=True).stdout
    ms = [float(m) for m in re.findall(r"tokens/s\s+([0-9.]+) ms", out)]
    return [t / 1e3 for t in ms[2:]]


def engine_blas(a):
    """The engine's GEMM library and the kernels it runs, as `pipestudio devices` reports them."""
    import json
    out = subprocess.run([a.pipestudio, "devices", "--json"], check=True, capture_output=True, text=True).stdout
    blas = json.loads(out)["blas"]
    pinned = " pinned by the environment" if "wider_core" in blas else ""
    if blas.get("cpu_gemm") == "packed":
        return f"PipeStudio's packed AVX-512 GEMM; OpenBLAS {blas['core']}{pinned} for products under 4 rows or 8 columns"
    return f"OpenBLAS, {blas['core']} kernels{pinned}"


def torch_blas():
    """The GEMM library torch was built with (its build's BLAS_INFO), and OpenBLAS's pinned core."""
    info = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    name = info.group(1) if info else "unknown"
    if name == "generic":  # Debian's torch: the system's libblas (OpenBLAS where installed)
        name = "system BLAS"
    core = os.environ.get("OPENBLAS_CORETYPE")
    return name + (f", OPENBLAS_CORETYPE={core}" if core and name != "mkl" else "")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pipestudio")
    for name, default in (("layers", 4), ("hidden", 256), ("heads", 4), ("seq", 256), ("batch", 8), ("threads", 2),
                          ("steps", 8)):
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--data", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--vocab", type=int, default=0, help="random tokens of this many ids instead of --data's bytes")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda:N for both on that GPU")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16"],
                    help="on a GPU: fp32, TF32 or bf16 GEMMs")
    ap.add_argument("--peak-tflops", type=float, default=67.0, help="the GPU's dense peak at that precision, for MFU")
    ap.add_argument("--also-torch", action="append", default=[], metavar="PYTHON",
                    help="another Python whose torch also runs the step (repeatable)")
    ap.add_argument("--torch-only", action="store_true", help=argparse.SUPPRESS)  # one --also-torch run
    ap.add_argument("--dropout-share", type=float, default=0, metavar="P",
                    help="also run the engine with dropout P and print dropout's share of its step")
    a = ap.parse_args()
    if a.vocab:
        data = np.random.default_rng(1).integers(0, a.vocab, 1 << 22, dtype=np.int64)
    else:
        data = np.frombuffer(open(a.data, "rb").read(), dtype=np.uint8).astype(np.int64)
    env = f"{a.layers} layers, {a.hidden} hidden, {a.heads} heads, seq {a.seq}, batch {a.batch}, {a.threads} threads"
    if a.torch_only:
        times, params = torch_steps(a, data)
        print("TORCH", torch.__version__, statistics.median(times), params, torch_blas())
        return
    engine = statistics.median(engine_steps(a))
    times, params = torch_steps(a, data)
    torches = [(torch.__version__, statistics.median(times), torch_blas())]
    for python in a.also_torch:
        argv = [python, os.path.abspath(__file__)] + [x for x in sys.argv[1:]] + ["--torch-only"]
        out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
        version, median, _, blas = re.search(r"^TORCH (\S+) (\S+) (\S+) (.*)$", out, re.M).groups()
        torches.append((version, float(median), blas))
    reference = min(t for _, t, _ in torches)
    gpu = a.device != "cpu"

    def mfu(step):
        return f"  MFU {100 * 6 * params * a.seq * a.batch / step / (a.peak_tflops * 1e12):5.1f}%" if gpu else ""
    where = f"on {a.device} ({a.precision})" if gpu else "on the CPU"
    print(f"GPT {env}, {params / 1e6:.1f}M parameters, {where}; median of {a.steps - 2} steps after 2 warm-up")
    blas = f"  ({engine_blas(a)})" if not gpu else ""
    print(f"  PipeStudio engine:     {engine * 1e3:8.1f} ms/step  {a.seq * a.batch / engine:8.0f} tokens/s{mfu(engine)}"
          f"{blas}")
    for version, t, lib in torches:
        blas = f"  ({lib})" if not gpu else ""
        print(f"  PyTorch {version:<12}  {t * 1e3:8.1f} ms/step  {a.seq * a.batch / t:8.0f} tokens/s{mfu(t)}{blas}")
    fastest = "" if len(torches) == 1 else " (the fastest PyTorch)"
    print(f"  ratio engine / PyTorch{fastest}: {engine / reference:.2f}")
    if a.dropout_share > 0:
        dropped = statistics.median(engine_steps(a, a.dropout_share))
        print(f"  engine with dropout {a.dropout_share:g}: {dropped * 1e3:8.1f} ms/step; dropout's share of the step "
              f"{100 * (dropped - engine) / dropped:.1f}%")


if __name__ == "__main__":
    main()
