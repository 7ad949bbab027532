// AmoebaNet-D (Real et al., "Regularized Evolution for Image Classifier Architecture Search",
// AAAI 2019), as GPipe (Huang et al., NeurIPS 2019, §4, Table 1) trains it and torchgpipe's
// benchmarks build it (one difference: the genotype's 3x3 max pools are max pools here, where
// torchgpipe's module averages; the parameters and multiply-adds are the same, what the pool keeps
// for its backward is not): AmoebaNet-D (L, D) has L normal cells in three groups of L / 3 and D
// filters. A 3x3 stride-2
// stem, two reduction cells, then normal cells, a reduction, normal cells, a reduction, normal
// cells, global average pooling and a fully connected classifier. Each cell reads the two cells
// before it (each brought to the cell's width by ReLU, 1x1 convolution, BatchNorm, or a factorized
// reduction after a reduction cell), adds five pairs of operations into new states and
// concatenates some of them: normal cells the genotype's states 0, 3, 4 and 6 (TensorFlow's
// reference implementation, which GPipe's parameter counts follow), reduction cells 4, 5 and 6.
// Normal cells keep the width; each reduction halves the image and doubles it. GPipe's (18, 208)
// has 81.5M parameters (Table 1: 82M). DawnPiper gives its AmoebaNet's size only (28M); the
// reproduction report assumes (18, 120), 28.0M (resources/reproduction/papers.json).
// Configuration: layers = L (a multiple of 3), hidden = D (a multiple of 4), seq = the image side
// (a multiple of 32: five halvings), vocab = classes.
#include "util/error.h"
#include "zoo/zoo_builders.h"

#include <array>

namespace ps::zoo {
namespace {

    enum class CellOp : std::uint8_t { Conv1x1, Conv3x3, Conv1x7x7x1, MaxPool3x3, MaxPool2x2, AvgPool3x3, Identity };

    struct Step
    {
        int input; // which state the operation reads
        CellOp op;
    };

    // The genotype: operations in pairs, each pair's sum a new state (states 0 and 1 are the
    // cell's two inputs).
    constexpr std::array<Step, 10> kNormal { { { 1, CellOp::Conv1x1 }, { 1, CellOp::MaxPool3x3 },
        { 1, CellOp::Identity }, { 0, CellOp::Conv1x7x7x1 }, { 0, CellOp::Conv1x1 }, { 0, CellOp::Conv1x7x7x1 },
        { 2, CellOp::MaxPool3x3 }, { 2, CellOp::Identity }, { 1, CellOp::AvgPool3x3 }, { 5, CellOp::Conv1x1 } } };
    constexpr std::array<int, 4> kNormalConcat { 0, 3, 4, 6 };
    constexpr std::array<Step, 10> kReduction { { { 0, CellOp::MaxPool2x2 }, { 0, CellOp::MaxPool3x3 },
        { 2, CellOp::Identity }, { 1, CellOp::Conv3x3 }, { 2, CellOp::Conv1x7x7x1 }, { 2, CellOp::MaxPool3x3 },
        { 3, CellOp::Identity }, { 1, CellOp::MaxPool2x2 }, { 2, CellOp::AvgPool3x3 }, { 3, CellOp::Conv1x1 } } };
    constexpr std::array<int, 3> kReductionConcat { 4, 5, 6 };

    // ReLU, convolution, BatchNorm: the unit every convolution of a cell is.
    TensorId reluConvBn(GraphBuilder& b, TensorId x, const Conv2d& c, const std::string& name)
    {
        ScopeGuard scope(b, name);
        return batchNorm2d(b, conv2d(b, relu(b, x, "relu"), c, "conv"), "bn");
    }

    // Halves the image to `out` channels: two 1x1 stride-2 convolutions, the second over the image
    // shifted by one pixel (its first row and column dropped, a zero row and column added), their
    // outputs concatenated and normalized.
    TensorId factorizedReduce(GraphBuilder& b, TensorId x, std::int64_t out, const std::string& name)
    {
        ScopeGuard scope(b, name);
        x = relu(b, x, "relu");
        const auto left = conv2d(b, x, { out / 2, 1, 1, 2, 2 }, "conv1");
        // x[:, :, 1:, 1:] padded by a zero row and column: one Pad, cropping where its pads are
        // negative (a new array, as PyTorch's slice view and its pad make one).
        const auto shifted =
            b.op(OpType::Pad, "shift", { x }, { { "pads", std::vector<std::int64_t> { 0, 0, -1, -1, 0, 0, 1, 1 } } });
        const auto right = conv2d(b, shifted, { out / 2, 1, 1, 2, 2 }, "conv2");
        const auto joined = b.op(OpType::Concat, "concat", { left, right }, { { "axis", std::int64_t { 1 } } });
        return batchNorm2d(b, joined, "bn");
    }

