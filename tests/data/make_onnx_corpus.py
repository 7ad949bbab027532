#!/usr/bin/env python3
"""A corpus of models the ONNX importer was not written against: torchvision's classification
architectures, nn.Transformer variants, hand-written GPT-2 and BERT-like models and an MLP, exported
by Debian's python3-torch at opset 13 and 17 (eval mode, static shapes unless noted), for
tests/engine/onnx_corpus_test.cpp.

    /usr/bin/python3 tests/data/make_onnx_corpus.py OUTPUT_DIR

Models are small (narrow widths, 64x64 images) so the whole corpus exports in well under two
minutes on two cores. Two initialisations: "random" is the module as torch creates it (equal
biases and norm weights, which the exporter deduplicates into one initializer plus Identity
nodes); "trained" gives every parameter its own N(0, 0.02) values (and BatchNorm statistics of
their own), as tests/data/make_onnx_fixtures.py does.

For every export, <stem> = <name>-op<opset>: <stem>.onnx, <stem>.in.bin (the inputs concatenated
in input order, float32 or int64 little-endian row-major), <stem>.out.bin (torch's first output in
eval mode, float32), and an entry of manifest.json (see entry() for the fields). The parameter
count the importer must reproduce ("expected_parameters") follows one rule:
  - an Identity node reading a float initializer is an alias: its own parameter with the shared
    initial value, so the count is torch's trainable count ("torch");
  - except where eval export folded BatchNorm into the preceding Conv ("bn_folded"): the count is
    the elements of the float initializers the nodes read, without BatchNormalization's running
    mean and variance, each Identity alias of a float initializer counted as its own copy
    ("onnx_initializers").
Both numbers are recorded. An export that fails is recorded as {"name", "opset", "error"} and
printed; it does not stop the script.

Also writes pairs/ and pairs.json: every "random" model exported at opset 17 with fixed shapes and
with dynamic axes (export_pairs), and deep_mlp_10k.onnx (a 10,000-node residual MLP, needs only python3-onnx) for the
importer's speed check.
"""
import collections
import json
import os
import sys
import time
import traceback

from onnx_corpus_vision import torchvision_models  # the sibling module: torchvision models at small widths
from onnx_corpus_families import ellipsis_einsum_class, rotary_gpt_class, unet_block_class  # the families there

try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:  # the corpus tests skip when the manifest is missing
    print(f"ONNX corpus skipped: {e} (install python3-onnx python3-torch python3-torchvision)")
    sys.exit(0)

OPSETS = (13, 17)
BIG_GRAPH_LAYERS = 2500  # 4 nodes each: MatMul, Add, Relu, residual Add
BIG_GRAPH_WIDTH = 16


# ---------------------------------------------------------------------------------------------
# The 10,000-node graph (onnx only)


def write_big_graph(out_dir):
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x = "input"
    for i in range(BIG_GRAPH_LAYERS):
        w = rng.normal(0.0, 0.02, (BIG_GRAPH_WIDTH, BIG_GRAPH_WIDTH)).astype(np.float32)
        b = rng.normal(0.0, 0.02, (BIG_GRAPH_WIDTH,)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"l{i}.weight"), numpy_helper.from_array(b, f"l{i}.bias")]
        y = "output" if i == BIG_GRAPH_LAYERS - 1 else f"l{i}.out"
        nodes += [
            helper.make_node("MatMul", [x, f"l{i}.weight"], [f"l{i}.mm"], name=f"l{i}.matmul"),
            helper.make_node("Add", [f"l{i}.mm", f"l{i}.bias"], [f"l{i}.lin"], name=f"l{i}.bias_add"),
            helper.make_node("Relu", [f"l{i}.lin"], [f"l{i}.act"], name=f"l{i}.relu"),
            helper.make_node("Add", [x, f"l{i}.act"], [y], name=f"l{i}.residual"),
        ]
        x = y
    graph = helper.make_graph(
        nodes, "deep_mlp_10k",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", BIG_GRAPH_WIDTH])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", BIG_GRAPH_WIDTH])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="ps-corpus")
    onnx.checker.check_model(model)
    path = os.path.join(out_dir, "deep_mlp_10k.onnx")
    onnx.save(model, path)
    with open(os.path.join(out_dir, "deep_mlp_10k.json"), "w") as f:
        json.dump({"file": "deep_mlp_10k.onnx", "onnx_nodes": len(nodes),
                   "parameters": BIG_GRAPH_LAYERS * (BIG_GRAPH_WIDTH + 1) * BIG_GRAPH_WIDTH}, f, indent=2)
    print(f"deep_mlp_10k.onnx: {len(nodes)} nodes")


