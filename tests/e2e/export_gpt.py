#!/usr/bin/env python3
"""A small GPT that torch.fx can trace, for the `pipestudio export --format torchrun` end-to-end test.

    /usr/bin/python3 tests/e2e/export_gpt.py onnx OUT.onnx     # the model, for `pipestudio import`
    /usr/bin/python3 tests/e2e/export_gpt.py reference STEPS   # single-process losses, one JSON line per step

`build_model()` is what the generated runner loads with `--model export_gpt:build_model`: it returns
(model, data, loss_fn), data(step) giving the step's whole batch (inputs tuple, target). Shapes are
fixed (sequence length = block size) so that symbolic tracing sees no data-dependent sizes.
"""
import json
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, EMBED, HEADS, SEQ, LAYERS = 64, 32, 4, 16, 4
BATCH = 8  # the whole batch of a step: micro-batches x micro-batch size in the plan
LR = 0.05


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(EMBED, 3 * EMBED)
        self.c_proj = nn.Linear(EMBED, EMBED)
        self.register_buffer("mask", torch.tril(torch.ones(SEQ, SEQ)).view(1, 1, SEQ, SEQ))

    def forward(self, x):  # (B, T, C)
        head = EMBED // HEADS
        qkv = self.c_attn(x)  # (B, T, 3C)
        q = qkv[:, :, :EMBED].reshape(-1, SEQ, HEADS, head).transpose(1, 2)  # (B, H, T, D)
        k = qkv[:, :, EMBED:2 * EMBED].reshape(-1, SEQ, HEADS, head).transpose(1, 2)
        v = qkv[:, :, 2 * EMBED:].reshape(-1, SEQ, HEADS, head).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / head ** 0.5)  # (B, H, T, T)
        att = att.masked_fill(self.mask == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(-1, SEQ, EMBED)  # (B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(EMBED)
        self.attn = Attention()
        self.ln_2 = nn.LayerNorm(EMBED)
        self.mlp = nn.Sequential(nn.Linear(EMBED, 4 * EMBED), nn.GELU(), nn.Linear(4 * EMBED, EMBED))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, EMBED)
        self.wpe = nn.Embedding(SEQ, EMBED)
        self.h = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(EMBED)
        self.lm_head = nn.Linear(EMBED, VOCAB, bias=False)
        self.register_buffer("pos", torch.arange(SEQ))

    def forward(self, idx):  # (B, T) token ids -> (B, T, V) logits
        x = self.wte(idx) + self.wpe(self.pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def data(step):
    g = torch.Generator().manual_seed(1000 + step)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)
    return (tokens[:, :-1],), tokens[:, 1:]


def loss_fn(logits, target):
    return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))


def build_model():
    return TinyGPT(), data, loss_fn


def reference(steps):
    """The same training without a pipeline: one process, the whole batch at once."""
    torch.manual_seed(0)  # the runner seeds the same way before build_model()
    model, batches, loss = build_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(steps):
        inputs, target = batches(step)
        opt.zero_grad()
        value = loss(model(*inputs), target)
        value.backward()
        opt.step()
        print(json.dumps({"step": step, "loss": value.item()}), flush=True)


def export_onnx(path):
    torch.manual_seed(0)
    model = TinyGPT().eval()
    tokens = torch.zeros(2, SEQ, dtype=torch.long)
    torch.onnx.export(model, (tokens,), path, opset_version=17, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}})


if __name__ == "__main__":
    if sys.argv[1] == "onnx":
        export_onnx(sys.argv[2])
    else:
        reference(int(sys.argv[2]))