    TensorId cellOp(GraphBuilder& b, TensorId x, CellOp op, std::int64_t stride, const std::string& name)
    {
        const auto c = b.shape(x)[1];
        switch (op) {
        case CellOp::Conv1x1:
            return reluConvBn(b, x, { c, 1, 1, stride, stride }, name);
        case CellOp::Conv3x3: { // a bottleneck: 1x1 to a quarter, 3x3, 1x1 back
            ScopeGuard scope(b, name);
            x = reluConvBn(b, x, { c / 4, 1, 1, 1, 1 }, "0");
            x = reluConvBn(b, x, { c / 4, 3, 3, stride, stride }, "1");
            return reluConvBn(b, x, { c, 1, 1, 1, 1 }, "2");
        }
        case CellOp::Conv1x7x7x1: { // the same with the 3x3 factorized into 1x7 and 7x1
            ScopeGuard scope(b, name);
            x = reluConvBn(b, x, { c / 4, 1, 1, 1, 1 }, "0");
            x = reluConvBn(b, x, { c / 4, 1, 7, 1, stride }, "1");
            x = reluConvBn(b, x, { c / 4, 7, 1, stride, 1 }, "2");
            return reluConvBn(b, x, { c, 1, 1, 1, 1 }, "3");
        }
        case CellOp::MaxPool3x3:
            return pool2d(b, OpType::MaxPool, x, { 3, stride, 1 }, name);
        case CellOp::MaxPool2x2:
            return pool2d(b, OpType::MaxPool, x, { 2, stride, 0 }, name);
        case CellOp::AvgPool3x3:
            return pool2d(b, OpType::AvgPool, x, { 3, stride, 1 }, name);
        case CellOp::Identity:
            return stride == 1 ? x : factorizedReduce(b, x, c, name);
        }
        throw Error("AmoebaNet: unknown cell operation");
    }

    // The two states a cell reads, in the order the genotype numbers them, and how they came.
    struct Inputs
    {
        TensorId previous; // state 0's source: the cell just before
        TensorId beforePrevious; // state 1's source
        bool afterReduction = false; // beforePrevious is twice as large as the cell's image
    };

    TensorId cell(GraphBuilder& b, const Inputs& in, std::int64_t channels, bool reduction)
    {
        std::vector<TensorId> states;
        states.push_back(reluConvBn(b, in.previous, { channels, 1, 1, 1, 1 }, "reduce1"));
        auto older = in.beforePrevious;
        if (in.afterReduction)
            older = factorizedReduce(b, older, channels, "reduce2");
        else if (b.shape(older)[1] != channels)
            older = reluConvBn(b, older, { channels, 1, 1, 1, 1 }, "reduce2");
        states.push_back(older);
        const auto& steps = reduction ? kReduction : kNormal;
        for (std::size_t i = 0; i < steps.size(); i += 2) {
            std::array<TensorId, 2> terms {};
            for (std::size_t j = 0; j < 2; ++j) {
                const auto& step = steps[i + j];
                const std::int64_t stride = reduction && step.input < 2 ? 2 : 1;
                terms[j] = cellOp(
                    b, states[static_cast<std::size_t>(step.input)], step.op, stride, "op" + std::to_string(i + j));
            }
            states.push_back(b.op(OpType::Add, "add" + std::to_string(i / 2), { terms[0], terms[1] }));
        }
        std::vector<TensorId> kept;
        if (reduction)
            for (const int s : kReductionConcat)
                kept.push_back(states[static_cast<std::size_t>(s)]);
        else
            for (const int s : kNormalConcat)
                kept.push_back(states[static_cast<std::size_t>(s)]);
        return b.op(OpType::Concat, "concat", kept, { { "axis", std::int64_t { 1 } } });
    }

} // namespace

Graph buildAmoebaNet(const ModelConfig& c)
{
    if (c.layers % 3 != 0)
        throw Error("model configuration: AmoebaNet's normal cells (layers) come in three equal groups: a multiple "
                    "of 3, got "
            + std::to_string(c.layers));
    if (c.hidden % 4 != 0)
        throw Error("model configuration: AmoebaNet's filters (hidden) must be a multiple of 4, got "
            + std::to_string(c.hidden));
    if (c.seq < 32 || c.seq % 32 != 0)
        throw Error("model configuration: AmoebaNet halves the image five times: its side (seq) must be a multiple of "
                    "32, got "
            + std::to_string(c.seq));
    GraphBuilder b(modelInfo(c));
    auto x = b.input("images", { c.microBatch, 3, c.seq, c.seq }, DType::F32);
    const auto labels = b.input("labels", { c.microBatch }, DType::I64);
    std::int64_t channels = c.hidden / 4;
    {
        ScopeGuard scope(b, "stem1");
        x = batchNorm2d(b, conv2d(b, relu(b, x, "relu"), { channels, 3, 3, 2, 2 }, "conv"), "bn");
    }
    Inputs in { x, x, false };
    std::int32_t layer = 0;
    const auto addCell = [&](const std::string& name, bool reduction) {
        if (reduction)
            channels *= 2;
        b.setLayer(layer++);
        ScopeGuard scope(b, name);
        const auto out = cell(b, in, channels, reduction);
        in = { out, in.previous, reduction };
    };
    addCell("stem2", true);
    addCell("stem3", true);
    const auto normalCells = [&](int group) {
        for (std::int64_t i = 0; i < c.layers / 3; ++i)
            addCell("cell" + std::to_string(group) + "_normal" + std::to_string(i + 1), false);
    };
    normalCells(1);
    addCell("cell2_reduction", true);
    normalCells(3);
    addCell("cell4_reduction", true);
    normalCells(5);
    b.setLayer(kNoLayer);
    return b.finish({ classifierHead(b, in.previous, labels, c.vocab) });
}

} // namespace ps::zoo
