"""Seeds for fuzz_onnx_import: a few tiny hand-built models (every op family the importer maps,
dynamic dims, folded shape arithmetic) and the small files tests/data/make_onnx_fixtures.py exports
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


def main(argv):
    out_dir = argv[0]
    os.makedirs(out_dir, exist_ok=True)
    for graph, opset in ((mlp(), 13), (block(), 17), (embedding(), 13)):
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
