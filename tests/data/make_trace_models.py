#!/usr/bin/env python3
"""ONNX exports of the models whose torch.profiler traces are kept in tests/data/torch_traces/
(recorded by tests/gpu/torch_on_gpu.py traces, at the sizes in its TRACED table), for the tests
that import those unannotated traces onto the graphs: the same module classes, sizes and batch,
exported by Debian's python3-torch at opset 17 in eval mode.

    /usr/bin/python3 tests/data/make_trace_models.py OUTPUT_DIR

Writes <name>.onnx for every traced model and a CPU trace of the same training steps
(<name>.cpu.trace.json: torch.profiler on the CPU, the steps of torch_on_gpu.py). Exits 0 without
writing when torch is missing (the tests then skip).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "gpu"))


def main(out):
    try:
        import torch
    except ImportError as e:
        print(f"trace models skipped: {e}")
        return 0
    import torch_on_gpu
    os.makedirs(out, exist_ok=True)
    for name, spec in torch_on_gpu.TRACED.items():
        torch.manual_seed(0)
        model, x, _ = torch_on_gpu.traced_model(torch, spec)
        model.eval()
        path = os.path.join(out, name + ".onnx")
        torch.onnx.export(model, (x,), path, opset_version=17, input_names=["input"], output_names=["output"])
        print(f"{name}: {path}")
    torch_on_gpu.record_traces(out, torch.device("cpu"), gzip_traces=False, suffix=".cpu")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
