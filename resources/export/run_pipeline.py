#!/usr/bin/env python3
"""Runs a PipeStudio plan on PyTorch distributed: written by `pipestudio export --format torchrun`.

    torchrun --nproc_per_node STAGES run_pipeline.py --model my_pkg.my_mod:build_model --steps 100
    python3 -m torch.distributed.run --nproc_per_node STAGES run_pipeline.py ...   (no torchrun on PATH)

One process per pipeline stage and data-parallel replica (multi-node: torchrun's --nnodes/--node_rank/
--rdzv_endpoint as usual): a world of STAGES x D processes runs D replicas of the pipeline, rank r
stage r % STAGES of replica r // STAGES. Replica k trains on the k-th of D equal shards of each step's
batch (dim 0); before every optimizer step each stage's gradients are averaged over its D replicas
(all_reduce), so D replicas take the steps one process takes on the whole batch.
PyTorch 1.13's launcher on Python 3.11 or newer (Debian's python3-torch) fails with its default --redirects
and --tee; add `--redirects 1 --tee 1` there.
gloo on CPUs, nccl when CUDA is available (--backend to choose). Works with PyTorch 1.13 and 2.x.

--model names a function build_model() -> (model, data, loss_fn):
  model    a torch.nn.Module that torch.fx.symbolic_trace can trace; forward(*inputs) -> output
  data     data(step) -> (inputs, target): the whole batch of that step (a tuple of tensors with the batch
           as dim 0, and the target); it must give the same values on every rank (seed it by step). The
           batch is split into the plan's micro-batches along dim 0.
  loss_fn  loss_fn(output, target) -> scalar: the mean over one micro-batch
Every rank seeds torch with --seed and calls build_model(), so all ranks start from the same weights,
then keeps only its stage.

How the plan's stages are found in the traced model (plan.json "cuts"): PipeStudio's nodes come from an
ONNX export whose node names carry torch module scopes, and fx's do not match them one to one (one fx
call_module per nn.Linear, several ONNX ops in it). Both graphs are therefore read as runs of
data-dependent nodes with one module scope ("h.3.attn", "h.3.mlp.0"), and a cut is "the k-th run of
scope S" (PipeStudio snaps a cut inside a run to the nearer border). Nodes that compute only on
parameters, constants and shapes are left out of the runs (the ONNX exporter folds them); each goes to
the stage of its first user. The mapping is printed by rank 0.

The schedule is PipeStudio's own (plan.json "schedule_actions", one action list per rank); stages that
the plan recomputes run under torch.utils.checkpoint. The last stage of replica 0 prints one JSON line
per step: {"step": N, "loss": X} (the mean of the micro-batch losses, over every replica).
"""
import argparse
import importlib
import json
import os
import pickle
import re
import sys

import torch
import torch.distributed as dist
import torch.fx
from torch.fx.passes.split_module import split_module

ACTION = re.compile(r"^(\d+)(OPT_STEP|F|B|I|W)(\d*)$")
SHAPE_METHODS = {"size", "dim", "numel", "type", "get_device"}
SHAPE_ATTRIBUTES = {"shape", "dtype", "device", "ndim", "is_cuda"}
HEADER = 12  # int64 header per value: kind, dtype or byte count, ndim, dims (up to 9)
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint8, torch.bool]


# ----------------------------------------------------------------------------------------------------
# Mapping PipeStudio cuts onto the fx graph (the same rules as core/export/scope_mapping.cpp)


def canonical_scope(scope):
    """'h.0.mlp.mlp.0' (ONNX names a Sequential's child 'mlp/mlp.0') and 'h.0.mlp.0' (fx) -> 'h.0.mlp.0'."""
    parts = [p for p in scope.split(".") if p]
    changed = True
    while changed:
        changed = False
        for i in range(1, len(parts) - 1):
            if parts[i] == parts[i - 1] and parts[i + 1].isdigit():
                del parts[i]
                changed = True
                break
    return ".".join(parts)


class ScopeTracer(torch.fx.Tracer):
    """symbolic_trace that records each node's module path in node.meta['ps_scope']."""

    def __init__(self):
        super().__init__()
        self.scopes = [""]

    def call_module(self, m, forward, args, kwargs):
        self.scopes.append(self.path_of_module(m))
        try:
            return super().call_module(m, forward, args, kwargs)
        finally:
            self.scopes.pop()

    def create_node(self, *args, **kwargs):
        node = super().create_node(*args, **kwargs)
        node.meta["ps_scope"] = self.scopes[-1]
        return node


