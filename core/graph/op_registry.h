// The op registry: one entry per IR op with everything core knows about it: its name in project
// files, arity, attributes, output shapes, whether it is a view, its FLOPs per element, what its
// backward keeps, and how much of its backward is the weight gradient.
//
// Shape inference (graph/shape_inference.h) and the cost model (graph/op_cost.h) read these
// entries instead of switching on the op, so a new op is one entry in op_registry.cpp plus its
// tests; the ONNX importer maps ONNX ops onto entries (onnx/op_mapping.cpp) and each engine backend
// registers its forward/backward kernels against the same OpType (engine/backend.h KernelTable).
// Depends on: graph/graph.h, graph/op_cost.h (the OpCost it fills); no Qt, no CUDA.
#pragma once

#include "graph/graph.h"
#include "graph/op_cost.h"

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace ps {

using ShapeInputs = std::vector<const Tensor*>;
// Output shapes from the inputs and attributes; throws ps::Error naming the mismatch (callers
// add the node). Arity is checked before the rule runs.
using ShapeRule = std::vector<Shape> (*)(const Node& node, const ShapeInputs& inputs);

// What a custom cost rule reads: the graph and which tensors need a gradient.
struct OpCostContext
{
    const Graph& graph;
    const std::vector<bool>& requiresGrad;
};
// Fills forward/backward/weight-gradient FLOPs and saved tensors of ops whose cost is not a
// per-element count (MatMul, Conv, Einsum). Runs instead of the per-element formula.
using CostRule = void (*)(const OpCostContext& ctx, const Node& node, OpCost& cost);
// Extra saved state (bytes beyond saved tensors) or saved non-activation tensors of a node that
// needs a gradient: normalization statistics, dropout masks, labels, indices.
using SavedRule = void (*)(const Graph& graph, const Node& node, OpCost& cost);

// Per-element FLOPs are counted per output element, or per input element for reductions and pools.
enum class CostBasis : std::uint8_t { Output, Input };

inline constexpr std::uint8_t kSaveNoInputs = 0;
inline constexpr std::uint8_t kSaveAllInputs = 0xFF;
// Bit i: the node's backward reads input i (kept when it is an activation).
constexpr std::uint8_t saveInput(int i)
{
    return static_cast<std::uint8_t>(1U << static_cast<unsigned>(i));
}

struct OpDef
{
    OpType type;
    std::string_view name; // as stored in project files and shown in the GUI
    std::string_view signature; // inputs -> outputs; attributes (documentation, `pipestudio ops`)
    std::uint8_t minInputs = 1;
    std::uint8_t maxInputs = 1;
    ShapeRule shapes = nullptr; // nullptr: not derivable (Opaque)
    bool isView = false; // output aliases input 0's storage: no bytes written, nothing to free
    double forwardFlops = 0; // per element of the basis
    double backwardFlops = 0; // per element, input plus weight gradients
    CostBasis basis = CostBasis::Output;
    std::uint8_t savedInputs = kSaveNoInputs; // activation inputs the backward reads (bits)
    bool savesOutput = false; // output 0 (Softmax, Sigmoid, Exp ...)
    bool weightGradReadsInput = false; // a norm's scale gradient reads input 0: kept until W
    SavedRule saved = nullptr;
    CostRule cost = nullptr; // replaces the per-element formula
    double weightGradShare = 0.5; // of the backward FLOPs, when a parameter is read
    bool outputWorkspace = false; // a row-wise pass keeps an output-sized scratch (Softmax)
};

// The entry of `op`; every OpType has one.
[[nodiscard]] const OpDef& opDef(OpType op);
// Every entry, in OpType order.
[[nodiscard]] std::span<const OpDef> opDefs();

// The operand shapes of an einsum equation ("bhid,bhjd->bhij"): letters of each operand and of the
// output (implicit output: letters used once, alphabetical). Throws ps::Error on ellipses,
// repeated letters within an operand, or an output letter no operand has.
struct EinsumSpec
{
    std::vector<std::string> operands;
    std::string output;
};
[[nodiscard]] EinsumSpec parseEinsum(std::string_view equation, std::size_t operandCount);
// `equation` over operands of `shapes` in the letters-only form parseEinsum reads, by NumPy's and
// torch's rules: every ellipsis ('...') written out in letters the equation does not use (an
// operand's stands for the dims its letters leave of its rank, aligned from the right across
// operands; the output's for all of them; an implicit output lists them first, then the letters
// used once), and a dim of size 1 broadcast against a larger one of the same letter given a letter
// of its own (summed over its one value). The equation unchanged (spaces removed) where it needs
// neither; throws ps::Error where an operand has more letters than dims or more letters are needed
// than remain.
[[nodiscard]] std::string explicitEinsumEquation(std::string_view equation, const std::vector<Shape>& shapes);

} // namespace ps
