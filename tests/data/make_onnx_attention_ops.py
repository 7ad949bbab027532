#!/usr/bin/env python3
"""Writes tests/data/onnx_ops23/: small models around ONNX's Attention (opsets 23, 24) and
RotaryEmbedding (23) operators in the forms torch's exporter does not write for our torch 2.x
corpus but other exporters and hand-written graphs use: 3-D inputs with head counts, grouped-query
heads, a past key/value cache with bottom-right causal masking and present_key/present_value
outputs, softcap, bool masks with an explicit scale, rotary embeddings with position ids,
interleaved pairs and a partial rotary dimension (a tail left unrotated); and ConvTranspose with
pads from an output_shape or auto_pad SAME_UPPER, which torch's exporter does not write either.

Each model takes one float input 'x', has its projections as initializers (trainable parameters)
and the caches, masks and position ids as Constant nodes. The expected output is ONNX's reference
implementation (onnx.reference, the operators' definition), checked here against onnxruntime's
(onnxruntime's alone where the reference fails: onnx 1.23's ConvTranspose with an output_shape).
Needs onnx and onnxruntime (a venv: python -m venv v && v/bin/pip install onnx onnxruntime):
    v/bin/python tests/data/make_onnx_attention_ops.py
manifest.json: per model its file, opset, input (name, shape, dtype), parameter count (and the
elements of its float Constants of more than one element, which an importer cannot tell from
weights), output
shape, the shapes of its other outputs, and the loss the training test attaches; <name>.in.bin and
<name>.out.bin hold the input and the reference's first output (raw little-endian float32).
"""
import json
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "onnx_ops23")
RNG = np.random.default_rng(23)
B, S, E = 2, 8, 32  # batch, tokens, width


class Builder:
    def __init__(self, name):
        self.name = name
        self.nodes = []
        self.inits = []
        self.params = 0
        self.float_constants = 0  # elements of float Constants of more than one element

    def weight(self, name, shape):
        value = (RNG.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)
        self.inits.append(numpy_helper.from_array(value, name))
        self.params += value.size
        return name

    def const(self, name, value):
        if value.dtype == np.float32 and value.size > 1:
            self.float_constants += value.size
        self.nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name)))
        return name

    def op(self, op, inputs, name, **attrs):
        outputs = name if isinstance(name, list) else [name]
        self.nodes.append(helper.make_node(op, inputs, outputs, name=outputs[0] + "_node", **attrs))
        return name

    def linear(self, x, name, width_in, width_out):
        return self.op("MatMul", [x, self.weight(name + ".weight", (width_in, width_out))], name)

    def to_heads(self, x, name, heads):  # (B, S, heads * D) -> (B, heads, S, D)
        shape = self.const(name + "_shape", np.array([0, 0, heads, -1], dtype=np.int64))
        return self.op("Transpose", [self.op("Reshape", [x, shape], name + "_split")], name, perm=[0, 2, 1, 3])

    def from_heads(self, x, name):  # (B, heads, S, D) -> (B, S, heads * D)
        t = self.op("Transpose", [x], name + "_t", perm=[0, 2, 1, 3])
        return self.op("Reshape", [t, self.const(name + "_shape", np.array([0, 0, -1], dtype=np.int64))], name)

    def model(self, output, opset, extra_outputs=(), x_shape=(B, S, E)):
        graph = helper.make_graph(
            self.nodes,
            self.name,
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in (output, *extra_outputs)],
            self.inits,
        )
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 10
        m = onnx.shape_inference.infer_shapes(m, strict_mode=True)  # value_info, as exporters write it
        onnx.checker.check_model(m, full_check=True)
        return m


