#!/usr/bin/env python3
"""Measurements PyTorch takes on a GPU machine, for checks made later on machines without one.

    python3 tests/gpu/torch_on_gpu.py traces OUT_DIR [--device cuda:0]
        Records torch.profiler (Kineto) traces of training steps, with no annotations (plain
        torch.profiler.profile(), record_shapes on), of two models defined by
        tests/data/make_onnx_corpus.py (its GPT, and its narrow ResNet, named "resnet" there),
        at the sizes written to OUT_DIR/traces.json: 3 steps each (forward, cross-entropy,
        backward, AdamW), after 2 untraced warm-up steps. Writes <name>.trace.json.gz per model.
    python3 tests/gpu/torch_on_gpu.py sweep OUT_DIR [--device cuda:0]
        The training-step time of a GPT (24 layers, hidden 1024, 16 heads, seq 1024, 50257-token
        vocabulary; tests/bench/train_step_vs_torch.py's model and AdamW) at micro-batch 1, 2, 4 and 8
        in bf16 autocast and in TF32, median of 3 steps after 2 warm-ups: OUT_DIR/sweep.json, with
        the GPU's name and PyTorch's version. It is the measured counterpart of Megatron-LM's
        throughput-versus-micro-batch figure for the analytical cost model (issue P15).
Each row states what it measured; nothing here asserts a speed.
"""
import argparse
import gzip
import json
import os
import shutil
import statistics
import sys
import types

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "data"))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))

# The traced models: the corpus's classes at sizes where the GPU, not the launch, does the work.
TRACED = {
    "gpt": {"kind": "gpt", "vocab": 256, "block": 64, "d": 128, "heads": 4, "layers": 2, "batch": 8},
    "resnet": {"kind": "resnet", "image": 64, "classes": 10, "batch": 16},
}


def traced_model(torch, spec):
    import make_onnx_corpus as corpus
    if spec["kind"] == "gpt":
        hand = corpus.define_modules(torch)
        model = hand["Gpt"]("tril", vocab=spec["vocab"], block=spec["block"], d=spec["d"], heads=spec["heads"],
                            layers=spec["layers"])
        x = torch.randint(0, spec["vocab"], (spec["batch"], spec["block"]))
        y = torch.randint(0, spec["vocab"], (spec["batch"], spec["block"]))
        return model, x, y
    import torchvision
    factory = {name: f for name, f, _ in corpus.torchvision_models(torch, torchvision)}["resnet"]
    model = factory()
    x = torch.randn(spec["batch"], 3, spec["image"], spec["image"])
    y = torch.randint(0, spec["classes"], (spec["batch"],))
    return model, x, y


def record_traces(out, device):
    from torch.profiler import ProfilerActivity, profile
    for name, spec in TRACED.items():
        torch.manual_seed(0)
        model, x, y = traced_model(torch, spec)
        model, x, y = model.to(device).train(), x.to(device), y.to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def step():
            logits = model(x)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
        for _ in range(2):
            step()
        with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else []), record_shapes=True) as prof:
            for _ in range(3):
                step()
                prof.step()
        raw = os.path.join(out, name + ".trace.json")
        prof.export_chrome_trace(raw)
        with open(raw, "rb") as f, gzip.open(raw + ".gz", "wb") as g:
            shutil.copyfileobj(f, g)
        os.remove(raw)
        print(f"{name}: {os.path.getsize(raw + '.gz')} bytes")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    meta = {"device": name, "torch": torch.__version__, "steps": 3, "warmup": 2,
            "optimizer": "AdamW lr 1e-3", "models": TRACED,
            "recorded_by": "tests/gpu/torch_on_gpu.py traces"}
    with open(os.path.join(out, "traces.json"), "w") as f:
        json.dump(meta, f, indent=1)


def sweep(out, device):
    from train_step_vs_torch import torch_steps
    data = np.random.default_rng(1).integers(0, 50257, 1 << 22, dtype=np.int64)
    rows = []
    for precision in ("bf16", "tf32"):
        for mb in (1, 2, 4, 8):
            a = types.SimpleNamespace(layers=24, hidden=1024, heads=16, seq=1024, vocab=50257, batch=mb, threads=4,
                                      steps=5, device=device, precision=precision)
            times, params = torch_steps(a, data)
            row = {"precision": precision, "micro_batch": mb, "step_ms": 1e3 * statistics.median(times),
                   "parameters": params}
            print(json.dumps(row), flush=True)
            rows.append(row)
            torch.cuda.empty_cache()
    meta = {"device": torch.cuda.get_device_name(device), "torch": torch.__version__,
            "model": {"layers": 24, "hidden": 1024, "heads": 16, "seq": 1024, "vocab": 50257,
                      "attention": "unfused (tests/engine/torch_reference.py)", "optimizer": "AdamW"},
            "timing": "median of 3 steps after 2 warm-ups, host clock, synchronized", "rows": rows,
            "recorded_by": "tests/gpu/torch_on_gpu.py sweep"}
    with open(os.path.join(out, "sweep.json"), "w") as f:
        json.dump(meta, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["traces", "sweep"])
    ap.add_argument("out")
    ap.add_argument("--device", default="cuda:0")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    (record_traces if a.what == "traces" else sweep)(a.out, torch.device(a.device))


if __name__ == "__main__":
    main()
