// The aten operator table (aten_ops.h).
#include "aten_ops.h"

namespace ps::profiler {

using enum OpType;

namespace {

    const std::vector<OpType> kGemmTail { BiasAdd, Add };

    // The table's entries (a data table, as the op registry's).
    std::unordered_map<std::string_view, AtenKind> buildAtenTable()
    {
        std::unordered_map<std::string_view, AtenKind> t;
        const auto add = [&t](std::initializer_list<std::string_view> names, AtenKind k) {
            for (const auto n : names)
                t[n] = k;
        };
        add({ "aten::linear", "aten::addmm", "aten::mm", "aten::matmul", "aten::bmm", "aten::baddbmm" },
            { { MatMul, Einsum }, kGemmTail });
        add({ "aten::einsum" }, { { Einsum, MatMul }, kGemmTail });
        add({ "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution", "aten::_convolution",
                "aten::cudnn_convolution" },
            { { Conv }, { BiasAdd, Add } });
        add({ "aten::scaled_dot_product_attention" },
            { { MatMul, Einsum }, { Scale, Div, Mul, Mask, Where, Add, Softmax, Dropout, MatMul, Einsum } });
        add({ "aten::layer_norm", "aten::native_layer_norm" },
            { { LayerNorm, ReduceMean }, { Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Reciprocal } });
        add({ "aten::rms_norm" }, { { RMSNorm, Pow }, { ReduceMean, Add, Sqrt, Reciprocal, Div, Mul } });
        add({ "aten::batch_norm", "aten::_batch_norm_impl_index", "aten::cudnn_batch_norm", "aten::native_batch_norm" },
            { { BatchNorm }, {} });
        // GroupNorm (and InstanceNorm, which torch runs as one) as one node, or the chain an older import kept.
        add({ "aten::group_norm", "aten::native_group_norm", "aten::instance_norm" },
            { { GroupNorm, ReduceMean }, { Reshape, Sub, Mul, ReduceMean, Add, Sqrt, Div } });
        add({ "aten::softmax", "aten::_softmax", "aten::log_softmax", "aten::_log_softmax" }, { { Softmax }, {} });
        // GELU as exported below opset 20: x / sqrt(2) (a Scale), Erf, + 1, * x, * 0.5.
        add({ "aten::gelu" }, { { Gelu, Scale, Div, Mul }, { Erf, Add, Mul, Div, Scale } });
        add({ "aten::relu", "aten::relu_" }, { { Relu }, {} });
        add({ "aten::tanh", "aten::tanh_" }, { { Tanh }, {} });
        add({ "aten::sigmoid", "aten::sigmoid_" }, { { Sigmoid }, {} });
        add({ "aten::silu", "aten::silu_" }, { { Sigmoid, Mul }, { Mul } });
        add({ "aten::hardswish", "aten::hardswish_" }, { { HardSwish }, {} });
        add({ "aten::hardsigmoid", "aten::hardsigmoid_" }, { { HardSigmoid }, {} });
        add({ "aten::leaky_relu", "aten::leaky_relu_" }, { { LeakyRelu }, {} });
        add({ "aten::hardtanh", "aten::hardtanh_", "aten::clamp", "aten::clamp_", "aten::clip" }, { { Clip }, {} });
        add({ "aten::dropout", "aten::native_dropout", "aten::feature_dropout", "aten::dropout_" },
            { { Dropout }, {} });
        add({ "aten::embedding" }, { { Embedding, Gather }, {} });
        add({ "aten::add", "aten::add_" }, { { Add, BiasAdd }, {} });
        add({ "aten::sub", "aten::sub_", "aten::rsub" }, { { Sub }, {} });
        add({ "aten::mul", "aten::mul_" }, { { Mul, Scale }, {} });
        add({ "aten::div", "aten::div_" }, { { Div, Scale }, {} });
        add({ "aten::neg" }, { { Neg }, {} });
        add({ "aten::pow" }, { { Pow }, {} });
        add({ "aten::sqrt" }, { { Sqrt }, {} });
        add({ "aten::rsqrt" }, { { Sqrt, Reciprocal }, { Reciprocal } });
        add({ "aten::reciprocal" }, { { Reciprocal }, {} });
        add({ "aten::exp" }, { { Exp }, {} });
        add({ "aten::sin" }, { { Sin }, {} });
        add({ "aten::cos" }, { { Cos }, {} });
        add({ "aten::log" }, { { Log }, {} });
        add({ "aten::abs" }, { { Abs }, {} });
        add({ "aten::erf" }, { { Erf }, {} });
        add({ "aten::masked_fill", "aten::masked_fill_" }, { { Mask, Where }, {} });
        add({ "aten::where" }, { { Where, Mask }, {} });
        add({ "aten::cross_entropy_loss", "aten::nll_loss", "aten::nll_loss_nd" }, { { CrossEntropy }, {} });
        add({ "aten::max_pool2d", "aten::max_pool2d_with_indices", "aten::max_pool3d",
                "aten::max_pool3d_with_indices" },
            { { MaxPool }, {} });
        add({ "aten::avg_pool2d", "aten::avg_pool3d" }, { { AvgPool }, {} });
        add({ "aten::adaptive_avg_pool2d", "aten::_adaptive_avg_pool2d", "aten::adaptive_avg_pool3d",
                "aten::_adaptive_avg_pool3d" },
            { { GlobalAvgPool, AvgPool }, {} });
        add({ "aten::mean" }, { { ReduceMean, GlobalAvgPool }, {} });
        add({ "aten::sum" }, { { ReduceSum }, {} });
        add({ "aten::cat", "aten::concat" }, { { Concat }, {} });
        add({ "aten::index_select", "aten::gather" }, { { Gather, GatherElements }, {} });
        add({ "aten::cumsum" }, { { CumSum }, {} });
        add({ "aten::tril", "aten::triu" }, { { Trilu }, {} });
        add({ "aten::eq", "aten::ne", "aten::lt", "aten::le", "aten::gt", "aten::ge", "aten::logical_not" },
            { { Equal, Less, LessOrEqual, Greater, GreaterOrEqual, Not }, {} });
        add({ "aten::topk" }, { { TopK }, {} });
        add({ "aten::pad", "aten::constant_pad_nd", "aten::reflection_pad2d" }, { { Pad }, {} });
        add({ "aten::upsample_nearest2d", "aten::upsample_bilinear2d" }, { { Resize }, {} });
        // Views, copies and constants: launch nothing the graph has a node for.
        add({ "aten::view", "aten::reshape", "aten::transpose", "aten::permute", "aten::t", "aten::split",
                "aten::split_with_sizes", "aten::chunk", "aten::select", "aten::slice", "aten::unsqueeze",
                "aten::squeeze", "aten::expand", "aten::flatten", "aten::contiguous", "aten::clone",
                "aten::_unsafe_view", "aten::narrow", "aten::unflatten", "aten::as_strided", "aten::detach",
                "aten::alias", "aten::copy_", "aten::to", "aten::_to_copy", "aten::type_as", "aten::arange",
                "aten::ones", "aten::zeros", "aten::ones_like", "aten::zeros_like", "aten::full", "aten::empty",
                "aten::item", "aten::lift_fresh", "aten::numpy_T" },
            { { Reshape, Transpose, Split, Slice, Expand, Select }, {}, true });
        return t;
    }

} // namespace

const std::unordered_map<std::string_view, AtenKind>& atenTable()
{
    static const std::unordered_map<std::string_view, AtenKind> table = buildAtenTable();
    return table;
}

std::vector<OpType> atenOpKinds(std::string_view atenName)
{
    const auto it = atenTable().find(atenName);
    return it == atenTable().end() || it->second.view ? std::vector<OpType> {} : it->second.kinds;
}

} // namespace ps::profiler
