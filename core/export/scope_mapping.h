// How a stored plan's stages are found again in the user's PyTorch model, and in the layer lists
// of DeepSpeed and Megatron-LM.
//
// PipeStudio cuts between nodes of an ONNX import, whose nodes are named after torch module
// scopes ("/h.0/attn/c_attn/MatMul" -> scope "h.0.attn.c_attn"). torch.fx names nodes differently
// and at another granularity (one call_module node per nn.Linear, one ONNX node per op inside
// it), so cuts are not matched by node name but by *scope runs*: the sequence of maximal runs of
// data-dependent nodes with one scope, in execution order, is the same in both graphs. A cut is
// written as "the k-th run of scope S" (snapped to the nearer run border when it falls inside a
// run); the runner (resources/export/run_pipeline.py) counts the same runs over the fx graph.
// Nodes that only compute on constants, parameters and shapes are left out on both sides: the
// ONNX exporter folds them, fx keeps them.
// Depends on: graph/, plan/partition.h. No Qt, no CUDA.
#pragma once

#include "graph/graph.h"
#include "plan/partition.h"

#include <string>
#include <string_view>
#include <vector>

namespace ps {

// One module path for both exporters: ONNX names a Sequential's child "mlp/mlp.0" where fx says
// "mlp.0"; a component repeated just before a numeric index is dropped ("h.0.mlp.mlp.0" ->
// "h.0.mlp.0"), on both sides, until nothing changes.
[[nodiscard]] std::string canonicalScope(std::string_view scope);

// Per node: does it depend on the model's inputs (through activations)? False for nodes that
// compute only from parameters and constants (the Identity copies of tied initializers, a
// position embedding of a constant range).
[[nodiscard]] std::vector<bool> dataDependentNodes(const Graph& graph);

// "The occurrence-th run of (canonical) scope `scope`" in the sequence of scope runs.
struct ScopeAnchor
{
    std::string scope;
    int occurrence = 0;
    bool snapped = false; // the cut fell inside the run and moved to its border
    bool operator==(const ScopeAnchor&) const = default;
};

// Where the stage starting at `position` (in the graph's node order) begins, best first: the
// run it starts (or the nearer border of the run it falls in), then the next runs as fallbacks
// for a traced graph that lacks a run. Empty when no data-dependent node follows `position`.
[[nodiscard]] std::vector<ScopeAnchor> cutAnchors(const Graph& graph, std::size_t position, std::size_t fallbacks = 6);

// Transformer blocks per stage, for frameworks that cut between whole layers. A block split by a
// cut belongs to the stage holding most of its nodes (ties: the earlier stage).
struct LayerLayout
{
    int layerCount = 0; // blocks numbered 0..layerCount-1 (Node::layer)
    std::vector<int> layersPerStage;
    std::vector<int> firstLayer; // by stage; == the next stage's when the stage has none
    bool snapped = false; // some block was split by a cut
};
// Throws ps::Error when the graph has no numbered blocks.
[[nodiscard]] LayerLayout layerLayout(const Graph& graph, const Partition& partition);

} // namespace ps
