#!/usr/bin/env python3
"""Runs a schedule exported by `pipestudio export --format pipelining-csv` on PyTorch's own pipeline
runtime (torch.distributed.pipelining, torch 2.4 or newer), one process per rank over gloo:

    python -m torch.distributed.run --standalone --nproc_per_node RANKS tests/engine/torch_pipelining.py DIR

DIR/schedule.csv: the exported compute actions (one row per rank; `_PipelineScheduleRuntime._load_csv`
adds the sends and receives). DIR/manifest.json: the zoo GPT-2's shape, micro-batches, steps, AdamW
settings, and the tensors in DIR/input.bin (every parameter by the engine's name, then each step's
input_ids_N and labels_N, the step's micro-batches stacked along the batch). The model is the zoo's
GPT-2 layout as a list of layers [embedding, block 0 .. block L-1, final norm + tied head], split
evenly over the schedule's stages; the tied embedding's gradient is summed over the first and last
rank before each AdamW step, as PipeStudio's runtime sums tied copies. The last rank writes
DIR/losses.json: the mean micro-batch loss of every step.
"""
import json
import math
import os
import re
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_reference import load  # noqa: E402  (the same manifest and input.bin format)


class Embedding(nn.Module):
    def __init__(self, t):
        super().__init__()
        self.wte, self.wpe = nn.Parameter(t["wte.weight"].clone()), nn.Parameter(t["wpe.weight"].clone())

    def forward(self, ids):
        return self.wte[ids] + self.wpe[torch.arange(ids.shape[1])]


class Block(nn.Module):
    def __init__(self, t, i, cfg):
        super().__init__()
        self.heads, self.hidden = cfg["heads"], cfg["hidden"]
        self.p = nn.ParameterDict({k[len(f"h.{i}."):].replace(".", "_"): nn.Parameter(v.clone())
                                   for k, v in t.items() if k.startswith(f"h.{i}.")})

    def forward(self, x):
        p, h, n = self.p, self.hidden, self.heads
        b, t, _ = x.shape
        d = h // n
        y = F.layer_norm(x, (h,), p["ln_1_weight"], p["ln_1_bias"], 1e-5)
        q, k, v = (y @ p["attn_c_attn_weight"] + p["attn_c_attn_bias"]).split(h, dim=-1)
        q, k, v = (z.reshape(b, t, n, d).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(d))
        scores = scores.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
        ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, h)
        x = x + ctx @ p["attn_c_proj_weight"] + p["attn_c_proj_bias"]
        y = F.layer_norm(x, (h,), p["ln_2_weight"], p["ln_2_bias"], 1e-5)
        y = F.gelu(y @ p["mlp_c_fc_weight"] + p["mlp_c_fc_bias"], approximate="tanh")
        return x + y @ p["mlp_c_proj_weight"] + p["mlp_c_proj_bias"]


class Head(nn.Module):
    def __init__(self, t, cfg):
        super().__init__()
        self.hidden = cfg["hidden"]
        self.weight, self.bias = nn.Parameter(t["ln_f.weight"].clone()), nn.Parameter(t["ln_f.bias"].clone())
        self.wte = nn.Parameter(t["wte.weight"].clone())  # tied with the embedding's

    def forward(self, x):
        return F.layer_norm(x, (self.hidden,), self.weight, self.bias, 1e-5) @ self.wte.t()


def main(directory):
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    manifest, t = load(directory)
    cfg = manifest["model"]
    with open(os.path.join(directory, "schedule.csv")) as f:
        rows = [[re.match(r"^(\d+)([A-Z_]+)", a).groups() for a in line.split(",")]
                for line in f.read().splitlines() if line]
    stages = 1 + max(int(stage) for row in rows for stage, _ in row)
    layers = [Embedding(t)] + [Block(t, i, cfg) for i in range(cfg["layers"])] + [Head(t, cfg)]
    bounds = [len(layers) * s // stages for s in range(stages + 1)]
    mine = sorted({int(stage) for stage, kind in rows[rank] if kind == "F"})  # this rank's stages
    modules = {s: nn.Sequential(*layers[bounds[s]:bounds[s + 1]]) for s in mine}
    pipeline_stages = [PipelineStage(modules[s], s, stages, torch.device("cpu")) for s in mine]

    def loss_fn(logits, labels):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))

    micro_batches = manifest["micro_batches"]
    schedule = _PipelineScheduleRuntime(pipeline_stages, n_microbatches=micro_batches, loss_fn=loss_fn)
    schedule._load_csv(os.path.join(directory, "schedule.csv"), format="compute_only")
    params = [p for m in modules.values() for p in m.parameters()]
    o = manifest["optimizer"]
    adamw = torch.optim.AdamW(params, lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"],
                              weight_decay=o["weight_decay"])
    tied = [p for m in modules.values() for layer in m for p in
            ([layer.wte] if isinstance(layer, (Embedding, Head)) else [])]
    first, last = 0 in mine, stages - 1 in mine
    losses = []
    for step in range(manifest["steps"]):
        adamw.zero_grad()
        ids, labels = t[f"input_ids_{step}"], t[f"labels_{step}"]
        step_losses = []
        args = (ids,) if first else ()
        kwargs = {"target": labels, "losses": step_losses} if last else {}
        schedule.step(*args, **kwargs)
        grad = sum(p.grad for p in tied) if tied else torch.zeros_like(t["wte.weight"])
        dist.all_reduce(grad)  # the embedding's and the head's copies of wte: the sum, on both ranks
        for p in tied:
            p.grad = grad.clone()
        adamw.step()
        if last:
            losses.append(float(torch.stack([torch.as_tensor(x) for x in step_losses]).mean()))
    if last:
        with open(os.path.join(directory, "losses.json"), "w") as f:
            json.dump({"losses": losses, "torch": torch.__version__}, f)
        print("losses", losses, "torch", torch.__version__, flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