def trace(model):
    tracer = ScopeTracer()
    graph = tracer.trace(model)
    return torch.fx.GraphModule(tracer.root, graph, type(model).__name__)


def _input_nodes(node):
    found = []
    torch.fx.node.map_arg((node.args, node.kwargs), lambda n: found.append(n))
    return found


def data_dependent(graph):
    """Nodes that depend on the model's inputs; shape queries and ops on parameters/constants do not."""
    dynamic = set()
    for node in graph.nodes:
        if node.op == "placeholder":
            dynamic.add(node)
        elif node.op in ("call_function", "call_method", "call_module"):
            shape_query = (node.op == "call_method" and node.target in SHAPE_METHODS) or (
                node.op == "call_function" and node.target is getattr and len(node.args) > 1
                and node.args[1] in SHAPE_ATTRIBUTES) or (node.op == "call_function" and node.target is len)
            if not shape_query and any(n in dynamic for n in _input_nodes(node)):
                dynamic.add(node)
    return dynamic


def scope_runs(graph):
    """{(canonical scope, occurrence): position of the run's first node}, positions in graph order."""
    dynamic = data_dependent(graph)
    runs, seen, last = {}, {}, None
    for position, node in enumerate(graph.nodes):
        if node not in dynamic or node.op == "placeholder":
            continue
        scope = canonical_scope(node.meta.get("ps_scope", ""))
        if scope != last:
            occurrence = seen.get(scope, 0)
            seen[scope] = occurrence + 1
            runs[(scope, occurrence)] = position
            last = scope
    return runs


def map_cuts(graph, cuts):
    """Position in graph.nodes where each stage after the first starts, and the anchor each used."""
    runs = scope_runs(graph)
    positions, used, previous = [], [], 0
    for cut in cuts:
        found = None
        for anchor in cut["anchors"]:
            position = runs.get((anchor["scope"], anchor["occurrence"]))
            if position is not None and position > previous:
                found = (position, anchor)
                break
        if found is None:
            raise SystemExit("run_pipeline.py: error: stage %d starts at PipeStudio node '%s' (scope '%s'); none of "
                             "its anchors %s is a run of the traced model after the previous cut" % (
                                 cut["stage"], cut["node"], cut["scope"],
                                 ["%s#%d" % (a["scope"], a["occurrence"]) for a in cut["anchors"]]))
        positions.append(found[0])
        used.append(found[1])
        previous = found[0]
    return positions, used


def assign_stages(graph, positions):
    """Stage of every call node: data-dependent nodes by position, the others with their first user."""
    dynamic = data_dependent(graph)
    nodes = list(graph.nodes)
    last = len(positions)
    stage = {}
    for position, node in enumerate(nodes):
        if node in dynamic:
            stage[node] = sum(1 for p in positions if p <= position)
    for position in reversed(range(len(nodes))):
        node = nodes[position]
        if node.op in ("call_function", "call_method", "call_module") and node not in dynamic:
            users = [last if u.op == "output" else stage.get(u, last) for u in node.users]
            stage[node] = min(users) if users else sum(1 for p in positions if p <= position)
    return stage


# ----------------------------------------------------------------------------------------------------
# The split model: one fx submodule per stage and the values passed between stages