# ---------------------------------------------------------------------------------------------
# Hand-written models


def define_modules(torch):
    nn = torch.nn

    class CausalSelfAttention(nn.Module):
        def __init__(self, d, heads, idiom):
            super().__init__()
            self.heads, self.idiom = heads, idiom
            self.c_attn = nn.Linear(d, 3 * d)
            self.c_proj = nn.Linear(d, d)

        def forward(self, x):  # (B, T, C)
            b, t, c = x.shape
            q, k, v = self.c_attn(x).split(c, dim=2)
            q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))  # (B, H, T, D)
            scores = q @ k.transpose(-2, -1) / (c // self.heads) ** 0.5  # (B, H, T, T)
            if self.idiom == "tril":
                mask = torch.tril(torch.ones(t, t, device=x.device))
                scores = scores.masked_fill(mask == 0, float("-inf"))
            else:
                pos = torch.arange(t, device=x.device)
                mask = pos[:, None] >= pos[None, :]
                scores = torch.where(mask, scores, torch.tensor(float("-inf")))
            y = torch.softmax(scores, dim=-1) @ v  # (B, H, T, D)
            return self.c_proj(y.transpose(1, 2).reshape(b, t, c))

    class GptBlock(nn.Module):
        def __init__(self, d, heads, idiom):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.attn = CausalSelfAttention(d, heads, idiom)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d), nn.Dropout(0.1))

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class Gpt(nn.Module):
        """GPT-2's layout (token + learned position embedding, pre-norm blocks, causal attention),
        with its own lm_head: tying it to wte would export a transposed copy of the table."""

        def __init__(self, idiom, vocab=64, block=32, d=32, heads=4, layers=2):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block, d)
            self.h = nn.ModuleList(GptBlock(d, heads, idiom) for _ in range(layers))
            self.ln_f = nn.LayerNorm(d)
            self.lm_head = nn.Linear(d, vocab, bias=False)

        def forward(self, idx):  # (B, T) int64
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            return self.lm_head(self.ln_f(x))  # (B, T, V)

    class BertLayer(nn.Module):
        def __init__(self, d, heads, ff):
            super().__init__()
            self.heads = heads
            self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
            self.attn_out, self.ln_1 = nn.Linear(d, d), nn.LayerNorm(d, eps=1e-12)
            self.intermediate, self.output = nn.Linear(d, ff), nn.Linear(ff, d)
            self.ln_2 = nn.LayerNorm(d, eps=1e-12)

        def forward(self, x, additive_mask):  # (B, T, C), (B, 1, 1, T)
            b, t, c = x.shape
            split = lambda z: z.view(b, t, self.heads, c // self.heads).permute(0, 2, 1, 3)  # noqa: E731
            q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
            scores = torch.matmul(q, k.transpose(-1, -2)) / (c // self.heads) ** 0.5 + additive_mask
            ctx = torch.matmul(torch.softmax(scores, dim=-1), v).permute(0, 2, 1, 3).reshape(b, t, c)
            x = self.ln_1(x + self.attn_out(ctx))
            return self.ln_2(x + self.output(nn.functional.gelu(self.intermediate(x))))

    class Bert(nn.Module):
        """BERT's embeddings (word + position + token type, LayerNorm) and post-norm layers with the
        padding mask turned into an additive -10000 mask, as Hugging Face's BertModel does."""

        def __init__(self, vocab=64, block=32, d=32, heads=4, ff=64, layers=2):
            super().__init__()
            self.word, self.position = nn.Embedding(vocab, d), nn.Embedding(block, d)
            self.token_type = nn.Embedding(2, d)
            self.ln = nn.LayerNorm(d, eps=1e-12)
            self.layers = nn.ModuleList(BertLayer(d, heads, ff) for _ in range(layers))
            self.pooler = nn.Linear(d, d)

        def forward(self, input_ids, attention_mask):  # (B, T) int64 each
            pos = torch.arange(input_ids.shape[1], device=input_ids.device)
            x = self.ln(self.word(input_ids) + self.position(pos) + self.token_type(torch.zeros_like(input_ids)))
            additive = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
            for layer in self.layers:
                x = layer(x, additive)
            return torch.tanh(self.pooler(x[:, 0]))  # (B, C)

    class Mlp(nn.Module):
        def __init__(self, d_in=32, hidden=64, classes=10):
            super().__init__()
            self.net = nn.Sequential(
                nn.Linear(d_in, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(0.2),
                nn.Linear(hidden, hidden), nn.BatchNorm1d(hidden), nn.GELU(), nn.Dropout(0.2),
                nn.Linear(hidden, classes))

        def forward(self, x):
            return self.net(x)

    class UpDecoder(nn.Module):
        """A U-Net-style up path as users write one: a strided convolution down, transposed
        convolutions back up (stride 2 with output_padding; grouped and dilated), a skip connection,
        then a classifier head."""

        def __init__(self, classes=10):
            super().__init__()
            self.down = nn.Conv2d(3, 8, 3, stride=2, padding=1)
            self.up = nn.ConvTranspose2d(8, 8, 3, stride=2, padding=1, output_padding=1)
            self.mix = nn.ConvTranspose2d(8, 4, 3, padding=2, groups=2, dilation=2)
            self.head = nn.Linear(4, classes)

        def forward(self, x):
            y = torch.relu(self.up(torch.relu(self.down(x))))
            y = torch.relu(self.mix(y + x.mean(1, keepdim=True)))
            return self.head(y.mean((2, 3)))

    class Volume3d(nn.Module):
        """A 3-D convolutional net over video clips or volumes, as users write one: a Conv3d stem
        strided over space, BatchNorm3d, MaxPool3d, a grouped convolution dilated in time with a
        residual, AvgPool3d, a ConvTranspose3d back up (output_padding), then a classifier over the
        pooled features (AdaptiveAvgPool3d: GlobalAveragePool over the clip)."""

        def __init__(self, classes=10):
            super().__init__()
            self.stem = nn.Conv3d(3, 8, 3, stride=(1, 2, 2), padding=1)
            self.bn = nn.BatchNorm3d(8)
            self.max = nn.MaxPool3d((1, 3, 3), stride=1, padding=(0, 1, 1))
            self.avg = nn.AvgPool3d((3, 2, 2), stride=(1, 2, 2), padding=(1, 0, 0), count_include_pad=False)
            self.mix = nn.Conv3d(8, 8, (3, 1, 3), padding=(2, 0, 1), dilation=(2, 1, 1), groups=2)
            self.up = nn.ConvTranspose3d(8, 4, 3, stride=(1, 2, 2), padding=1, output_padding=(0, 1, 1))
            self.pool = nn.AdaptiveAvgPool3d(1)
            self.head = nn.Linear(4, classes)

        def forward(self, x):  # (B, 3, T, H, W)
            y = self.max(torch.relu(self.bn(self.stem(x))))
            y = self.avg(torch.relu(self.mix(y)) + y)
            y = torch.relu(self.up(y))
            return self.head(self.pool(y).flatten(1))

    class TemporalUpsampler(nn.Module):
        """A 1-D decoder over time (audio or TCN upsampling): a strided Conv1d down, ConvTranspose1d
        back up (stride 2 with output_padding; grouped and dilated), a skip, a classifier head."""

        def __init__(self, classes=10):
            super().__init__()
            self.down = nn.Conv1d(4, 8, 5, stride=2, padding=2)
            self.up = nn.ConvTranspose1d(8, 8, 3, stride=2, padding=1, output_padding=1)
            self.mix = nn.ConvTranspose1d(8, 4, 3, padding=2, groups=2, dilation=2)
            self.head = nn.Linear(4, classes)

        def forward(self, x):  # (B, 4, L)
            y = torch.relu(self.up(torch.relu(self.down(x))))
            y = torch.relu(self.mix(y + x.mean(1, keepdim=True)))
            return self.head(y.mean(2))

    class EinsumExperts(nn.Module):
        """Mixture-of-experts experts written with einsum, as users write them: every token through
        every expert ("btd,edf->btef": a batch index, kept and summed groups), gated, then summed
        back over experts and their width ("btef,efd->btd")."""

        def __init__(self, d=16, experts=4, ff=8, classes=10):
            super().__init__()
            self.w_in = nn.Parameter(torch.randn(experts, d, ff) / d ** 0.5)
            self.w_out = nn.Parameter(torch.randn(experts, ff, d) / ff ** 0.5)
            self.gate = nn.Linear(d, experts)
            self.head = nn.Linear(d, classes)

        def forward(self, x):  # (B, T, d)
            h = torch.nn.functional.gelu(torch.einsum("btd,edf->btef", x, self.w_in))
            h = h * torch.softmax(self.gate(x), dim=-1).unsqueeze(-1)
            y = x + torch.einsum("btef,efd->btd", h, self.w_out)
            return self.head(y.mean(1))

    class TopKGate(nn.Module):
        """A top-k router as users write one: the k largest gate logits kept (softmax over them),
        scattered back into a dense weight per expert (torch.scatter), the experts' outputs mixed."""

        def __init__(self, d=16, experts=4, k=2, classes=10):
            super().__init__()
            self.k = k
            self.gate = nn.Linear(d, experts)
            self.experts = nn.Linear(d, experts * d)
            self.head = nn.Linear(d, classes)

        def forward(self, x):  # (B, d)
            logits = self.gate(x)
            top = logits.topk(self.k, dim=-1)
            weights = torch.zeros_like(logits).scatter(-1, top.indices, torch.softmax(top.values, dim=-1))
            outs = self.experts(x).reshape(x.shape[0], weights.shape[1], -1)  # (B, E, d)
            return self.head((weights.unsqueeze(-1) * outs).sum(1))

    class CausalTransformer(nn.Module):
        """nn.Transformer with the causal target mask computed in forward, as users write it:
        generate_square_subsequent_mask (triu, opset 14 and later) or from position comparisons."""

        def __init__(self, mask="triu", **kw):
            super().__init__()
            self.mask = mask
            self.batch_first = kw.get("batch_first", False)
            self.transformer = nn.Transformer(**kw)

        def forward(self, src, tgt):
            t = tgt.shape[1] if self.batch_first else tgt.shape[0]
            if self.mask == "triu":
                mask = nn.Transformer.generate_square_subsequent_mask(t)
            else:
                pos = torch.arange(t)
                mask = torch.zeros(t, t).masked_fill(pos[None, :] > pos[:, None], float("-inf"))
            return self.transformer(src, tgt, tgt_mask=mask)

    class Decoder(nn.Module):
        """TransformerDecoder over an encoder's memory (a second input)."""

        def __init__(self, d, heads, ff, layers, **kw):
            super().__init__()
            self.decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(d, heads, ff, **kw), layers,
                                                 norm=nn.LayerNorm(d) if kw.get("norm_first") else None)

        def forward(self, tgt, memory):
            return self.decoder(tgt, memory)

    return {"Gpt": Gpt, "RotaryGpt": rotary_gpt_class(torch), "UNetBlock": unet_block_class(torch), "EllipsisEinsum": ellipsis_einsum_class(torch), "Bert": Bert,
            "Mlp": Mlp, "CausalTransformer": CausalTransformer, "Decoder": Decoder,
            "UpDecoder": UpDecoder, "EinsumExperts": EinsumExperts, "TopKGate": TopKGate, "Volume3d": Volume3d,
            "TemporalUpsampler": TemporalUpsampler}


# ---------------------------------------------------------------------------------------------
# The corpus: (name, factory, inputs, dynamic axes, variant)


def corpus(torch, torchvision):
    nn = torch.nn
    hand = define_modules(torch)
    d, heads, ff = 32, 4, 64
    g = torch.Generator().manual_seed(1)
    image = lambda shape: torch.randn(*shape, generator=g)  # noqa: E731
    tokens = lambda b, t, vocab=64: torch.randint(0, vocab, (b, t), generator=g)  # noqa: E731

    vision = list(torchvision_models(torch, torchvision))
    for name, factory, shape in vision:
        yield name, factory, [("input", image(shape))], None, "random"
    for name, factory, shape in vision:
        if name in ("resnet", "vit", "mobilenet_v3_small", "densenet"):
            yield name + "_trained", factory, [("input", image(shape))], None, "trained"

    def encoder(norm_first, activation, batch_first):
        layer = nn.TransformerEncoderLayer(d, heads, ff, activation=activation, batch_first=batch_first,
                                           norm_first=norm_first)
        return nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(d) if norm_first else None,
                                     enable_nested_tensor=False)

    seq_bf, seq_sf = (2, 16, d), (16, 2, d)
    yield "encoder_post_relu", lambda: encoder(False, "relu", True), [("input", image(seq_bf))], None, "random"
    yield "encoder_pre_gelu_seqfirst", lambda: encoder(True, "gelu", False), [("input", image(seq_sf))], None, "random"
    yield "encoder_post_relu_trained", lambda: encoder(False, "relu", True), [("input", image(seq_bf))], None, \
        "trained"
    yield "decoder_post_gelu", lambda: hand["Decoder"](d, heads, ff, 2, activation="gelu", batch_first=True), \
        [("input", image((2, 8, d))), ("memory", image((2, 16, d)))], None, "random"
    yield "decoder_pre_relu_seqfirst", lambda: hand["Decoder"](d, heads, ff, 2, norm_first=True, batch_first=False), \
        [("input", image((8, 2, d))), ("memory", image((16, 2, d)))], None, "random"

    def transformer(**kw):
        return hand["CausalTransformer"](d_model=d, nhead=heads, num_encoder_layers=2, num_decoder_layers=2,
                                         dim_feedforward=ff, **kw)

    yield "transformer_causal_post_relu", lambda: transformer(batch_first=True), \
        [("src", image((2, 16, d))), ("tgt", image((2, 8, d)))], None, "random"
    yield "transformer_causal_pre_gelu_seqfirst", lambda: transformer(norm_first=True, activation="gelu"), \
        [("src", image((16, 2, d))), ("tgt", image((8, 2, d)))], None, "random"
    yield "transformer_causal_trained", lambda: transformer(batch_first=True), \
        [("src", image((2, 16, d))), ("tgt", image((2, 8, d)))], None, "trained"
    yield "transformer_causal_arange", lambda: transformer(mask="arange", batch_first=True), \
        [("src", image((2, 16, d))), ("tgt", image((2, 8, d)))], None, "random"

    tokens_axes = {"idx": {0: "batch", 1: "seq"}, "output": {0: "batch", 1: "seq"}}
    for idiom in ("tril", "arange"):
        ids = tokens(2, 16)
        yield f"gpt_{idiom}", lambda idiom=idiom: hand["Gpt"](idiom), [("idx", ids)], tokens_axes, "random"
        yield f"gpt_{idiom}_trained", lambda idiom=idiom: hand["Gpt"](idiom), [("idx", ids)], tokens_axes, "trained"
    for idiom in ("matmul", "outer"):
        yield f"gpt_rotary_{idiom}", lambda idiom=idiom: hand["RotaryGpt"](idiom), [("idx", tokens(2, 16))], \
            tokens_axes, "random"
    mask = torch.ones(2, 16, dtype=torch.int64)
    mask[1, 11:] = 0  # the second sequence is padded
    bert_inputs = [("input_ids", tokens(2, 16)), ("attention_mask", mask)]
    bert_axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    yield "bert_padding", lambda: hand["Bert"](), bert_inputs, bert_axes, "random"
    yield "bert_padding_trained", lambda: hand["Bert"](), bert_inputs, bert_axes, "trained"
    yield "mlp_bn_dropout", lambda: hand["Mlp"](), [("input", image((4, 32)))], None, "random"
    yield "mlp_bn_dropout_trained", lambda: hand["Mlp"](), [("input", image((4, 32)))], None, "trained"
    yield "updecoder_convtranspose", lambda: hand["UpDecoder"](), [("input", image((2, 3, 16, 16)))], None, "random"
    yield "volume_conv3d", lambda: hand["Volume3d"](), [("input", image((2, 3, 4, 8, 8)))], None, "random"
    yield "volume_conv3d_trained", lambda: hand["Volume3d"](), [("input", image((2, 3, 4, 8, 8)))], None, "trained"
    yield "temporal_convtranspose1d", lambda: hand["TemporalUpsampler"](), [("input", image((2, 4, 16)))], None, \
        "random"
    yield "unet_groupnorm_block", lambda: hand["UNetBlock"](), [("input", image((2, 8, 8, 8)))], None, "random"
    yield "unet_groupnorm_block_trained", lambda: hand["UNetBlock"](), [("input", image((2, 8, 8, 8)))], None, \
        "trained"
    yield "experts_einsum", lambda: hand["EinsumExperts"](), [("input", image((2, 8, 16)))], None, "random"
    yield "ellipsis_einsum", lambda: hand["EllipsisEinsum"](), [("input", image((2, 7, 16)))], None, "random"
    yield "topk_gate_scatter", lambda: hand["TopKGate"](), [("input", image((4, 16)))], None, "random"


# ---------------------------------------------------------------------------------------------
# Export and manifest


def make_trained_like(torch, model):
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02)
        for m in model.modules():  # BatchNorm statistics of their own, so folding them is visible
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)


