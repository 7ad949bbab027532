// Frequency tables: float tensors of several elements, initializers or Constant nodes (torch's
// folded buffers), that the forward turns into position tables through Sin or Cos: a rotary
// embedding's inverse frequencies times the positions (a product or a MatMul with values computed
// from the bound sizes: Shape, Size, Range), then cos and sin; a sinusoidal encoding's divisors.
// Torch keeps them as buffers; without the tracer's record (onnx/tracer_metadata.h) an importer
// would train them. Static values are those the data cannot change once the sizes are bound:
// initializers, Constant nodes, Shape and Size of any value, and every deterministic node whose
// inputs are all static. A tensor is a frequency table when
//   - followed through its static uses, every path reaches a Sin or Cos before it meets a
//     data-dependent value, a graph output or another float tensor of several elements, and every
//     Sin or Cos it reaches reads it after a product with positions;
//   - its values (where the file holds them) are positive and monotonic, as frequencies and
//     divisors are;
//   - no subgraph (If, Loop, Scan) reads it.
// Not tables: a learned position table (looked up by positions, then added: no Sin or Cos), an
// angle parameter (Sin or Cos of the tensor itself), random Fourier features (values of both signs),
// frequencies that meet the data first (position ids given as a graph input). A learnable
// frequency vector initialised to rotary frequencies is taken for a table: the import names every
// table it froze, and `--parameters` or the tracer's record makes it a parameter again.
// Depends on: onnx protobuf types only.
#pragma once

#include <onnx/onnx_pb.h>
#include <set>
#include <string>

namespace ps::onnximport {

// The names of the initializers and Constant outputs of `model` that are frequency tables.
[[nodiscard]] std::set<std::string> frequencyTables(const onnx::ModelProto& model);

} // namespace ps::onnximport
