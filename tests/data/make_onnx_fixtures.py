#!/usr/bin/env python3
"""Exports real PyTorch modules (written by the PyTorch and torchvision authors, random weights) to
ONNX for PipeStudio's importer tests, with a manifest of what the import must reproduce.

    /usr/bin/python3 tests/data/make_onnx_fixtures.py OUTPUT_DIR [--small]

For every module and opset 13 and 17: <name>-op<opset>.onnx, and manifest.json with the parameter
count (sum of p.numel()), the ONNX node count, how many of those are Constant nodes and integer
shape computations, and the shape
of the first output for the bound batch/sequence sizes; <name>-op<opset>.in.bin and .out.bin hold
the inputs and torch's output in eval mode (float32, row-major).
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


if __name__ == "__main__":
    main(sys.argv[1:])