def onnx_parameter_count(graph):
    """Elements of float initializers read by nodes (not as BatchNormalization's running mean or
    variance), an Identity of a float initializer counted as its own copy: computed here
    independently of the importer."""
    floats = {i.name: int(np.prod(i.dims)) for i in graph.initializer if i.data_type == TensorProto.FLOAT}
    aliases = {n.output[0]: n.input[0] for n in graph.node if n.op_type == "Identity" and n.input[0] in floats}
    sources = dict(floats)
    sources.update({alias: floats[src] for alias, src in aliases.items()})
    counted = set()
    for n in graph.node:
        if n.op_type == "Identity" and n.input and n.input[0] in floats:
            continue  # creates an alias, is not a use of the initializer
        for slot, name in enumerate(n.input):
            if n.op_type == "BatchNormalization" and slot in (3, 4):
                continue
            if name in sources:
                counted.add(name)
    return sum(sources[name] for name in counted)


def entry(name, variant, model, args, names, opset, path, outs, torch):
    onnx_model = onnx.load(path)
    graph = onnx_model.graph
    histogram = collections.Counter(n.op_type for n in graph.node)
    bn_modules = sum(1 for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm))
    bn_folded = bn_modules > histogram.get("BatchNormalization", 0)
    torch_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    onnx_params = onnx_parameter_count(graph)
    dtype = {torch.float32: "float32", torch.int64: "int64"}
    return {
        "name": name,
        "variant": variant,
        "file": os.path.basename(path),
        "opset": opset,
        "inputs": [{"name": n, "shape": list(a.shape), "dtype": dtype[a.dtype]} for n, a in zip(names, args)],
        "input_shapes": [list(a.shape) for a in args],
        "dynamic_inputs": [i.name for i in graph.input
                           if any(dim.dim_param for dim in i.type.tensor_type.shape.dim)],
        "output_shapes": [list(o.shape) for o in outs],
        "torch_parameters": torch_params,
        "onnx_parameters": onnx_params,
        "bn_folded": bn_folded,
        "expected_parameters": onnx_params if bn_folded else torch_params,
        "expected_rule": "onnx_initializers" if bn_folded else "torch",
        # Under the torch rule, False where the export changed what is stored (a gathered bias table
        # folded into a constant, swin): the expected count stays torch's.
        "onnx_matches_torch": onnx_params == torch_params,
        "state_bytes": sum(t.numel() * t.element_size() for t in model.state_dict().values()),
        "onnx_nodes": len(graph.node),
        "identity_aliases": sum(1 for n in graph.node if n.op_type == "Identity"),
        "op_histogram": dict(sorted(histogram.items())),
    }


