#!/usr/bin/env python3
"""Measurements PyTorch takes on a GPU machine, for checks made later on machines without one.

    python3 tests/gpu/torch_on_gpu.py traces OUT_DIR [--device cuda:0]
        Records torch.profiler (Kineto) traces of training steps, with no annotations (plain
        torch.profiler.profile(), record_shapes on), of two models defined by
        tests/data/make_onnx_corpus.py (its GPT, and its narrow ResNet, named "resnet" there),
        at the sizes written to OUT_DIR/traces.json: 3 steps each (forward, cross-entropy,
        backward, AdamW), after 2 untraced warm-up steps. Writes <name>.trace.json.gz per model.
    python3 tests/gpu/torch_on_gpu.py sweep OUT_DIR [--device cuda:0]
        The training-step time and peak memory of GPT-2 medium's shape written like Hugging Face's
        GPT2Model computes it (24 layers, hidden 1024, 16 heads, seq 1024, 50257-token vocabulary;
        hf_gpt_loss below, AdamW) at micro-batch 1, 2, 4 and 8 in bf16 autocast and in TF32, median
        of 3 steps after 2 warm-ups: OUT_DIR/sweep.json, with the GPU's name and PyTorch's version.
        --shape large | small-seq2048: GPT-2 large's shape (36 x 1280) or GPT-2 small's at seq 2048,
        micro-batches 2 and 4, into OUT_DIR/sweep-<shape>.json (held-out checks of the same model). It is the measured counterpart of Megatron-LM's
        throughput-versus-micro-batch figure for the analytical cost model (issue P15).
    python3 tests/gpu/torch_on_gpu.py memory OUT_DIR [--device cuda:0]
        What a PyTorch process holds on the GPU besides its tensors, for the memory model's
        non-model margins (issue P16, PatrickStar): the CUDA context and library handles (device
        memory in use minus what the caching allocator reserved, after start-up and after a cuBLAS
        GEMM), and the caching allocator's overhead while training GPT-2 medium's shape
        (max_memory_reserved over max_memory_allocated, micro-batch 1, 4 and 8, bf16 autocast):
        OUT_DIR/memory.json.
Each row states what it measured; nothing here asserts a speed.
"""
import argparse
import gzip
import json
import os
import shutil
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "data"))

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


def record_traces(out, device, gzip_traces=True, suffix=""):
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
        raw = os.path.join(out, name + suffix + ".trace.json")
        prof.export_chrome_trace(raw)
        if gzip_traces:
            with open(raw, "rb") as f, gzip.open(raw + ".gz", "wb") as g:
                shutil.copyfileobj(f, g)
            os.remove(raw)
            raw += ".gz"
        print(f"{name}: {os.path.getsize(raw)} bytes")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    meta = {"device": name, "torch": torch.__version__, "steps": 3, "warmup": 2,
            "optimizer": "AdamW lr 1e-3", "models": TRACED,
            "recorded_by": "tests/gpu/torch_on_gpu.py traces"}
    with open(os.path.join(out, "traces" + suffix + ".json"), "w") as f:
        json.dump(meta, f, indent=1)


def hf_gpt_loss(p, ids, labels, layers, heads):
    """GPT-2 written like Hugging Face's GPT2Model, simplified: every projection one addmm with its bias (as
    its Conv1D does; under autocast the bias is added in bf16 inside the GEMM), unfused causal
    attention (scale, masked_fill, softmax), pre-norm blocks, tanh GELU, the head tied to wte."""
    import math
    F = torch.nn.functional
    b, t = ids.shape
    hidden = p["wte"].shape[1]
    d = hidden // heads

    def linear(x, name):
        return torch.addmm(p[name + ".b"], x.reshape(-1, x.shape[-1]), p[name + ".w"]).reshape(*x.shape[:-1], -1)
    x = p["wte"][ids] + p["wpe"][:t]
    causal = torch.ones(t, t, dtype=torch.bool, device=ids.device).tril()
    for i in range(layers):
        h = F.layer_norm(x, (hidden,), p[f"{i}.ln1.w"], p[f"{i}.ln1.b"], 1e-5)
        q, k, v = linear(h, f"{i}.attn").split(hidden, dim=-1)
        q, k, v = (z.reshape(b, t, heads, d).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(d))
        scores = scores.masked_fill(~causal, float("-inf"))
        ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, hidden)
        x = x + linear(ctx, f"{i}.proj")
        h = F.layer_norm(x, (hidden,), p[f"{i}.ln2.w"], p[f"{i}.ln2.b"], 1e-5)
        x = x + linear(F.gelu(linear(h, f"{i}.fc"), approximate="tanh"), f"{i}.fc2")
    x = F.layer_norm(x, (hidden,), p["lnf.w"], p["lnf.b"], 1e-5)
    logits = x @ p["wte"].t()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1))


