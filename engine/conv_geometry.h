// The windows of Conv, ConvTranspose, MaxPool and AvgPool (2-D or 3-D) read from a node's attributes, shared
// by the CPU and the CUDA kernels (the index math over them is engine/conv_math.h). Errors name the node. Depends on:
// core graph types, conv_math.h.
#pragma once

#include "conv_math.h"
#include "graph/graph.h"

#include <vector>

namespace ps::engine {

// Conv's window over an (N, C, H, W) or (N, C, D, H, W) input for a weight (F, C / group, [kd,]
// kh, kw): strides, pads (begins, then ends), dilations. Throws naming the node where the ranks
// differ, an attribute has the wrong count, or no window fits.
[[nodiscard]] math::Window convWindow(const Node& node, const Shape& x, const Shape& weight);

// ConvTranspose's window for a weight (C, F / group, [kd,] kh, kw): that of the convolution whose
// input gradient it computes, over the output image ((in - 1) stride - pads + dilation (k - 1) +
// output_padding + 1 along each axis), its grid of windows being the input.
[[nodiscard]] math::Window transposedConvWindow(const Node& node, const Shape& x, const Shape& weight);

// MaxPool's window (its `kernel` attribute) over an (N, C, H, W) or (N, C, D, H, W) input.
[[nodiscard]] math::Window maxPoolWindow(const Node& node, const Shape& x);

struct AvgPoolGeometry
{
    math::PoolDim h, w;
    bool includePad = false;
    math::PoolDim d = math::kUnitPoolDim; // a 3-D pool's depth; one plane for a 2-D one
};

// AvgPool's spans, as torch.nn.functional.avg_pool2d (avg_pool3d over (N, C, D, H, W)); throws
// naming the node for a missing kernel, an input of another rank, dilations, or a kernel larger
// than the padded input.
[[nodiscard]] AvgPoolGeometry avgPoolGeometry(const Node& node, const Shape& x);

// Resize of the last two dims (ONNX Resize with sizes; mode nearest or linear; the coordinate
// transformation and nearest rounding modes torch exports), as per-axis taps: output row y reads
// rows[y], column x reads cols[x]. Throws naming the node for other sizes, modes or antialiasing.
struct ResizeGeometry
{
    Shape out;
    std::vector<math::ResizeTap> rows, cols;
    std::int64_t h = 0, w = 0, planes = 0; // the input as `planes` images of h x w
};
[[nodiscard]] ResizeGeometry resizeGeometry(const Node& node, const Shape& x);

// Pad's output shape, leading pads and mode ("pads": begins, then ends, negative crops; "mode"
// constant, reflect, edge or wrap); throws naming the node for a wrong pads count, an axis cropped
// below zero, an unknown mode, or a non-constant mode on an empty axis.
struct PadGeometry
{
    Shape out;
    std::vector<std::int64_t> begin;
    math::PadMode mode = math::PadMode::Constant;
};
[[nodiscard]] PadGeometry padGeometry(const Node& node, const Shape& in);

} // namespace ps::engine
