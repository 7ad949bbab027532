// Convolutional pieces shared by the zoo's CNN families (ResNet, AmoebaNet), one IR node per
// kernel a framework would launch: convolutions without bias (a BatchNorm follows each), BatchNorm
// with constant running statistics, ReLU and 2-D pooling.
#include "zoo/zoo_builders.h"

namespace ps::zoo {

TensorId conv2d(GraphBuilder& b, TensorId x, const Conv2d& c, const std::string& name)
{
    const auto in = b.shape(x)[1];
    const auto w = b.parameter(name + ".weight", { c.out, in, c.kernelH, c.kernelW });
    Attributes attrs;
    attrs["strides"] = std::vector<std::int64_t> { c.strideH, c.strideW };
    attrs["pads"] = std::vector<std::int64_t> { c.kernelH / 2, c.kernelW / 2, c.kernelH / 2, c.kernelW / 2 };
    attrs["dilations"] = std::vector<std::int64_t> { 1, 1 };
    attrs["group"] = std::int64_t { 1 };
    return b.op(OpType::Conv, name, { x, w }, attrs);
}

TensorId batchNorm2d(GraphBuilder& b, TensorId x, const std::string& name)
{
    const auto channels = b.shape(x)[1];
    const auto n = static_cast<std::size_t>(channels);
    const auto gamma = b.parameter(name + ".weight", { channels });
    const auto beta = b.parameter(name + ".bias", { channels });
    const auto mean = b.constant(name + ".running_mean", { channels }, std::vector<float>(n, 0.0F));
    const auto var = b.constant(name + ".running_var", { channels }, std::vector<float>(n, 1.0F));
    Attributes attrs;
    attrs["epsilon"] = 1e-5;
    attrs["momentum"] = 0.9; // ONNX's convention: running = 0.9 running + 0.1 batch (PyTorch's 0.1)
    return b.op(OpType::BatchNorm, name, { x, gamma, beta, mean, var }, attrs);
}

TensorId relu(GraphBuilder& b, TensorId x, const std::string& name)
{
    return b.op(OpType::Relu, name, { x });
}

TensorId pool2d(GraphBuilder& b, OpType op, TensorId x, const Pool2d& p, const std::string& name)
{
    Attributes attrs;
    attrs["kernel"] = std::vector<std::int64_t> { p.kernel, p.kernel };
    attrs["strides"] = std::vector<std::int64_t> { p.stride, p.stride };
    attrs["pads"] = std::vector<std::int64_t> { p.pad, p.pad, p.pad, p.pad };
    attrs["dilations"] = std::vector<std::int64_t> { 1, 1 };
    attrs["ceil_mode"] = std::int64_t { 0 };
    if (op == OpType::AvgPool)
        attrs["count_include_pad"] = std::int64_t { 0 };
    return b.op(op, name, { x }, attrs);
}

TensorId classifierHead(GraphBuilder& b, TensorId x, TensorId labels, std::int64_t classes)
{
    x = b.op(OpType::GlobalAvgPool, "avgpool", { x });
    const auto features = b.shape(x)[1];
    Attributes flat;
    flat["shape"] = std::vector<std::int64_t> { -1, features };
    x = b.op(OpType::Reshape, "flatten", { x }, flat);
    const auto logits = linear(b, x, classes, true, "fc");
    return b.op(OpType::CrossEntropy, "loss", { logits, labels });
}

} // namespace ps::zoo
