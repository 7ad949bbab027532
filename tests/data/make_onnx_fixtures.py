#!/usr/bin/env python3
"""Exports real PyTorch modules (written by the PyTorch and torchvision authors, random weights) to
ONNX for PipeStudio's importer tests, with a manifest of what the import must reproduce.

    /usr/bin/python3 tests/data/make_onnx_fixtures.py OUTPUT_DIR [--small]

For every module and opset 13 and 17: <name>-op<opset>.onnx, and manifest.json with the parameter
count (sum of p.numel()), the ONNX node count, how many of those are Constant nodes and integer
shape computations, and the shape
of the first output for the bound batch/sequence sizes; <name>-op<opset>.in.bin and .out.bin hold
the inputs and torch's output in eval mode (float32, row-major).

fixed_shapes/: modules exported twice at opset 17, with fixed shapes (torch.onnx.export's default)
and with dynamic axes (a small LM, an MLP whose views carry the batch and, without --small,
torchvision's AlexNet stored without its weights), for the re-specialisation tests.
"""
import json
import os
import sys

try:
    import onnx
    import torch
except ImportError as e:  # the tests that need these fixtures skip with this message
    print(f"ONNX fixtures skipped: {e} (install python3-torch python3-onnx python3-torchvision)")
    sys.exit(0)


def modules(small):
    import torchvision

    torch.manual_seed(0)
    d, heads, ff = (32, 4, 64)
    yield "encoder_layer", torch.nn.TransformerEncoderLayer(d, heads, ff, batch_first=True), \
        (torch.randn(2, 16, d),), {"input": {0: "batch", 1: "seq"}}
    encoder = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(d, heads, ff, batch_first=True), 2,
                                          enable_nested_tensor=False)
    yield "encoder", encoder, (torch.randn(2, 16, d),), {"input": {0: "batch", 1: "seq"}}
    transformer = torch.nn.Transformer(d_model=d, nhead=heads, num_encoder_layers=2, num_decoder_layers=2,
                                       dim_feedforward=ff, batch_first=True)
    yield "transformer", transformer, (torch.randn(2, 16, d), torch.randn(2, 8, d)), \
        {"input": {0: "batch"}, "input2": {0: "batch"}}
    yield "resnet18", torchvision.models.resnet18(weights=None), (torch.randn(1, 3, 64, 64),), {"input": {0: "batch"}}
    if not small:
        yield "vit_b_16", torchvision.models.vit_b_16(weights=None), (torch.randn(1, 3, 224, 224),), \
            {"input": {0: "batch"}}


def shape_nodes(graph):
    """Nodes computing only from shapes and integer constants (Shape -> Gather -> Unsqueeze -> Concat
    ...): what the importer must fold into constants. Counted here independently of the importer."""
    static = {n.output[0] for n in graph.node if n.op_type == "Constant"}
    static |= {i.name for i in graph.initializer if i.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32)}
    count = 0
    for n in graph.node:
        inputs = [i for i in n.input if i]
        if n.op_type != "Constant" and (n.op_type == "Shape" or (inputs and all(i in static for i in inputs))):
            static.update(n.output)
            count += 1
    return count


