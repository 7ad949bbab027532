// Module paths from a PyTorch profiler trace recorded with with_stack (torch's Python tracer): an
// "nn.Module: Linear_3" range around every module call, naming the class and the instance's number
// among that class's modules in the order the profiler first saw them. The import of a torch.export
// model kept each module path's class (onnx/module_scopes.h). The k-th Linear the trace saw is
// the k-th module path of class Linear in the graph's node order (both the order the model ran),
// so each such range is named after its module and stands for the module's own nodes (those whose
// scope is its path; its submodules have ranges of their own), or, where it has none, for every
// node under it. A class with a different number of modules in the trace than in the graph
// (modules that ran but exported no node: dropout in eval, identity; a module whose work the export
// folded into a constant) is left to the operators aligned inside its calls (op_alignment.h):
// instances take the modules of that class holding most of their nodes, most votes first, each
// module once.
// Depends on: trace_model.h, core (Graph, the import's module classes).
#pragma once

#include "trace_model.h"

#include <string>
#include <vector>

namespace ps::profiler {

struct ModuleRanges
{
    std::size_t calls = 0; // module instances the trace called (the model itself included)
    std::vector<std::size_t> spans; // the module ranges given nodes, by index in data.spans
    std::size_t modules = 0; // module instances named (one per instance the trace saw)
    // Not named, and why: "Dropout (the trace has 4 Dropout, the model 0)", or after
    // alignment "Embedding_1 (no aligned operator inside; ...)", or "(its aligned operators point
    // to no module left; ...)" where another call took their module.
    std::vector<std::string> leftOut;
};

// Gives each module range of `data` whose class counts agree the nodes (within `window`) its
// module stands for, as above. Nothing for a graph without module classes (a TorchScript or zoo
// model) or a trace without module calls.
ModuleRanges nameModuleRanges(const Graph& graph, TraceData& data, NodeWindow window = {});
// After operator alignment: names the calls left out by the operators aligned inside them.
void nameModuleRangesByAlignment(const Graph& graph, TraceData& data, ModuleRanges& ranges, NodeWindow window = {});

} // namespace ps::profiler