class Pipeline:
    def __init__(self, gm, stage_of, stages):
        self.stages = stages
        self.split = split_module(gm, gm, lambda node: stage_of[node])
        self.top = list(self.split.graph.nodes)
        self.placeholders = [n for n in self.top if n.op == "placeholder"]
        self.calls = {}
        for n in self.top:
            if n.op == "call_module" and n.target.startswith("submod_"):
                self.calls[int(n.target[len("submod_"):])] = n
        missing = [s for s in range(stages) if s not in self.calls]
        if missing:
            raise SystemExit("run_pipeline.py: error: stages %s got no operations of the traced model" % missing)
        self.output = next(n for n in self.top if n.op == "output")
        self.owner = {}  # top-level value -> producing stage (-1: a model input, on every rank)
        for n in self.top:
            if n.op == "placeholder":
                self.owner[n] = -1
            elif n.op == "call_module":
                self.owner[n] = int(n.target[len("submod_"):])
            elif n.op == "call_function":  # getitem of a stage's output tuple
                self.owner[n] = self.owner[n.args[0]]
        self.incoming = [self._crossing(s) for s in range(stages)]

    def _consumer_stage(self, user):
        if user.op == "output":
            return self.stages - 1
        if user.op == "call_function":
            return None  # a getitem: the value itself is never passed
        return self.owner[user]

    def _crossing(self, s):
        """Values made by stages before s and used at s or later, in graph order: what s receives."""
        values = []
        for n in self.top:
            if self.owner.get(n, -1) < 0 or self.owner[n] >= s:
                continue
            later = [self._consumer_stage(u) for u in n.users]
            if any(c is not None and c >= s for c in later):
                values.append(n)
        return values

    def stage_module(self, s):
        return getattr(self.split, self.calls[s].target)

    def attribute(self, node):
        """A get_attr of the top graph (a parameter, buffer or constant that split_module passes in)."""
        value = self.split
        for atom in node.target.split("."):
            value = getattr(value, atom)
        return value

    def stage_attributes(self, s):
        return [n for n in _input_nodes(self.calls[s]) if n.op == "get_attr"]

    def stage_parameters(self, s):
        params = list(self.stage_module(s).parameters())
        params += [self.attribute(n) for n in self.stage_attributes(s)]
        return list({id(p): p for p in params if isinstance(p, torch.nn.Parameter)}.values())

    def move_stage(self, s, device):
        self.stage_module(s).to(device)
        for node in self.stage_attributes(s):
            value = self.attribute(node)
            if isinstance(value, torch.nn.Parameter):
                value.data = value.data.to(device)
            elif torch.is_tensor(value):
                owner, _, name = node.target.rpartition(".")
                setattr(self.split.get_submodule(owner) if owner else self.split, name, value.to(device))

    def run_stage(self, s, env, checkpointed):
        call = self.calls[s]
        args = torch.fx.node.map_arg(call.args, lambda n: self.attribute(n) if n.op == "get_attr" else env[n])
        module = self.stage_module(s)
        if checkpointed:
            from torch.utils.checkpoint import checkpoint
            out = checkpoint(module, *args, use_reentrant=False)
        else:
            out = module(*args)
        env[call] = out
        for user in call.users:
            if user.op == "call_function":
                env[user] = out[user.args[1]]

    def model_output(self, env):
        return torch.fx.node.map_arg(self.output.args[0], lambda n: env[n])


# ----------------------------------------------------------------------------------------------------
# Point-to-point messages: a header per value, then its data (tensors) or its pickle (ints, sizes)


class Wire:
    def __init__(self, device, use_tags):
        self.device = device
        self.use_tags = use_tags
        self.pending = []  # isend handles and their buffers, waited for at the end of each step

    def _isend(self, tensor, peer, tag):
        work = dist.isend(tensor, peer, tag=tag if self.use_tags else 0)
        self.pending.append((work, tensor))

    def _recv(self, tensor, peer, tag):
        dist.irecv(tensor, peer, tag=tag if self.use_tags else 0).wait()
        return tensor

    def send(self, values, peer, tag):
        for v in values:
            header = torch.zeros(HEADER, dtype=torch.int64)
            if torch.is_tensor(v):
                data = v.detach().contiguous()
                header[0], header[1], header[2] = 1, DTYPES.index(data.dtype), data.dim()
                header[3:3 + data.dim()] = torch.tensor(list(data.shape), dtype=torch.int64)
            else:
                data = torch.frombuffer(bytearray(pickle.dumps(v)), dtype=torch.uint8)
                header[0], header[1] = 2, data.numel()
            self._isend(header.to(self.device), peer, tag)
            self._isend(data.to(self.device), peer, tag)

    def recv(self, count, peer, tag):
        values = []
        for _ in range(count):
            header = self._recv(torch.zeros(HEADER, dtype=torch.int64, device=self.device), peer, tag).cpu()
            kind, code, ndim = int(header[0]), int(header[1]), int(header[2])
            if kind == 1:
                shape = [int(d) for d in header[3:3 + ndim]]
                values.append(self._recv(torch.empty(shape, dtype=DTYPES[code], device=self.device), peer, tag))
            else:
                raw = self._recv(torch.empty(code, dtype=torch.uint8, device=self.device), peer, tag)
                values.append(pickle.loads(raw.cpu().numpy().tobytes()))
        return values

    def flush(self):
        for work, _ in self.pending:
            work.wait()
        self.pending = []


# ----------------------------------------------------------------------------------------------------
# The stage worker: runs its rank's action list every step


def move(value, device):
    if torch.is_tensor(value):
        return value.to(device)
    if isinstance(value, (tuple, list)):
        return type(value)(move(v, device) for v in value)
    return value