def export(name, module, args, axes, opset, out_dir):
    module.eval()
    # Distinct random values everywhere: the exporter merges initializers with equal contents
    # (cloned layers, LayerNorm's ones and zeros), which would hide parameters from the import.
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 0.02)
    path = os.path.join(out_dir, f"{name}-op{opset}.onnx")
    names = ["input", "input2"][: len(args)]
    # Training mode keeps BatchNormalization as its own node (eval mode folds it into the conv,
    # which changes the parameter count).
    mode = torch.onnx.TrainingMode.TRAINING if name == "resnet18" else torch.onnx.TrainingMode.EVAL
    torch.onnx.export(module, args, path, opset_version=opset, input_names=names, output_names=["output"],
                      dynamic_axes=axes, training=mode, do_constant_folding=mode == torch.onnx.TrainingMode.EVAL)
    model = onnx.load(path)
    onnx.checker.check_model(model)
    with torch.no_grad():
        out = module(*args)
    # The inputs and torch's output (eval mode), for the engine's forward check.
    stem = os.path.join(out_dir, f"{name}-op{opset}")
    with open(stem + ".in.bin", "wb") as f:
        for a in args:
            f.write(a.detach().numpy().astype("float32").tobytes())
    with open(stem + ".out.bin", "wb") as f:
        f.write(out.detach().numpy().astype("float32").tobytes())
    return {
        "file": os.path.basename(path),
        "opset": opset,
        "parameters": sum(p.numel() for p in module.parameters()),
        "onnx_nodes": len(model.graph.node),
        "constant_nodes": sum(1 for n in model.graph.node if n.op_type == "Constant"),
        "shape_nodes": shape_nodes(model.graph),
        "output_shape": list(out.shape),
        "input_shapes": [list(a.shape) for a in args],
    }


# ---------------------------------------------------------------------------------------------
# Fixed-shape exports (torch.onnx.export's default: no dynamic axes) beside dynamic ones of the same
# module, for the importer's re-specialisation tests: fixed_shapes/manifest.json.