def rope_tables(positions, half):
    inv = 1.0 / (10000 ** (np.arange(half, dtype=np.float64) / half))
    angles = np.outer(np.arange(positions), inv)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def rope_positions():
    """4-D (B, heads, S, D) queries rotated at position ids into a 16-row cache (NeoX halves)."""
    b = Builder("rope_positions")
    q = b.to_heads(b.linear("x", "q", E, E), "q_heads", 4)
    cos, sin = rope_tables(16, 4)
    pos = np.stack([np.arange(3, 3 + S), np.arange(S)]).astype(np.int64)
    r = b.op("RotaryEmbedding", [q, b.const("cos", cos), b.const("sin", sin), b.const("pos", pos)], "q_rot")
    y = b.linear(b.from_heads(r, "merged"), "out", E, E)
    return b, b.model(y, 23), "mse"


def rope_interleaved_partial():
    """3-D (B, S, heads * D) input with num_heads, interleaved pairs, 4 of each head's 8 rotated,
    caches (B, S, 2) without position ids."""
    b = Builder("rope_interleaved_partial")
    q = b.linear("x", "q", E, E)
    cos, sin = rope_tables(S, 2)
    cos = np.broadcast_to(cos, (B, S, 2)).copy()
    sin = np.broadcast_to(sin, (B, S, 2)).copy()
    r = b.op(
        "RotaryEmbedding",
        [q, b.const("cos", cos), b.const("sin", sin)],
        "q_rot",
        num_heads=4,
        rotary_embedding_dim=4,
        interleaved=1,
    )
    y = b.linear(r, "out", E, E)
    return b, b.model(y, 23), "mse"