# Exported without torch's constant folding: it gathers swin's relative-position bias table by its
# index buffer into a larger constant, so the table itself (a parameter) is no longer in the file.
UNFOLDED = {"swin"}


def export(name, factory, inputs, axes, variant, out_dir, torch):
    torch.manual_seed(0)
    model = factory().eval()
    if variant == "trained":
        make_trained_like(torch, model)
    names = [n for n, _ in inputs]
    args = tuple(a for _, a in inputs)
    with torch.no_grad():
        outs = model(*args)
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    entries = []
    for opset in OPSETS:
        stem = os.path.join(out_dir, f"{name}-op{opset}")
        path = stem + ".onnx"
        start = time.monotonic()
        try:
            torch.onnx.export(model, args, path, opset_version=opset, input_names=names,
                              output_names=["output"] + [f"output{i}" for i in range(1, len(outs))],
                              dynamic_axes=axes, do_constant_folding=name not in UNFOLDED)
            onnx.checker.check_model(onnx.load(path))
        except Exception as e:  # recorded, not fatal: the exporter's own limits are findings too
            message = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            print(f"{name}-op{opset}: export failed: {message}")
            entries.append({"name": name, "variant": variant, "opset": opset, "error": message})
            if os.path.exists(path):
                os.remove(path)
            continue
        with open(stem + ".in.bin", "wb") as f:
            for a in args:
                f.write(a.numpy().astype(np.int64 if a.dtype == torch.int64 else np.float32).tobytes())
        with open(stem + ".out.bin", "wb") as f:
            f.write(outs[0].numpy().astype(np.float32).tobytes())
        e = entry(name, variant, model, args, names, opset, path, outs, torch)
        e["export_s"] = round(time.monotonic() - start, 3)
        entries.append(e)
        mismatch = "" if e["onnx_parameters"] == e["torch_parameters"] else \
            f" (onnx initializers {e['onnx_parameters']})"
        print(f"{e['file']}: {e['onnx_nodes']} nodes, {e['torch_parameters']} parameters{mismatch}, "
              f"expected {e['expected_parameters']} ({e['expected_rule']}), {e['export_s']} s")
    return entries