def fixed_shape_modules(small):
    nn = torch.nn

    class TinyLm(nn.Module):
        """A GPT-style LM written the way users write it: x.view(B, T, H, D) from x.size(),
        positions from torch.arange(T), a registered causal-mask buffer sliced to T."""

        def __init__(self, vocab=64, d=32, heads=4, block=64):
            super().__init__()
            self.heads = heads
            self.wte = nn.Embedding(vocab, d)
            self.wpe = nn.Embedding(block, d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab)
            self.register_buffer("mask", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

        def forward(self, idx):
            b, t = idx.size()
            x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
            q, k, v = self.qkv(self.ln(x)).split(x.size(-1), dim=2)
            hd = x.size(-1) // self.heads
            q = q.view(b, t, self.heads, hd).transpose(1, 2)
            k = k.view(b, t, self.heads, hd).transpose(1, 2)
            v = v.view(b, t, self.heads, hd).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (hd ** -0.5)
            att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(b, t, x.size(-1))
            return self.head(x + self.proj(y))

    class FlatMlp(nn.Module):
        """x.view(x.size(0), -1) and a batch-sized reshape back: Reshape constants carrying the batch."""

        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(3 * 8 * 8, 64)
            self.fc2 = nn.Linear(64, 48)

        def forward(self, x):
            h = torch.relu(self.fc1(x.view(x.size(0), -1)))
            return self.fc2(h).view(x.size(0), 3, 16).softmax(-1)

    class CrossMem(nn.Module):
        """Queries attending over a memory of another length: a second named dynamic dimension ("mem")."""

        def __init__(self):
            super().__init__()
            self.q = nn.Linear(16, 16)

        def forward(self, x, memory):
            att = (self.q(x) @ memory.transpose(1, 2)).softmax(-1)
            return att @ memory

    import torchvision

    ids = torch.randint(0, 64, (2, 16))
    yield "tiny_lm", TinyLm(), (ids,), {"input": {0: "batch", 1: "seq"}, "output": {0: "batch", 1: "seq"}}
    # A vocabulary under the byte corpus's 256: the studio trains it on random tokens from its own
    # vocabulary (tests/gui, the import dialog's run).
    yield "tiny_lm_v200", TinyLm(vocab=200), (torch.randint(0, 200, (2, 16)),), \
        {"input": {0: "batch", 1: "seq"}, "output": {0: "batch", 1: "seq"}}
    yield "cross_mem", CrossMem(), (torch.randn(2, 5, 16), torch.randn(2, 7, 16)), \
        {"input": {0: "batch", 1: "seq"}, "memory": {0: "batch", 1: "mem"}, "output": {0: "batch", 1: "seq"}}
    yield "flat_mlp", FlatMlp(), (torch.randn(4, 3, 8, 8),), {"input": {0: "batch"}, "output": {0: "batch"}}
    if small:
        return
    # The full AlexNet (61M parameters), stored without its weights: the import plans without them.
    yield "alexnet", torchvision.models.alexnet(weights=None), (torch.randn(8, 3, 224, 224),), \
        {"input": {0: "batch"}, "output": {0: "batch"}}


def strip_weights(path, min_elements=1 << 16):
    """Marks large initializers as external data that is not there: the graph and shapes stay, the
    file is small."""
    model = onnx.load(path)
    for t in model.graph.initializer:
        if t.data_type == onnx.TensorProto.FLOAT and len(t.raw_data) >= 4 * min_elements:
            t.ClearField("raw_data")
            t.data_location = onnx.TensorProto.EXTERNAL
            entry = t.external_data.add()
            entry.key, entry.value = "location", "weights-not-stored.bin"
    onnx.save(model, path)


def export_fixed_shapes(out_dir, small=False):
    sub = os.path.join(out_dir, "fixed_shapes")
    os.makedirs(sub, exist_ok=True)
    manifest = []
    for name, module, args, axes in fixed_shape_modules(small):
        module.eval()
        for kind, dynamic in (("fixed", None), ("dynamic", axes)):
            path = os.path.join(sub, f"{name}-{kind}.onnx")
            names = [k for k in axes if k != "output"]  # "input", and any further inputs by name
            torch.onnx.export(module, args, path, opset_version=17, input_names=names, output_names=["output"],
                              dynamic_axes=dynamic)
            if name == "alexnet":
                strip_weights(path)
            manifest.append({"name": name, "kind": kind, "file": os.path.basename(path),
                             "input_shape": list(args[0].shape)})
            print(f"fixed_shapes/{os.path.basename(path)}")
    with open(os.path.join(sub, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)


def export_traced(out_dir):
    """A model exported by PipeStudio's tracer (its metadata names parameters, buffers and frozen
    weights), with torch's output on fixed ids: traced/manifest.json."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [here, os.path.join(here, "..", "..", "profiler", "python")]
    import pipestudio_trace
    import traced_module
    sub = os.path.join(out_dir, "traced")
    os.makedirs(sub, exist_ok=True)
    path = os.path.join(sub, "tied_lm.onnx")
    pipestudio_trace.main(["traced_module:tied_lm", "--input-shape", "2,8", "--dtype", "int64", "--vocab", "50",
                           "-o", path])
    model = traced_module.tied_lm().eval()
    ids = torch.randint(0, 50, (2, 8), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        out = model(ids)
    with open(os.path.join(sub, "tied_lm.in.bin"), "wb") as f:
        f.write(ids.numpy().astype("int64").tobytes())
    with open(os.path.join(sub, "tied_lm.out.bin"), "wb") as f:
        f.write(out.numpy().astype("float32").tobytes())
    trainable = sum(e["elements"] for e in pipestudio_trace.module_tensors(model) if e["trainable"])
    with open(os.path.join(sub, "manifest.json"), "w") as f:
        json.dump([{"name": "tied_lm", "file": "tied_lm.onnx", "input": "input", "input_shape": [2, 8],
                    "input_dtype": "int64", "output_shape": list(out.shape), "trainable": trainable,
                    "initializers": len(onnx.load(path).graph.initializer)}], f, indent=2)


def main(argv):
    out_dir = argv[0] if argv else "onnx-fixtures"
    small = "--small" in argv
    os.makedirs(out_dir, exist_ok=True)
    manifest = []
    for name, module, args, axes in modules(small):
        for opset in (13, 17):
            entry = export(name, module, args, axes, opset, out_dir)
            entry["name"] = name
            manifest.append(entry)
            print(f"{entry['file']}: {entry['onnx_nodes']} nodes, {entry['parameters']} parameters")
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    export_fixed_shapes(out_dir, small)
    export_traced(out_dir)


if __name__ == "__main__":
    main(sys.argv[1:])
