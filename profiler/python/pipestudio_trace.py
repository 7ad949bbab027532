#!/usr/bin/env python3
"""Export a PyTorch model to ONNX the way PipeStudio's importer reads it best.

Run it in your own PyTorch environment:

    python pipestudio_trace.py my_module:build_model --input-shape 8,512 --dtype int64 -o model.onnx

`my_module:build_model` names a callable returning an nn.Module (import path, colon, attribute).
The export uses opset 17, the TorchScript exporter (dynamo=False where the torch version has the
flag), eval mode, and named dynamic batch/sequence axes so `pipestudio import --batch --seq` can
bind them. `--no-weights` writes the graph without initializer data (huge models): PipeStudio then
plans and profiles it analytically but cannot fine-tune its real weights.
"""
import argparse
import importlib
import inspect
import sys


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("factory", help="module:callable returning the nn.Module")
    p.add_argument("--input-shape", required=True, help="comma-separated, e.g. 8,512")
    p.add_argument("--dtype", default="float32", help="float32, int64, ... (int64 for token ids)")
    p.add_argument("--vocab", type=int, default=1000, help="upper bound of random token ids (int inputs)")
    p.add_argument("--opset", type=int, default=17)
    p.add_argument("--no-weights", action="store_true", help="export without initializer data")
    p.add_argument("-o", "--output", required=True)
    return p.parse_args(argv)


def load_factory(spec):
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise SystemExit(f"pipestudio_trace: '{spec}' must be module:callable")
    module = importlib.import_module(module_name)
    return getattr(module, attr)


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
    kwargs = dict(opset_version=args.opset, input_names=["input"], output_names=["output"],
                  dynamic_axes={"input": axes}, do_constant_folding=True)
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
    if args.no_weights:
        kwargs["export_params"] = False
    torch.onnx.export(model, (example,), args.output, **kwargs)
    params = sum(p.numel() for p in model.parameters())
    print(f"wrote {args.output}: opset {args.opset}, {params} parameters")


if __name__ == "__main__":
    main(sys.argv[1:])
