#!/usr/bin/env python3
"""Export a PyTorch model to ONNX the way PipeStudio's importer reads it best.

Run it in your own PyTorch environment:

    python pipestudio_trace.py my_module:build_model --input-shape 8,512 --dtype int64 -o model.onnx

`my_module:build_model` names a callable returning an nn.Module (import path, colon, attribute).
The export uses the exporter the installed torch uses by default (`--exporter auto`: the
torch.export-based one, opset 20, from torch 2.9 on; the TorchScript one, opset 17, before), eval
mode, and named dynamic batch/sequence axes so `pipestudio import --batch --seq` can bind them.
`--exporter torchscript|dynamo` and `--opset N` choose otherwise. `--no-weights` writes the graph
without initializer data (huge models; TorchScript exporter): PipeStudio then plans and profiles it
analytically but cannot fine-tune its real weights.

The file also carries what only the module knows (model metadata "pipestudio.module", JSON): every
parameter and buffer with all its names (tied weights are one tensor under several names), whether
it trains (requires_grad), its element count and the sum and sum of squares of its values. The
importer takes a named initializer's kind from it, ties an exporter's copy of a parameter (a tied
head's transposed weight) to the parameter, and keeps buffers and frozen parameters constant
where the exporter renamed them.
"""
import argparse
import importlib
import inspect
import json
import math
import sys


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("factory", help="module:callable returning the nn.Module")
    p.add_argument("--input-shape", required=True, help="comma-separated, e.g. 8,512")
    p.add_argument("--dtype", default="float32", help="float32, int64, ... (int64 for token ids)")
    p.add_argument("--vocab", type=int, default=1000, help="upper bound of random token ids (int inputs)")
    p.add_argument("--exporter", choices=["auto", "dynamo", "torchscript"], default="auto",
                   help="auto: torch's own default (dynamo from torch 2.9, TorchScript before)")
    p.add_argument("--opset", type=int, help="default 20 with the dynamo exporter, 17 with TorchScript")
    p.add_argument("--no-weights", action="store_true", help="export without initializer data")
    p.add_argument("-o", "--output", required=True)
    return p.parse_args(argv)


def load_factory(spec):
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise SystemExit(f"pipestudio_trace: '{spec}' must be module:callable")
    module = importlib.import_module(module_name)
    return getattr(module, attr)


def module_tensors(model):
    """Each distinct parameter and buffer: its names, kind, trainability and value fingerprint."""
    tensors = {}
    for module_name, module in model.named_modules(remove_duplicate=False):
        for kind, table in (("parameter", module._parameters), ("buffer", module._buffers)):
            for name, t in table.items():
                if t is None:
                    continue
                full = f"{module_name}.{name}" if module_name else name
                entry = tensors.setdefault(id(t), {"names": [], "kind": kind, "tensor": t})
                if full not in entry["names"]:
                    entry["names"].append(full)
    out = []
    for entry in tensors.values():
        t = entry.pop("tensor")
        trainable = entry["kind"] == "parameter" and t.requires_grad
        values = t.detach().double() if t.is_floating_point() else None
        total = values.sum().item() if values is not None else None
        squares = (values * values).sum().item() if values is not None else None
        if total is not None and not (math.isfinite(total) and math.isfinite(squares)):
            total = squares = None  # a mask of -inf: no fingerprint (JSON has no infinities)
        out.append(dict(entry, trainable=trainable, elements=t.numel(), sum=total, sum_squares=squares))
    return out


def varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def append_metadata(path, key, value):
    """Adds one ModelProto.metadata_props entry (field 14) at the end of the file: protobuf merges
    fields appended to a message, so no onnx package is needed and the weights are not rewritten."""
    def field(number, data):
        return varint((number << 3) | 2) + varint(len(data)) + data
    entry = field(1, key.encode()) + field(2, value.encode())
    with open(path, "ab") as f:
        f.write(field(14, entry))


def main(argv):
    import torch

    args = parse_args(argv)
    model = load_factory(args.factory)()
    model.eval()
    shape = [int(d) for d in args.input_shape.split(",")]
    dtype = getattr(torch, args.dtype)
    if dtype.is_floating_point:
        example = torch.randn(*shape, dtype=dtype)
    else:
        example = torch.randint(0, args.vocab, shape, dtype=dtype)
    axes = {0: "batch"}
    if len(shape) > 1 and not dtype.is_floating_point:
        axes[1] = "seq"
    kwargs = dict(input_names=["input"], output_names=["output"],
                  dynamic_axes={"input": axes}, do_constant_folding=True)
    has_flag = "dynamo" in inspect.signature(torch.onnx.export).parameters
    major_minor = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    # --no-weights stays with TorchScript: the dynamo exporter drops the initializers' names with their data.
    dynamo = args.exporter == "dynamo" or (
        args.exporter == "auto" and has_flag and major_minor >= (2, 9) and not args.no_weights)
    if dynamo and args.no_weights:
        raise SystemExit("pipestudio_trace: --no-weights needs --exporter torchscript (the dynamo exporter leaves "
                         "the weights' names out with their data)")
    if dynamo and not has_flag:
        raise SystemExit(f"pipestudio_trace: torch {torch.__version__} has no dynamo exporter (--exporter torchscript)")
    if has_flag:
        kwargs["dynamo"] = dynamo
    args.opset = args.opset or (20 if dynamo else 17)
    kwargs["opset_version"] = args.opset
    if args.no_weights:
        kwargs["export_params"] = False
    torch.onnx.export(model, (example,), args.output, **kwargs)
    tensors = module_tensors(model)
    append_metadata(args.output, "pipestudio.module", json.dumps(
        {"version": 1, "torch": torch.__version__, "tensors": tensors}, separators=(",", ":"), allow_nan=False))
    trainable = sum(t["elements"] for t in tensors if t["trainable"])
    print(f"wrote {args.output}: opset {args.opset} ({'dynamo' if dynamo else 'TorchScript'} exporter), "
          f"{trainable} trainable parameters")


if __name__ == "__main__":
    main(sys.argv[1:])
