// ResNet (He et al., "Deep Residual Learning", Table 1): the zoo's convolutional network, the CNN
// workload of DawnPiper's evaluation (its Fig. 3 profiles ResNet-152). Torchvision's layout: a 7x7
// stride-2 stem and 3x3 max pool, four stages of basic (depth 18, 34) or bottleneck (50, 101, 152)
// blocks with the stride on the 3x3 convolution and a 1x1 projection shortcut where the shape
// changes, global average pooling and a fully connected classifier. BatchNorm's running
// statistics are constants; its gamma and beta are parameters, so the parameter counts are
// torchvision's (resnet50: 25,557,032).
// Configuration: layers = depth, hidden = the stem's width (64), seq = the image side (224),
// vocab = classes (1000).
#include "util/error.h"
#include "zoo/zoo_builders.h"

#include <array>

namespace ps::zoo {
namespace {

    struct Conv
    {
        std::int64_t out = 0;
        std::int64_t kernel = 1;
        std::int64_t stride = 1;
    };

    TensorId convBn(GraphBuilder& b, TensorId x, const Conv& c, const std::string& conv_, const std::string& bn)
    {
        return batchNorm2d(b, conv2d(b, x, { c.out, c.kernel, c.kernel, c.stride, c.stride }, conv_), bn);
    }

    // One residual block; `width` is its 3x3 convolutions' width (bottleneck: 4x that out).
    TensorId block(GraphBuilder& b, TensorId x, std::int64_t width, std::int64_t stride, bool bottleneck)
    {
        const auto out = bottleneck ? 4 * width : width;
        TensorId y;
        if (bottleneck) {
            y = relu(b, convBn(b, x, { width, 1, 1 }, "conv1", "bn1"), "relu1");
            y = relu(b, convBn(b, y, { width, 3, stride }, "conv2", "bn2"), "relu2");
            y = convBn(b, y, { out, 1, 1 }, "conv3", "bn3");
        } else {
            y = relu(b, convBn(b, x, { width, 3, stride }, "conv1", "bn1"), "relu1");
            y = convBn(b, y, { out, 3, 1 }, "conv2", "bn2");
        }
        auto shortcut = x;
        if (stride != 1 || b.shape(x)[1] != out) {
            ScopeGuard scope(b, "downsample");
            shortcut = convBn(b, x, { out, 1, stride }, "0", "1");
        }
        return relu(b, b.op(OpType::Add, "add", { y, shortcut }), "relu");
    }

} // namespace

Graph buildResNet(const ModelConfig& c)
{
    std::array<std::int64_t, 4> blocks {};
    bool bottleneck = true;
    switch (c.layers) {
    case 18:
        blocks = { 2, 2, 2, 2 };
        bottleneck = false;
        break;
    case 34:
        blocks = { 3, 4, 6, 3 };
        bottleneck = false;
        break;
    case 50:
        blocks = { 3, 4, 6, 3 };
        break;
    case 101:
        blocks = { 3, 4, 23, 3 };
        break;
    case 152:
        blocks = { 3, 8, 36, 3 };
        break;
    default:
        throw Error("model configuration: a ResNet's depth (layers) is 18, 34, 50, 101 or 152, got "
            + std::to_string(c.layers));
    }
    if (c.seq < 32)
        throw Error("model configuration: a ResNet's image side (seq) must be at least 32 pixels, got "
            + std::to_string(c.seq));
    GraphBuilder b(modelInfo(c));
    auto x = b.input("images", { c.microBatch, 3, c.seq, c.seq }, DType::F32);
    const auto labels = b.input("labels", { c.microBatch }, DType::I64);
    x = relu(b, convBn(b, x, { c.hidden, 7, 2 }, "conv1", "bn1"), "relu");
    x = pool2d(b, OpType::MaxPool, x, { 3, 2, 1 }, "maxpool");
    std::int32_t layer = 0;
    for (std::size_t stage = 0; stage < blocks.size(); ++stage) {
        const auto width = c.hidden << stage;
        for (std::int64_t i = 0; i < blocks[stage]; ++i) {
            b.setLayer(layer++);
            ScopeGuard scope(b, "layer" + std::to_string(stage + 1) + "." + std::to_string(i));
            x = block(b, x, width, i == 0 && stage > 0 ? 2 : 1, bottleneck);
        }
    }
    b.setLayer(kNoLayer);
    return b.finish({ classifierHead(b, x, labels, c.vocab) });
}

} // namespace ps::zoo
