#!/usr/bin/env python3
"""ONNX exports of the models whose torch.profiler traces are kept in tests/data/torch_traces/
(recorded by tests/gpu/torch_on_gpu.py traces, at the sizes in its TRACED table), for the tests
that import those unannotated traces onto the graphs: the same module classes, sizes and batch,
exported by Debian's python3-torch at opset 17 in eval mode.

    /usr/bin/python3 tests/data/make_trace_models.py OUTPUT_DIR

Writes <name>.onnx for every traced model and a CPU trace of the same training steps
(<name>.cpu.trace.json: torch.profiler on the CPU, the steps of torch_on_gpu.py), and the GPT
trained as a two-stage pipeline by two processes (gloo; stage 0: the embeddings and block 0,
stage 1: block 1, the final LayerNorm, the head and the loss), each rank profiling its own steps:
gpt.rank<r>.cpu.trace.json. Exits 0 without writing when torch is missing (the tests then skip).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "gpu"))


# The pipeline: 2 micro-batches per step, each through both stages (forward, then backward) before
# the next; AdamW on each rank; 2 untraced steps, then torch.profiler's schedule (a warm-up step and
# 3 active ones: ProfilerStep ranges).


def pipeline_rank(rank, out, port):
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule
    import torch_on_gpu
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, x, y = torch_on_gpu.traced_model(torch, torch_on_gpu.TRACED["gpt"])
    model.train()
    if rank == 0:
        def stage(idx):
            return model.h[0](model.wte(idx) + model.wpe(torch.arange(idx.shape[1])))
        params = [*model.wte.parameters(), *model.wpe.parameters(), *model.h[0].parameters()]
    else:
        def stage(h):
            return model.lm_head(model.ln_f(model.h[1](h)))
        params = [*model.h[1].parameters(), *model.ln_f.parameters(), *model.lm_head.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-3)
    shape = (x.shape[0], x.shape[1], model.wte.embedding_dim)

    def step():
        opt.zero_grad()
        for _ in range(2):
            if rank == 0:
                h = stage(x)
                dist.send(h.detach(), 1)
                g = torch.empty(shape)
                dist.recv(g, 1)
                h.backward(g)
            else:
                h = torch.empty(shape)
                dist.recv(h, 0)
                h.requires_grad_()
                logits = stage(h)
                torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).backward()
                dist.send(h.grad, 0)
        opt.step()

    for _ in range(2):
        step()
    path = os.path.join(out, f"gpt.rank{rank}.cpu.trace.json")
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=schedule(wait=0, warmup=1, active=3),
                 on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for _ in range(4):
            step()
            prof.step()
    dist.destroy_process_group()


def record_pipeline_traces(out):
    import socket
    import torch.multiprocessing as mp
    with socket.socket() as s:  # a free port for the ranks' rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(pipeline_rank, args=(out, port), nprocs=2)
    print(f"gpt pipeline: {out}/gpt.rank0.cpu.trace.json, gpt.rank1.cpu.trace.json")


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
    record_pipeline_traces(out)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
