// A plain multi-layer perceptron classifier: the smallest model that exercises every planner path.
#include "zoo/zoo_builders.h"

namespace ps::zoo {

Graph buildMlp(const ModelConfig& c)
{
    GraphBuilder b(modelInfo(c));
    auto x = b.input("features", { c.microBatch, c.hidden }, DType::F32);
    const auto labels = b.input("labels", { c.microBatch }, DType::I64);
    for (std::int64_t i = 0; i < c.layers; ++i) {
        b.setLayer(static_cast<std::int32_t>(i));
        ScopeGuard scope(b, "layers." + std::to_string(i));
        x = b.op(OpType::Relu, "relu", { linear(b, x, c.hidden, true, "linear") });
        x = dropout(b, x, c.dropout, "dropout");
    }
    b.setLayer(kNoLayer);
    const auto logits = linear(b, x, c.vocab, true, "head");
    return b.finish({ b.op(OpType::CrossEntropy, "loss", { logits, labels }) });
}

} // namespace ps::zoo
