#!/usr/bin/env python3
"""Exports tests/data/onnx_torch2/: small models exported by torch 2.x's default exporter.

Plain torch modules (an MLP, a small GPT with SDPA attention, a CNN, a 1-D convolution stem, a U-Net
block with GroupNorm and InstanceNorm; with RMSNorm also at opset 23, where torch writes
GroupNormalization and RMSNormalization operators; the GPT and LLaMA also at opset 23, where
scaled_dot_product_attention becomes the Attention operator) and
Hugging Face transformers architectures at small random configurations: GPT-2, LLaMA with
grouped-query attention, RMSNorm and rotary positions, Qwen2, Mixtral (mixture of experts), BERT,
RoBERTa, ViT, BART and T5 (encoder-decoders), Whisper (speech).

`torch.onnx.export(model, args, path)` with no other argument, as users of torch 2.9 and newer
call it (the torch.export-based exporter, opset 20 with torch 2.15), and a subset also with the
TorchScript exporter at opset 17 (files *_ts17.onnx; the GPT also with its blocks and LayerNorms
as ONNX local functions, *_fn17.onnx), plus onnxruntime's output for a fixed input
as the numerics oracle (checked against torch's own output here). The import tests read the
committed files and need neither torch 2.x nor onnxruntime; this script (torch 2.x, onnx,
onnxruntime, onnxscript, transformers; a venv) regenerates them:
    python -m venv v && v/bin/pip install torch onnx onnxruntime onnxscript transformers
    v/bin/python tests/data/make_torch2_onnx.py
manifest.json: per model its file, exporter, opset, input (name, shape, dtype, values file), torch's
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


class Cnn(nn.Module):  # Conv2d, BatchNorm2d, MaxPool2d, adaptive average pooling, Flatten
    def __init__(self):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.b1(self.c1(x))), 2)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(F.relu(self.c2(h)), 1), 1))


class Tcn(nn.Module):  # Conv1d (dilated, strided), BatchNorm1d, MaxPool1d, AvgPool1d: a 1-D audio stem
    def __init__(self):
        super().__init__()
        self.c1, self.b1 = nn.Conv1d(4, 8, 3, padding=2, dilation=2), nn.BatchNorm1d(8)
        self.c2 = nn.Conv1d(8, 8, 5, stride=2, padding=2)
        self.fc = nn.Linear(8 * 4, 6)

    def forward(self, x):
        h = F.max_pool1d(F.gelu(self.b1(self.c1(x))), 2)
        return self.fc(F.avg_pool1d(torch.tanh(self.c2(h)), 2).flatten(1))


class UNetBlock(nn.Module):  # GroupNorm and SiLU (diffusion U-Nets), InstanceNorm2d, RMSNorm on features
    def __init__(self, rms=False):
        super().__init__()
        self.c1, self.gn = nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(2, 8)
        self.c2, self.inorm = nn.Conv2d(8, 8, 3, padding=1), nn.InstanceNorm2d(8)
        self.rms = nn.RMSNorm(8) if rms else nn.Identity()
        self.fc = nn.Linear(8, 5)
        with torch.no_grad():  # trained-looking norms (equal ones would be merged by the exporter)
            for p in list(self.gn.parameters()) + list(self.rms.parameters()):
                p.add_(0.1 * torch.randn_like(p))

    def forward(self, x):
        h = F.silu(self.gn(self.c1(x)))
        h = self.inorm(self.c2(h)) + h
        return self.fc(self.rms(h.mean((2, 3))))


class Gqa(nn.Module):  # SDPA with fewer key/value heads than query heads and a boolean padding mask
    def __init__(self, d=32, h=4, kv=2):
        super().__init__()
        self.h, self.kv, self.hd = h, kv, d // h
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, kv * self.hd), nn.Linear(d, kv * self.hd)
        self.o = nn.Linear(d, 6)

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.h, self.hd).transpose(1, 2)
        k = self.k(x).view(b, t, self.kv, self.hd).transpose(1, 2)
        v = self.v(x).view(b, t, self.kv, self.hd).transpose(1, 2)
        keep = torch.ones(t, t, dtype=torch.bool).triu(-3)  # a band: each query sees up to 3 back
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, enable_gqa=True)
        return self.o(a.transpose(1, 2).reshape(b, t, -1))


class Seq2Seq(nn.Module):  # an encoder-decoder's logits, the decoder fed the same ids
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids, decoder_input_ids=ids).logits


class Speech(nn.Module):  # Whisper: log-mel features (B, mels, frames) in, four decoder positions
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, feats):
        start = torch.zeros(feats.shape[0], 4, dtype=torch.long)
        return self.model(input_features=feats, decoder_input_ids=start).logits


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
    yield "hf_roberta", Logits(T.RobertaModel(T.RobertaConfig(vocab_size=64, max_position_embeddings=40, **small))), ids
    yield "hf_qwen2", Logits(T.Qwen2ForCausalLM(T.Qwen2Config(num_key_value_heads=2, vocab_size=64,
                                                             max_position_embeddings=32, **small))), ids
    # Mixture of experts: the "batched_mm" experts (the default grouped_mm is a custom op the
    # exporter cannot translate; "eager" loops over the experts a batch hits, which torch.export
    # refuses as data-dependent).
    yield "hf_mixtral", Logits(T.MixtralForCausalLM(T.MixtralConfig(
        num_key_value_heads=2, vocab_size=64, max_position_embeddings=32, num_local_experts=4, num_experts_per_tok=2,
        experts_implementation="batched_mm", **small))), ids
    seq2seq = dict(vocab_size=64, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                   decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64)
    yield "hf_bart", Seq2Seq(T.BartForConditionalGeneration(T.BartConfig(max_position_embeddings=32, **seq2seq))), ids
    # T5 with eager attention: its default (sdpa) path fails torch.export's decomposition (a view of
    # a transposed tensor) with transformers 5.x.
    yield "hf_t5", Seq2Seq(T.T5ForConditionalGeneration(T.T5Config(
        vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, decoder_start_token_id=0,
        attn_implementation="eager"))), ids
    yield "hf_whisper", Speech(T.WhisperForConditionalGeneration(T.WhisperConfig(
        num_mel_bins=8, max_source_positions=16, max_target_positions=16, decoder_start_token_id=0, pad_token_id=0,
        **seq2seq))), torch.randn(2, 8, 32)


# Also exported by the TorchScript exporter at opset 17 (torch.onnx.export(..., dynamo=False,
# opset_version=17)), the path users of older code still take: weights inside the file.
TORCHSCRIPT_SUBSET = ("mlp_ln_split", "gpt_sdpa_gelu_tanh", "cnn_bn_pool", "unet_groupnorm", "hf_gpt2", "hf_bert")


# Base models without a head give features (trained on mse); the others logits or classes
# (cross-entropy), as `pipestudio import --loss` would be asked.
FEATURE_MODELS = ("hf_bert", "hf_roberta", "hf_vit")


def export_one(name, model, x, exporter):
    path = os.path.join(OUT, name + ".onnx")
    if exporter == "dynamo":
        torch.onnx.export(model, (x,), path)
    elif exporter == "dynamo-opset23":  # GroupNormalization-21 and RMSNormalization-23 as operators
        torch.onnx.export(model, (x,), path, opset_version=23)
    elif exporter == "torchscript-functions":  # each Block and LayerNorm an ONNX local function
        torch.onnx.export(model, (x,), path, dynamo=False, opset_version=17,
                          export_modules_as_functions={Block, nn.LayerNorm})
    else:
        torch.onnx.export(model, (x,), path, dynamo=False, opset_version=17)
    m = onnx.load(path)
    opset = next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    input_name = session.get_inputs()[0].name
    feed = x.numpy()
    out = session.run(None, {input_name: feed})[0].astype(np.float32)
    with torch.no_grad():
        expected = model(x)
    assert np.allclose(out, expected.numpy(), rtol=1e-3, atol=1e-4), name + ": onnxruntime differs from torch"
    feed.astype(feed.dtype.newbyteorder("<")).tofile(os.path.join(OUT, name + ".in.bin"))
    out.astype("<f4").tofile(os.path.join(OUT, name + ".out.bin"))
    print(name, exporter, "opset", opset, "nodes", len(m.graph.node))
    ops = sorted({n.op_type for n in m.graph.node})
    # Both exporters fold an eval-mode BatchNorm into the convolution before it: its scale and shift
    # become part of that convolution's weight and bias and are no longer parameters of their own.
    folded = 0 if "BatchNormalization" in ops else sum(
        p.numel() for mod in model.modules() if isinstance(mod, nn.modules.batchnorm._BatchNorm)
        for p in mod.parameters())
    return {
        "name": name, "file": name + ".onnx", "exporter": exporter, "opset": opset, "torch": torch.__version__,
        "onnxruntime": ort.__version__, "input": input_name, "input_shape": list(feed.shape),
        "input_dtype": "int64" if feed.dtype == np.int64 else "float32",
        "parameters": sum(p.numel() for p in model.parameters()), "batchnorm_parameters_folded": folded,
        "loss": "mse" if name.replace("_ts17", "") in FEATURE_MODELS else "cross-entropy",
        "output_shape": list(out.shape), "nodes": len(m.graph.node), "ops": ops, "functions": len(m.functions),
    }


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    manifest = []
    models = [
        ("mlp_ln_split", Mlp(), torch.randn(2, 16)),
        ("gpt_sdpa_gelu_tanh", Gpt(), torch.randint(0, 64, (2, 16))),
        ("gelu_amax", GeluNet(), torch.randn(3, 24)),
        ("cnn_bn_pool", Cnn(), torch.randn(2, 3, 16, 16)),
        ("tcn_conv1d", Tcn(), torch.randn(2, 4, 32)),
        ("unet_groupnorm", UNetBlock(), torch.randn(2, 3, 8, 8)),
    ] + list(transformers_models())
    for name, model, x in models:
        model.eval()
        manifest.append(export_one(name, model, x, "dynamo"))
        if name in TORCHSCRIPT_SUBSET:
            manifest.append(export_one(name + "_ts17", model, x, "torchscript"))
        if name == "gpt_sdpa_gelu_tanh":
            manifest.append(export_one(name + "_fn17", model, x, "torchscript-functions"))
        if name == "unet_groupnorm":
            torch.manual_seed(1)
            manifest.append(export_one("norms_opset23", UNetBlock(rms=True).eval(), x, "dynamo-opset23"))
        if name in ("gpt_sdpa_gelu_tanh", "hf_llama_gqa"):  # SDPA as the Attention operator
            manifest.append(export_one(name + "_opset23", model, x, "dynamo-opset23"))
        if name == "gpt_sdpa_gelu_tanh":  # grouped-query SDPA with a boolean mask
            manifest.append(export_one("gqa_sdpa_opset23", Gqa().eval(), torch.randn(2, 16, 32), "dynamo-opset23"))
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
