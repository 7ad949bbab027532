// The table from PyTorch's aten operators (what torch.profiler records) to the op kinds of the
// graph (core/graph/types.h) they compute, for operator alignment (op_alignment.h): GEMMs,
// convolutions, attention, norms, activations, elementwise ops, losses, pooling, reductions,
// gathers; views, copies and constants that launch nothing a node stands for.
// Depends on: core (OpType).
#pragma once

#include "graph/types.h"

#include <string_view>
#include <unordered_map>
#include <vector>

namespace ps::profiler {

// What an aten operator computes, and which nodes right after its match it also computes
// (the bias of a linear, a decomposed GELU's tail, the rest of a fused attention).
struct AtenKind
{
    std::vector<OpType> kinds;
    std::vector<OpType> absorbs;
    bool view = false; // a view, copy or constant: no node of its own
};

// Every aten operator the table knows (by its full name, "aten::linear").
[[nodiscard]] const std::unordered_map<std::string_view, AtenKind>& atenTable();

// The op kinds an aten operator can compute; empty for an operator no node computes (a view, a
// constant, a copy) or one the table does not know.
[[nodiscard]] std::vector<OpType> atenOpKinds(std::string_view atenName);

} // namespace ps::profiler