class StageWorker:
    def __init__(self, args, plan, pipeline, data, loss_fn, device):
        self.rank = dist.get_rank()
        self.stages = plan["stages"]
        self.replicas = dist.get_world_size() // self.stages
        self.stage, self.replica = self.rank % self.stages, self.rank // self.stages
        self.last = self.stages - 1
        self.plan, self.pipeline, self.data, self.loss_fn, self.device = plan, pipeline, data, loss_fn, device
        self.micro_batches = plan["micro_batches"]
        self.recompute = plan["stage_details"][self.stage].get("recompute", False) and not args.no_recompute
        pipeline.move_stage(self.stage, device)
        self.wire = Wire(device, dist.get_backend() != "nccl")
        self.actions = [parse_action(a) for a in plan["schedule_actions"][self.stage]]
        params = pipeline.stage_parameters(self.stage)
        if args.optimizer == "adamw":
            self.optimizer = torch.optim.AdamW(params, lr=args.lr)
        else:
            self.optimizer = torch.optim.SGD(params, lr=args.lr)
        self.tied = tied_parameter_groups(pipeline, self.stage, self.replica, self.replicas)
        self.replica_group = replica_groups(self.stages, self.replicas)[self.stage]

    def peer(self, stage):
        """The rank of `stage` in this replica."""
        return self.replica * self.stages + stage

    def split_batch(self, step):
        inputs, target = self.data(step)
        inputs = inputs if isinstance(inputs, (tuple, list)) else (inputs,)
        if self.replicas > 1:  # this replica's shard of the step's batch
            whole = inputs[0].shape[0]
            if whole % self.replicas:
                raise SystemExit("run_pipeline.py: error: the batch of %d does not split over %d data-parallel "
                                 "replicas" % (whole, self.replicas))
            shard = whole // self.replicas

            def mine(t):
                return t.narrow(0, self.replica * shard, shard) if torch.is_tensor(t) and t.dim() > 0 else t
            inputs, target = tuple(mine(t) for t in inputs), mine(target)
        batch = inputs[0].shape[0]
        if batch % self.micro_batches:
            raise SystemExit("run_pipeline.py: error: the batch of %d does not split into the plan's %d "
                             "micro-batches" % (batch, self.micro_batches))
        size = batch // self.micro_batches
        pieces = [torch.split(t, size) if torch.is_tensor(t) else [t] * self.micro_batches for t in inputs]
        targets = torch.split(target, size) if torch.is_tensor(target) else [target] * self.micro_batches
        return [tuple(move(p[m], self.device) for p in pieces) for m in range(self.micro_batches)], \
            [move(t, self.device) for t in targets]

    def forward(self, m, inputs, targets, saved):
        env = dict(zip(self.pipeline.placeholders, inputs[m]))
        received = []
        if self.stage > 0:
            incoming = self.pipeline.incoming[self.stage]
            values = self.wire.recv(len(incoming), self.peer(self.stage - 1), 2 * m)
            for node, value in zip(incoming, values):
                if torch.is_tensor(value) and value.is_floating_point():
                    value.requires_grad_(True)
                    received.append(value)
                env[node] = value
        self.pipeline.run_stage(self.stage, env, self.recompute)
        if self.stage == self.last:
            loss = self.loss_fn(self.pipeline.model_output(env), targets[m])
            saved[m] = (received, [], loss)
            return loss.detach().item()
        outgoing = [env[n] for n in self.pipeline.incoming[self.stage + 1]]
        self.wire.send(outgoing, self.peer(self.stage + 1), 2 * m)
        saved[m] = (received, [v for v in outgoing if torch.is_tensor(v) and v.is_floating_point()], None)
        return None

    def backward(self, m, saved):
        received, sent, loss = saved.pop(m)
        if loss is not None:
            (loss / self.micro_batches).backward()
        else:
            grads = self.wire.recv(len(sent), self.peer(self.stage + 1), 2 * m + 1)
            pairs = [(t, g) for t, g in zip(sent, grads) if t.requires_grad]
            if pairs:
                torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])
        if self.stage > 0:
            grads = [t.grad if t.grad is not None else torch.zeros_like(t) for t in received]
            self.wire.send(grads, self.peer(self.stage - 1), 2 * m + 1)

    def train_step(self, step):
        inputs, targets = self.split_batch(step)
        self.optimizer.zero_grad()
        saved, losses = {}, []
        for kind, stage, m in self.actions:
            if stage != self.stage:
                raise SystemExit("run_pipeline.py: error: rank %d was given stage %d's action" % (self.rank, stage))
            if kind == "F":
                loss = self.forward(m, inputs, targets, saved)
                if loss is not None:
                    losses.append(loss)
            elif kind == "B":
                self.backward(m, saved)
            elif kind == "OPT_STEP":
                self.wire.flush()
                self.reduce_tied()
                self.average_replicas()
                self.optimizer.step()
        self.wire.flush()
        if not losses:
            return None
        loss = torch.tensor(sum(losses) / len(losses), dtype=torch.float64, device=self.device)
        if self.replica_group is not None:  # the mean over the replicas' shards: the whole batch's
            dist.all_reduce(loss, group=self.replica_group)
            loss /= self.replicas
        return loss.item()

    def average_replicas(self):
        if self.replica_group is None:
            return
        for p in self.pipeline.stage_parameters(self.stage):
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad, group=self.replica_group)
            p.grad /= self.replicas

    def reduce_tied(self):
        for group, params in self.tied:
            for p in params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                dist.all_reduce(p.grad, group=group)


