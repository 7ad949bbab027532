#!/usr/bin/env python3
"""PyTorch reference for the engine's GPT-2 training step (Debian's python3-torch, CPU, fp32).

    /usr/bin/python3 tests/engine/torch_reference.py DIR

DIR/manifest.json describes the model (the zoo's GPT-2 layout: pre-LN blocks, fused c_attn with
(in, out) weights, tanh GELU, tied lm_head), the optimizer and the tensors in DIR/input.bin
(fp32 parameters by name, int64 input_ids and labels). The script writes DIR/output.json with the
loss of the first forward and DIR/output.bin with every parameter's gradient after that backward,
then every parameter after `adamw_steps` AdamW steps on the same batch, in manifest order.
Exits 0 with "SKIP" on stdout when torch is missing.
"""
import json
import math
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"SKIP: {e}")
    sys.exit(0)


def load(directory):
    with open(os.path.join(directory, "manifest.json")) as f:
        manifest = json.load(f)
    raw = open(os.path.join(directory, "input.bin"), "rb").read()
    tensors = {}
    for t in manifest["tensors"]:
        dtype = np.float32 if t["dtype"] == "f32" else np.int64
        count = int(np.prod(t["shape"])) if t["shape"] else 1
        array = np.frombuffer(raw, dtype=dtype, count=count, offset=t["offset"]).reshape(t["shape"])
        tensors[t["name"]] = torch.tensor(array.copy())
    return manifest, tensors


def gpt2_loss(p, ids, labels, cfg):
    b, t = ids.shape
    heads, hidden = cfg["heads"], cfg["hidden"]
    d = hidden // heads
    x = p["wte.weight"][ids] + p["wpe.weight"][torch.arange(t, device=ids.device)]
    causal = torch.ones(t, t, dtype=torch.bool, device=ids.device).tril()
    for i in range(cfg["layers"]):
        def w(name):
            return p[f"h.{i}.{name}"]
        h = F.layer_norm(x, (hidden,), w("ln_1.weight"), w("ln_1.bias"), 1e-5)
        qkv = h @ w("attn.c_attn.weight") + w("attn.c_attn.bias")
        q, k, v = qkv.split(hidden, dim=-1)
        q, k, v = (z.reshape(b, t, heads, d).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(d))
        scores = scores.masked_fill(~causal, float("-inf"))
        ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, hidden)
        x = x + (ctx @ w("attn.c_proj.weight") + w("attn.c_proj.bias"))
        h = F.layer_norm(x, (hidden,), w("ln_2.weight"), w("ln_2.bias"), 1e-5)
        h = F.gelu(h @ w("mlp.c_fc.weight") + w("mlp.c_fc.bias"), approximate="tanh")
        x = x + (h @ w("mlp.c_proj.weight") + w("mlp.c_proj.bias"))
    x = F.layer_norm(x, (hidden,), p["ln_f.weight"], p["ln_f.bias"], 1e-5)
    logits = x @ p["wte.weight"].t()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def main(directory):
    torch.set_num_threads(2)
    manifest, tensors = load(directory)
    cfg = manifest["model"]
    names = [t["name"] for t in manifest["tensors"] if t["dtype"] == "f32"]
    params = {n: tensors[n].clone().requires_grad_(True) for n in names}
    ids, labels = tensors["input_ids"], tensors["labels"]
    loss = gpt2_loss(params, ids, labels, cfg)
    loss.backward()
    out = [params[n].grad.detach().numpy().astype(np.float32) for n in names]
    opt = manifest["optimizer"]
    adamw = torch.optim.AdamW(list(params.values()), lr=opt["lr"], betas=(opt["beta1"], opt["beta2"]), eps=opt["eps"],
                              weight_decay=opt["weight_decay"])
    for step in range(opt["adamw_steps"]):
        if step > 0:
            adamw.zero_grad()
            gpt2_loss(params, ids, labels, cfg).backward()
        adamw.step()
    out += [params[n].detach().numpy().astype(np.float32) for n in names]
    with open(os.path.join(directory, "output.bin"), "wb") as f:
        for a in out:
            f.write(a.tobytes())
    with open(os.path.join(directory, "output.json"), "w") as f:
        json.dump({"loss": loss.item(), "torch": torch.__version__}, f)
    print(f"loss {loss.item():.6f} (torch {torch.__version__})")


if __name__ == "__main__":
    main(sys.argv[1])
