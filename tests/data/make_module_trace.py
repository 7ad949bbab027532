#!/usr/bin/env python3
"""Records tests/data/traces/gpt_with_stack_cpu.json.gz: a PyTorch profiler trace with module calls.

The corpus's small GPT (`Gpt` of make_torch2_onnx.py, exported there as
onnx_torch2/gpt_sdpa_gelu_tanh.onnx by torch.export) trained as users train: cross-entropy on
its logits, AdamW, torch.profiler with `with_stack=True` and `record_shapes=True` (so the trace
holds an "nn.Module: Block_1" range around every module call and Python's own functions), its
schedule over three active steps, CPU activities, no record_function ranges. Needs torch 2.x and
what make_torch2_onnx.py imports, e.g. in a venv:
    python -m venv v && v/bin/pip install torch onnx onnxruntime && v/bin/python tests/data/make_module_trace.py
The project it matches: pipestudio import tests/data/onnx_torch2/gpt_sdpa_gelu_tanh.onnx --loss cross-entropy
"""
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_torch2_onnx import Gpt  # noqa: E402
from make_torch_step_trace import record_steps  # noqa: E402

OUT = os.path.join(HERE, "traces", "gpt_with_stack_cpu.json.gz")
BATCH, SEQ, VOCAB = 2, 16, 64  # the export's input, [2, 16] token ids over 64


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else OUT
    torch.manual_seed(0)
    model = Gpt().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    targets = torch.randint(0, VOCAB, (BATCH, SEQ))

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(ids)
        F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1)).backward()
        opt.step()

    for _ in range(3):
        step()
    record_steps(step, out, "make_module_trace.py", with_stack=True, record_shapes=True)


if __name__ == "__main__":
    main()
