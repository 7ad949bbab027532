"""Seeds for fuzz_onnx_import: a few tiny hand-built models (every op family the importer maps,
dynamic dims, folded shape arithmetic and in-graph masks, Identity aliases) and the small files tests/data/make_onnx_fixtures.py exports
from real PyTorch modules (those under 128 KB: the encoder layers, not resnet18).

Usage: /usr/bin/python3 make_onnx_seeds.py OUT_DIR [FIXTURES_DIR]   (Debian's python3-onnx)
"""
import os
import shutil
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

MAX_FIXTURE_BYTES = 128 * 1024


def tensor(name, shape):
    return numpy_helper.from_array(np.full(shape, 0.5, dtype=np.float32), name)


def mlp():
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["m"]),
        helper.make_node("Add", ["m", "b2"], ["y"]),
    ]
    inits = [tensor("w1", [8, 4]), tensor("b1", [8]), tensor("w2", [8, 2]), tensor("b2", [2])]
    return helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])], inits)


def block():
    """LayerNorm, GELU via Erf, a reshape from folded Shape/Gather/Concat, Softmax, Transpose."""
    shape_const = numpy_helper.from_array(np.array([0], dtype=np.int64), "zero")
    heads = numpy_helper.from_array(np.array([2, 4], dtype=np.int64), "heads")
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g", "beta"], ["n"], axis=-1),
        helper.make_node("Shape", ["n"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        helper.make_node("Constant", [], ["minus1"],
                         value=numpy_helper.from_array(np.array([-1], dtype=np.int64))),
        helper.make_node("Concat", ["b", "minus1", "heads"], ["new_shape"], axis=0),
        helper.make_node("Reshape", ["n", "new_shape"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3]),
        helper.make_node("Softmax", ["t"], ["p"], axis=-1),
        helper.make_node("Erf", ["p"], ["e"]),
        helper.make_node("Mul", ["e", "p"], ["y"]),
    ]
    inits = [tensor("g", [8]), tensor("beta", [8]), shape_const, heads]
    return helper.make_graph(nodes, "block",
                             [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)


def embedding():
    nodes = [
        helper.make_node("Gather", ["wte", "ids"], ["e"], axis=0),
        helper.make_node("ReduceMean", ["e"], ["m"], axes=[-1], keepdims=1),
        helper.make_node("Sub", ["e", "m"], ["y"]),
    ]
    return helper.make_graph(nodes, "embedding",
                             [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [tensor("wte", [16, 8])])


def causal_mask():
    """A mask built in the forward and folded at import: Shape -> Range -> Unsqueeze -> comparison ->
    Where with -inf, Trilu over ConstantOfShape, Cast, ScatterND, a strided Slice, Identity."""
    def i64(name, values):
        return numpy_helper.from_array(np.array(values, dtype=np.int64), name)
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero_s"], ["t"], axis=0),
        helper.make_node("Range", ["zero_s", "t", "one_s"], ["pos"]),
        helper.make_node("Unsqueeze", ["pos", "ax1"], ["row"]),
        helper.make_node("Unsqueeze", ["pos", "ax0"], ["col"]),
        helper.make_node("GreaterOrEqual", ["row", "col"], ["keep"]),
        helper.make_node("Unsqueeze", ["t", "ax0"], ["t1"]),
        helper.make_node("Concat", ["t1", "t1"], ["tt"], axis=0),
        helper.make_node("ConstantOfShape", ["tt"], ["ones"], value=numpy_helper.from_array(np.ones(1, np.float32))),
        helper.make_node("Trilu", ["ones"], ["tri"], upper=0),
        helper.make_node("Cast", ["tri"], ["trib"], to=TensorProto.BOOL),
        helper.make_node("And", ["keep", "trib"], ["mask"]),
        helper.make_node("ScatterND", ["tri", "idx", "upd"], ["tri2"]),
        helper.make_node("Slice", ["tri2", "zero", "big", "ax0", "two"], ["every2"]),
        helper.make_node("Identity", ["xt_src"], ["xt"]),
        helper.make_node("MatMul", ["x", "xt"], ["scores"]),
        helper.make_node("Where", ["mask", "scores", "ninf"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["y"], axis=-1),
        helper.make_node("ReduceSum", ["every2", "ax0"], ["y2"], keepdims=0),
    ]
    inits = [i64("zero_s", 0), i64("one_s", 1), i64("zero", [0]), i64("two", [2]), i64("ax0", [0]), i64("ax1", [1]),
             i64("big", [1 << 40]), i64("idx", [[0, 1]]), numpy_helper.from_array(np.array([5.0], np.float32), "upd"),
             numpy_helper.from_array(np.array(-np.inf, np.float32), "ninf"), tensor("xt_src", [8, 6])]
    return helper.make_graph(nodes, "causal_mask",
                             [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 8])],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                              helper.make_tensor_value_info("y2", TensorProto.FLOAT, None)], inits)


def cnn():
    """Conv, an Identity alias of a bias, Clip, HardSwish, Pad, ceil-mode pools, Resize, TopK."""
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Identity", ["b"], ["b2"]),
        helper.make_node("Conv", ["c", "w2", "b2"], ["c2"]),
        helper.make_node("Clip", ["c2", "lo", "hi"], ["r6"]),
        helper.make_node("HardSwish", ["r6"], ["hs"]),
        helper.make_node("Pad", ["hs", "pads"], ["p"], mode="reflect"),
        helper.make_node("AveragePool", ["p"], ["a"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
        helper.make_node("MaxPool", ["a"], ["m"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
        helper.make_node("Resize", ["m", "", "scales"], ["u"], mode="nearest"),
        helper.make_node("Flatten", ["u"], ["f"]),
        helper.make_node("TopK", ["f", "k"], ["v", "i"]),
    ]
    inits = [tensor("w", [4, 3, 3, 3]), tensor("b", [4]), tensor("w2", [4, 4, 1, 1]),
             numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6.0, np.float32), "hi"),
             numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads"),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
             numpy_helper.from_array(np.array([3], np.int64), "k")]
    return helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 9, 9])],
                             [helper.make_tensor_value_info("v", TensorProto.FLOAT, None)], inits)


def main(argv):
    out_dir = argv[0]
    os.makedirs(out_dir, exist_ok=True)
    for graph, opset in ((mlp(), 13), (block(), 17), (embedding(), 13), (causal_mask(), 17), (cnn(), 17)):
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="ps-fuzz")
        save(model, os.path.join(out_dir, f"{graph.name}-op{opset}.onnx"))
    fixtures = argv[1] if len(argv) > 1 else None
    if fixtures and os.path.isdir(fixtures):
        for name in sorted(os.listdir(fixtures)):
            path = os.path.join(fixtures, name)
            if name.endswith(".onnx") and os.path.getsize(path) <= MAX_FIXTURE_BYTES:
                shutil.copy(path, out_dir)
    print(f"onnx seeds: {len(os.listdir(out_dir))} files in {out_dir}")


if __name__ == "__main__":
    main(sys.argv[1:])