def parse_action(text):
    match = ACTION.match(text)
    if not match or match.group(2) in ("I", "W"):
        raise SystemExit("run_pipeline.py: error: action '%s' is not one this runner executes (F, B, OPT_STEP)" % text)
    return match.group(2), int(match.group(1)), int(match.group(3)) if match.group(3) else -1


def tied_parameter_groups(pipeline, stage, replica, replicas):
    """Parameters that several stages read (tied embeddings): their gradients are summed over those
    stages' ranks, in each replica."""
    holders = {}
    for s in range(pipeline.stages):
        for p in pipeline.stage_parameters(s):
            holders.setdefault(id(p), []).append(s)
    groups = []
    for stages in sorted({tuple(h) for h in holders.values() if len(h) > 1}):
        for r in range(replicas):  # every rank creates every group, in the same order
            group = dist.new_group([r * pipeline.stages + s for s in stages])
            if stage in stages and r == replica:
                mine = {id(p): p for p in pipeline.stage_parameters(stage)}
                groups.append((group, [mine[i] for i, h in holders.items() if tuple(h) == stages]))
    return groups


def replica_groups(stages, replicas):
    """Per stage, the process group of its ranks in every replica (None for one replica)."""
    if replicas == 1:
        return [None] * stages
    return [dist.new_group([r * stages + s for r in range(replicas)]) for s in range(stages)]


# ----------------------------------------------------------------------------------------------------


def load_builder(spec):
    module_name, _, function = spec.partition(":")
    if not module_name or not function:
        raise SystemExit("run_pipeline.py: error: --model must look like package.module:function, not '%s'" % spec)
    sys.path.insert(0, os.getcwd())
    return getattr(importlib.import_module(module_name), function)


def parse_args(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="package.module:build_model (see this file's docstring)")
    parser.add_argument("--plan", default=os.path.join(here, "plan.json"), help="the exported plan (default: beside me)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto")
    parser.add_argument("--no-recompute", action="store_true", help="ignore the plan's recompute choices")
    return parser.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    with open(args.plan) as f:
        plan = json.load(f)
    backend = args.backend if args.backend != "auto" else ("nccl" if torch.cuda.is_available() else "gloo")
    dist.init_process_group(backend)
    if dist.get_world_size() % plan["stages"]:
        raise SystemExit("run_pipeline.py: error: the plan has %d stages; start one process per stage and "
                         "data-parallel replica, a multiple of %d (torchrun --nproc_per_node ..., --nnodes ...), "
                         "not %d" % (plan["stages"], plan["stages"], dist.get_world_size()))
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    torch.manual_seed(args.seed)
    model, data, loss_fn = load_builder(args.model)()
    gm = trace(model)
    positions, anchors = map_cuts(gm.graph, plan["cuts"])
    pipeline = Pipeline(gm, assign_stages(gm.graph, positions), plan["stages"])
    if dist.get_rank() == 0:
        nodes = list(gm.graph.nodes)
        for cut, position, anchor in zip(plan["cuts"], positions, anchors):
            print("stage %d starts at fx node '%s' (scope '%s'; PipeStudio node '%s'%s)" % (
                cut["stage"], nodes[position].name, anchor["scope"], cut["node"],
                ", snapped to a module border" if anchor.get("snapped") else ""), flush=True)
    worker = StageWorker(args, plan, pipeline, data, loss_fn, device)
    for step in range(args.steps):
        loss = worker.train_step(step)
        if loss is not None and worker.replica == 0:
            print(json.dumps({"step": step, "loss": loss}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