def hf_gpt_step_times(device, precision, layers, hidden, heads, seq, vocab, batch, steps):
    """Median step time (ms) and peak allocated bytes of hf_gpt_loss + AdamW, and the bytes held
    between steps (weights, gradients, AdamW states)."""
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    p = {}

    def param(name, *shape, value=None):
        t = torch.full(shape, value) if value is not None else torch.randn(*shape) * 0.02
        p[name] = t.to(device).requires_grad_(True)
    param("wte", vocab, hidden)
    param("wpe", seq, hidden)
    for i in range(layers):
        for ln in ("ln1", "ln2"):
            param(f"{i}.{ln}.w", hidden, value=1.0)
            param(f"{i}.{ln}.b", hidden, value=0.0)
        for name, n_in, n_out in (("attn", hidden, 3 * hidden), ("proj", hidden, hidden), ("fc", hidden, 4 * hidden),
                                  ("fc2", 4 * hidden, hidden)):
            param(f"{i}.{name}.w", n_in, n_out)
            param(f"{i}.{name}.b", n_out, value=0.0)
    param("lnf.w", hidden, value=1.0)
    param("lnf.b", hidden, value=0.0)
    opt = torch.optim.AdamW(p.values(), lr=1e-4, weight_decay=0.01)
    ids = torch.randint(0, vocab, (batch, seq), device=device)
    labels = torch.randint(0, vocab, (batch, seq), device=device)
    times, held, peak = [], 0, 0
    for step in range(steps):
        if step == 2:
            torch.cuda.synchronize(device)
            held = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = hf_gpt_loss(p, ids, labels, layers, heads)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated(device)
    params = sum(t.numel() for t in p.values())
    del p, opt
    torch.cuda.empty_cache()
    return 1e3 * statistics.median(times[2:]), params, held, peak


# Shapes the sweep measures: GPT-2 medium's (the default), and two others for held-out checks.
SHAPES = {
    "medium": ({"layers": 24, "hidden": 1024, "heads": 16, "seq": 1024, "vocab": 50257}, (1, 2, 4, 8)),
    "large": ({"layers": 36, "hidden": 1280, "heads": 20, "seq": 1024, "vocab": 50257}, (2, 4)),
    "small-seq2048": ({"layers": 12, "hidden": 768, "heads": 12, "seq": 2048, "vocab": 50257}, (2, 4)),
}


def sweep(out, device, shape="medium"):
    model, micro_batches = SHAPES[shape]
    rows = []
    for precision in ("bf16", "tf32"):
        for mb in micro_batches:
            ms, params, held, peak = hf_gpt_step_times(device, precision, batch=mb, steps=5, **model)
            row = {"precision": precision, "micro_batch": mb, "step_ms": round(ms, 3), "parameters": params,
                   "bytes_between_steps": held, "peak_allocated_bytes": peak}
            print(json.dumps(row), flush=True)
            rows.append(row)
    meta = {"device": torch.cuda.get_device_name(device), "torch": torch.__version__,
            "model": dict(model, shape=shape, code="hf_gpt_loss in tests/gpu/torch_on_gpu.py: addmm "
                          "projections with their biases (Hugging Face's Conv1D), unfused causal attention, "
                          "tied head; AdamW (torch's default foreach)",
                          autocast="bf16: torch.autocast(dtype=torch.bfloat16); tf32: allow_tf32, no autocast"),
            "timing": "median of 3 steps after 2 warm-ups, host clock, synchronized after each step; the peak is "
                      "torch.cuda.max_memory_allocated over those 3 steps, bytes_between_steps what was allocated "
                      "before them (weights, gradients, AdamW states, inputs)",
            "rows": rows, "recorded_by": "tests/gpu/torch_on_gpu.py sweep"}
    name = "sweep.json" if shape == "medium" else f"sweep-{shape}.json"
    with open(os.path.join(out, name), "w") as f:
        json.dump(meta, f, indent=1)


def memory(out, device):
    def outside_allocator():
        torch.cuda.synchronize(device)
        free, total = torch.cuda.mem_get_info(device)
        return total - free - torch.cuda.memory_reserved(device), total
    torch.zeros(1, device=device)
    context, total = outside_allocator()
    a = torch.randn(1024, 1024, device=device)
    (a @ a).sum().item()
    with_cublas, _ = outside_allocator()
    del a
    rows = []
    model, _ = SHAPES["medium"]
    for mb in (1, 4, 8):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        hf_gpt_step_times(device, "bf16", batch=mb, steps=3, **model)
        allocated = torch.cuda.max_memory_allocated(device)
        reserved = torch.cuda.max_memory_reserved(device)
        row = {"micro_batch": mb, "max_allocated_bytes": allocated, "max_reserved_bytes": reserved,
               "reserved_over_allocated": round(reserved / allocated, 4)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    meta = {"device": torch.cuda.get_device_name(device), "torch": torch.__version__,
            "cuda": torch.version.cuda, "device_bytes": total,
            "context_bytes": context, "context_with_cublas_bytes": with_cublas,
            "context_how": "torch.cuda.mem_get_info's used bytes minus torch.cuda.memory_reserved, after the "
                           "first tensor and again after a 1024x1024 fp32 GEMM",
            "allocator_rows": rows,
            "allocator_how": "GPT-2 medium's shape (hf_gpt_loss, AdamW, bf16 autocast), 3 steps from an empty cache; "
                             "peak reserved over peak allocated",
            "recorded_by": "tests/gpu/torch_on_gpu.py memory"}
    print(json.dumps({k: v for k, v in meta.items() if k != "allocator_rows"}), flush=True)
    with open(os.path.join(out, "memory.json"), "w") as f:
        json.dump(meta, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["traces", "sweep", "memory"])
    ap.add_argument("out")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--shape", default="medium", choices=sorted(SHAPES), help="sweep: the model shape")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.what == "traces":
        record_traces(a.out, torch.device(a.device))
    elif a.what == "memory":
        memory(a.out, torch.device(a.device))
    else:
        sweep(a.out, torch.device(a.device), a.shape)


if __name__ == "__main__":
    main()