def attention_3d_gqa():
    """3-D Q (4 heads) against 3-D K and V (2 heads), causal, softcap 3."""
    b = Builder("attention_3d_gqa")
    q = b.linear("x", "q", E, E)
    k = b.linear("x", "k", E, E // 2)
    v = b.linear("x", "v", E, E // 2)
    y = b.op("Attention", [q, k, v], "attn", q_num_heads=4, kv_num_heads=2, is_causal=1, softcap=3.0)
    return b, b.model(b.linear(y, "out", E, E), 23), "mse"


def attention_past_cache():
    """4-D attention over a 6-key cache and 4 new tokens: causal from the bottom right, present_key
    and present_value written."""
    b = Builder("attention_past_cache")
    s = 4
    q = b.to_heads(b.linear("x", "q", E, E), "q_heads", 4)
    k = b.to_heads(b.linear("x", "k", E, E), "k_heads", 4)
    v = b.to_heads(b.linear("x", "v", E, E), "v_heads", 4)
    past_k = b.const("past_key", RNG.standard_normal((B, 4, 6, 8)).astype(np.float32))
    past_v = b.const("past_value", RNG.standard_normal((B, 4, 6, 8)).astype(np.float32))
    b.op("Attention", [q, k, v, "", past_k, past_v], ["attn", "present_key", "present_value"], is_causal=1)
    y = b.linear(b.from_heads("attn", "merged"), "out", E, E)
    return b, b.model(y, 23, ("present_key", "present_value"), (B, s, E)), "mse"


def attention_bool_mask():
    """Opset 24's Attention: 4-D, a bool mask (1, 1, S, S) and an explicit scale; grouped heads
    (4 query, 1 key/value)."""
    b = Builder("attention_bool_mask")
    q = b.to_heads(b.linear("x", "q", E, E), "q_heads", 4)
    k = b.to_heads(b.linear("x", "k", E, 8), "k_heads", 1)
    v = b.to_heads(b.linear("x", "v", E, 8), "v_heads", 1)
    mask = RNG.random((1, 1, S, S)) < 0.6
    mask[..., np.arange(S), np.arange(S)] = True  # every query sees a key
    y = b.op("Attention", [q, k, v, b.const("mask", mask)], "attn", scale=0.2)
    return b, b.model(b.linear(b.from_heads(y, "merged"), "out", E, E), 24), "mse"


def llama_block():
    """RMSNormalization, rotary queries and keys at position ids, grouped-query causal attention
    (3-D, a float mask added), an output projection and a residual: a LLaMA block at opset 23."""
    b = Builder("llama_block")
    h = b.op("RMSNormalization", ["x", b.weight("norm.weight", (E,))], "normed", axis=-1, epsilon=1e-6)
    cos, sin = rope_tables(S, 4)
    pos = np.tile(np.arange(S, dtype=np.int64), (B, 1))
    rot = []
    for name, heads in (("q", 4), ("k", 2)):
        p = b.linear(h, name, E, heads * 8)
        rot.append(
            b.op(
                "RotaryEmbedding",
                [p, b.const(name + "_cos", cos), b.const(name + "_sin", sin), b.const(name + "_pos", pos)],
                name + "_rot",
                num_heads=heads,
            )
        )
    v = b.linear(h, "v", E, 16)
    bias = np.where(RNG.random((B, 1, S, S)) < 0.2, -2.0, 0.0).astype(np.float32)
    y = b.op("Attention", [rot[0], rot[1], v, b.const("bias", bias)], "attn", q_num_heads=4, kv_num_heads=2, is_causal=1)
    out = b.op("Add", ["x", b.linear(y, "o", E, E)], "residual")
    return b, b.model(out, 23), "mse"


def deconv(name, **attrs):
    """ConvTranspose (opset 17) whose pads ONNX derives from an output_shape or an auto_pad
    (ConvTranspose-11's rule, an odd total padding left uneven), which torch's exporter never
    writes."""
    b = Builder(name)
    y = b.op("ConvTranspose", ["x", b.weight("up.weight", (3, 4, 3, 3))], "up", strides=[2, 2], kernel_shape=[3, 3],
             **attrs)
    return b, b.model(b.op("Relu", [y], "act"), 17, x_shape=(B, 3, 5, 5)), "mse"


def deconv_output_shape():
    return deconv("deconv_output_shape", output_shape=[10, 9])


def deconv_same_upper():
    return deconv("deconv_same_upper", auto_pad="SAME_UPPER")


def main():
    os.makedirs(OUT, exist_ok=True)
    manifest = []
    for make in (rope_positions, rope_interleaved_partial, attention_3d_gqa, attention_past_cache, attention_bool_mask,
                 llama_block, deconv_output_shape, deconv_same_upper):
        b, model, loss = make()
        x_info = model.graph.input[0].type.tensor_type.shape
        x_shape = [d.dim_value for d in x_info.dim]
        x = RNG.standard_normal(x_shape).astype(np.float32)
        runtime = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
        try:
            reference = ReferenceEvaluator(model).run(None, {"x": x})
            oracle = "onnx.reference"
        except ValueError:  # onnx 1.23's ConvTranspose ignores an output_shape's pads: onnxruntime alone
            reference, oracle = runtime, "onnxruntime"
        for ref, got in zip(reference, runtime):
            err = float(np.max(np.abs(ref - got)) / max(1e-6, float(np.max(np.abs(ref)))))
            assert err < 1e-4, f"{b.name}: onnxruntime differs from the reference by {err}"
        onnx.save(model, os.path.join(OUT, b.name + ".onnx"))
        x.tofile(os.path.join(OUT, b.name + ".in.bin"))
        reference[0].astype(np.float32).tofile(os.path.join(OUT, b.name + ".out.bin"))
        manifest.append({
            "name": b.name,
            "file": b.name + ".onnx",
            "opset": model.opset_import[0].version,
            "onnx": onnx.__version__,
            "onnxruntime": ort.__version__,
            "expected_by": oracle,
            "input": "x",
            "input_shape": x_shape,
            "input_dtype": "float32",
            "parameters": int(b.params),
            "float_constants": int(b.float_constants),
            "loss": loss,
            "output_shape": list(reference[0].shape),
            "other_output_shapes": [list(r.shape) for r in reference[1:]],
            "ops": sorted({n.op_type for n in model.graph.node} - {"Constant"}),
        })
        print(f"{b.name}: opset {manifest[-1]['opset']}, {b.params} parameters, output {reference[0].shape}")
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
