// 1-D convolutions and pools (torch's Conv1d, ConvTranspose1d, MaxPool1d, AvgPool1d: audio stems such as Whisper's,
// temporal convolution networks and their upsampling decoders, 1-D convolutions inside sequence models) as the 2-D ones
// the IR and every backend have: x (N, C, L) is unsqueezed to (N, C, 1, L), the window gets a height of 1 (kernel_shape
// [1, k], strides [1, s], dilations [1, d], pads [0, begin, 0, end], output_padding [0, p]), the weight (F, C / group,
// k) becomes (F, C / group, 1, k) (a transposed one's (C, F / group, k) becomes (C, F / group, 1, k)) (in place, same
// bytes, where the convolution is the initializer's only reader; else through an Unsqueeze: shared and computed weights
// such as weight_norm's), and the output is squeezed back to (N, F, L'). The node keeps its name; the reshapes are
// named after it ("<node>/as2d", "<node>/as1d"), new values after its output. The results are the 1-D operator's,
// element for element. MaxPool with an indices output stays 1-D (and opaque).
// Runs on the opset-17 form (Unsqueeze/Squeeze with axes inputs), before shape inference.
// Depends on: onnx protobuf types.
#pragma once

#include <onnx/onnx_pb.h>

namespace ps::onnximport {

// Rewrites every 1-D Conv, ConvTranspose, MaxPool and AveragePool of the main graph (known as 1-D by a one-element
// kernel_shape, or a rank-3 weight initializer) into its 2-D form; returns how many it rewrote. A node whose 1-D form
// it cannot prove (no kernel_shape and a computed weight) is left as it is.
int lowerOneDimensionalWindows(onnx::ModelProto& model);

} // namespace ps::onnximport
