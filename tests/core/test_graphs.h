// Small hand-built graphs for core tests.
#pragma once

#include "graph/graph_builder.h"

namespace ps::test {

// x (4, 8) -> matmul W (8, 16) -> bias -> relu -> matmul W2 (16, 2) -> loss
inline Graph tinyMlp()
{
    GraphBuilder b(ModelInfo { "tiny", "mlp", "{}", 4 });
    const auto x = b.input("x", { 4, 8 }, DType::F32);
    const auto labels = b.input("labels", { 4 }, DType::I64);
    auto h = b.op(OpType::MatMul, "fc1", { x, b.parameter("fc1.weight", { 8, 16 }) });
    h = b.op(OpType::BiasAdd, "fc1.bias_add", { h, b.parameter("fc1.bias", { 16 }) });
    h = b.op(OpType::Relu, "relu", { h });
    h = b.op(OpType::MatMul, "fc2", { h, b.parameter("fc2.weight", { 16, 2 }) });
    return b.finish({ b.op(OpType::CrossEntropy, "loss", { h, labels }) });
}

} // namespace ps::test