# ---------------------------------------------------------------------------------------------
# Shape pairs: every model exported once with fixed shapes (torch.onnx.export's default) and once
# with a dynamic batch (and sequence, where the corpus names one), for the importer's
# re-specialisation check (tests/engine/onnx_corpus_test.cpp): pairs.json.


def export_pairs(out_dir, torch, torchvision):
    sub = os.path.join(out_dir, "pairs")
    os.makedirs(sub, exist_ok=True)
    pairs = []
    for name, factory, inputs, axes, variant in corpus(torch, torchvision):
        if variant != "random":
            continue
        torch.manual_seed(0)
        names = [n for n, _ in inputs]
        args = tuple(a for _, a in inputs)
        batch_axis = 1 if "seqfirst" in name else 0
        dynamic = axes or {n: {batch_axis: "batch"} for n in names + ["output"]}
        entry = {"name": name, "batch_axis": batch_axis,
                 "sequence": any("seq" in str(v) for a in dynamic.values() for v in a.values()),
                 "input_shapes": [list(a.shape) for a in args]}
        try:
            model = factory().eval()
            with torch.no_grad():
                outs = model(*args)
            n_out = len(outs) if isinstance(outs, (tuple, list)) else 1
            out_names = ["output"] + [f"output{i}" for i in range(1, n_out)]
            for kind, ax in (("fixed", None), ("dynamic", dynamic)):
                path = os.path.join(sub, f"{name}-{kind}.onnx")
                torch.onnx.export(model, args, path, opset_version=17, input_names=names, output_names=out_names,
                                  dynamic_axes=ax, do_constant_folding=name not in UNFOLDED)
                entry[kind] = os.path.join("pairs", os.path.basename(path))
        except Exception as e:  # the exporter's limits are recorded, not fatal
            entry["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            print(f"pairs/{name}: export failed: {entry['error']}")
        pairs.append(entry)
    with open(os.path.join(out_dir, "pairs.json"), "w") as f:
        json.dump(pairs, f, indent=2)
    print(f"shape pairs: {sum(1 for p in pairs if 'error' not in p)} of {len(pairs)} models exported both ways")


def main(argv):
    out_dir = argv[0] if argv else "onnx-corpus"
    os.makedirs(out_dir, exist_ok=True)
    start = time.monotonic()
    write_big_graph(out_dir)
    try:
        import torch
        import torchvision
    except ImportError as e:
        print(f"ONNX corpus skipped: {e} (install python3-torch python3-torchvision)")
        return 0
    import warnings
    warnings.filterwarnings("ignore")  # the exporter's tracer warnings on every shape-dependent line
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    manifest = []
    for name, factory, inputs, axes, variant in corpus(torch, torchvision):
        try:
            manifest += export(name, factory, inputs, axes, variant, out_dir, torch)
        except Exception as e:  # a model that cannot even run in torch: recorded, not fatal
            traceback.print_exc()
            for opset in OPSETS:
                manifest.append({"name": name, "variant": variant, "opset": opset, "error": f"{type(e).__name__}: {e}"})
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    export_pairs(out_dir, torch, torchvision)
    failed = sum(1 for e in manifest if "error" in e)
    models = len({e["name"] for e in manifest})
    print(f"onnx corpus: {models} models, {len(manifest) - failed} exports, {failed} failed, "
          f"{time.monotonic() - start:.1f} s in {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
