#!/usr/bin/env python3
"""Exports tests/data/onnx_torch2/: small models exported by torch 2.x's default exporter.

Plain torch modules, and Hugging Face transformers architectures at small random configurations
(GPT-2, LLaMA with grouped-query attention, RMSNorm and rotary positions, BERT, ViT).

`torch.onnx.export(model, args, path)` with no other argument, as users of torch 2.9 and newer
call it (the torch.export-based exporter, opset 20 with torch 2.15), plus onnxruntime's output for
a fixed input as the numerics oracle. The import tests read the committed files and need neither
torch 2.x nor onnxruntime; this script (torch 2.x, onnx, onnxruntime; a venv) regenerates them:
    python -m venv v && v/bin/pip install torch onnx onnxruntime onnxscript transformers
    v/bin/python tests/data/make_torch2_onnx.py
manifest.json: per model its file, opset, input (name, shape, dtype, values file), torch's
parameter count, output shape and onnxruntime's output (raw little-endian float32 files).
"""
import json
import os

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn as nn
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "onnx_torch2")


class Mlp(nn.Module):  # LayerNormalization, Split(num_outputs), ReduceMean(axes input), Concat
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(16, 32)
        self.ln = nn.LayerNorm(32)
        self.l2 = nn.Linear(32, 4)

    def forward(self, x):
        h = self.ln(torch.relu(self.l1(x)))
        a, b = h.split(16, dim=-1)
        return self.l2(torch.cat([a * b.mean(-1, keepdim=True), b], -1))


class Block(nn.Module):  # pre-LN attention (SDPA, causal) and a tanh-GELU MLP
    def __init__(self, d=32, h=4):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.f1, self.f2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, -1)
        q, k, v = (t.view(B, T, self.h, -1).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, D)
        x = x + self.o(a)
        return x + self.f2(F.gelu(self.f1(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.pos = nn.Embedding(64, 32), nn.Embedding(16, 32)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.ln = nn.LayerNorm(32)
        self.head = nn.Linear(32, 64, bias=False)

    def forward(self, ids):
        x = self.emb(ids) + self.pos(torch.arange(ids.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


class GeluNet(nn.Module):  # exact GELU (Gelu without approximate), ReduceMax over an axis
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(24, 48), nn.Linear(48, 8)

    def forward(self, x):
        h = F.gelu(self.l1(x))
        return self.l2(h - h.amax(-1, keepdim=True))


class Logits(nn.Module):  # a transformers model's first output as one tensor
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        out = self.model(x)
        return out.logits if hasattr(out, "logits") else out.last_hidden_state


def transformers_models():
    import transformers as T
    small = dict(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4)
    ids = torch.randint(0, 64, (2, 16))
    yield "hf_gpt2", Logits(T.GPT2LMHeadModel(T.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=64,
                                                            n_positions=32, bos_token_id=0, eos_token_id=0))), ids
    yield "hf_llama_gqa", Logits(T.LlamaForCausalLM(T.LlamaConfig(num_key_value_heads=2, vocab_size=64,
                                                                 max_position_embeddings=32, **small))), ids
    yield "hf_bert", Logits(T.BertModel(T.BertConfig(vocab_size=64, max_position_embeddings=32, **small))), ids
    yield "hf_vit", Logits(T.ViTModel(T.ViTConfig(image_size=32, patch_size=8, **small))), torch.randn(2, 3, 32, 32)


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    manifest = []
    models = [
        ("mlp_ln_split", Mlp(), torch.randn(2, 16)),
        ("gpt_sdpa_gelu_tanh", Gpt(), torch.randint(0, 64, (2, 16))),
        ("gelu_amax", GeluNet(), torch.randn(3, 24)),
    ] + list(transformers_models())
    for name, model, x in models:
        model.eval()
        path = os.path.join(OUT, name + ".onnx")
        torch.onnx.export(model, (x,), path)
        m = onnx.load(path)
        opset = next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        input_name = session.get_inputs()[0].name
        feed = x.numpy()
        out = session.run(None, {input_name: feed})[0].astype(np.float32)
        feed.astype(feed.dtype.newbyteorder("<")).tofile(os.path.join(OUT, name + ".in.bin"))
        out.astype("<f4").tofile(os.path.join(OUT, name + ".out.bin"))
        manifest.append({
            "name": name, "file": name + ".onnx", "opset": opset, "torch": torch.__version__,
            "onnxruntime": ort.__version__, "input": input_name, "input_shape": list(feed.shape),
            "input_dtype": "int64" if feed.dtype == np.int64 else "float32",
            "parameters": sum(p.numel() for p in model.parameters()), "output_shape": list(out.shape),
            "nodes": len(m.graph.node), "ops": sorted({n.op_type for n in m.graph.node}),
        })
        print(name, "opset", opset, "nodes", len(m.graph.node))
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
