#!/usr/bin/env python3
"""Records the PyTorch profiler trace tests/data/traces/mlp_train_step_cpu.json.

A training step as users write one: an MLP (4 x Linear(1024, 1024) + ReLU, a 1000-class head,
cross-entropy) with record_function ranges named after its modules ("layers.0" ... "head",
"loss"), two micro-batches of 128 samples accumulated per step, AdamW, torch.profiler's schedule
(ProfilerStep ranges) over three active steps, CPU activities. Needs torch 2.x (Kineto: sequence
numbers link the backward ops to their forward ranges), e.g. in a venv:
    python -m venv v && v/bin/pip install torch && v/bin/python tests/data/make_torch_step_trace.py
The project it matches: pipestudio new -m mlp --layers 4 --hidden 1024 --vocab 1000 -b 128 --dropout 0
"""
import gzip
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule

HIDDEN, LAYERS, CLASSES, BATCH, MICRO_BATCHES = 1024, 4, 1000, 128, 2
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "traces", "mlp_train_step_cpu.json")


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(HIDDEN, HIDDEN) for _ in range(LAYERS))
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x, labels):
        for i, layer in enumerate(self.layers):
            with record_function(f"layers.{i}"):
                x = torch.relu(layer(x))
        with record_function("head"):
            logits = self.head(x)
        with record_function("loss"):
            return F.cross_entropy(logits, labels)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else OUT
    torch.manual_seed(0)
    model = Mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = [(torch.randn(BATCH, HIDDEN), torch.randint(0, CLASSES, (BATCH,))) for _ in range(MICRO_BATCHES)]

    def step():
        opt.zero_grad(set_to_none=True)
        for x, y in data:
            model(x, y).backward()
        opt.step()

    for _ in range(2):
        step()
    record_steps(step, out, "make_torch_step_trace.py")


def record_steps(step, out, script, **options):
    """Profiles four calls of `step` (one warm-up, three active: ProfilerStep ranges) on the CPU
    with torch.profiler's `options` and writes the trace to `out` (gzip-compressed for .gz)."""
    raw = out + ".raw"
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=3),
                 on_trace_ready=lambda p: p.export_chrome_trace(raw), **options) as prof:
        for _ in range(4):
            step()
            prof.step()
    with open(raw) as f:
        trace = json.load(f)
    os.remove(raw)
    trace["pipestudio_note"] = f"recorded by tests/data/{script} with torch {torch.__version__}"
    for e in trace.get("traceEvents", []):  # with_stack: the recording machine's paths are not the point
        args = e.get("args")
        if isinstance(args, dict) and "CallFrom" in args:
            del args["CallFrom"]
    with (gzip.open(out, "wt") if out.endswith(".gz") else open(out, "w")) as f:
        json.dump(trace, f, separators=(",", ":"))
    print(out, os.path.getsize(out), "bytes")

if __name__ == "__main__":
    main()
