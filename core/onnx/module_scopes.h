// Module paths of a torch.export ONNX model's nodes. The TorchScript exporter named nodes after
// their module path ("/h.0/fc/Gemm"); torch.export's exporter (torch 2.x, the default since 2.9)
// names them "node_addmm_2" and writes the path, with the class of every module on it, as node
// metadata: "pkg.torch.onnx.name_scopes" ['', 'h', 'h.0', 'h.0.fc', 'addmm_2'] beside
// "pkg.torch.onnx.class_hierarchy" ['__main__.Net', ..., 'torch.nn.modules.linear.Linear',
// 'aten.addmm.default'], or onnxscript's "namespace" (": __main__.Net/h.0: __main__.Block/.../addmm: aten...").
// The import takes each node's scope (and its block, for layers) from there, and keeps each
// module's class so a profiler trace's "nn.Module: Linear_3" events can be named after modules.
// Depends on: onnx protobuf types; onnx/opset_lowering.h (unknown-field metadata).
#pragma once

#include <map>
#include <onnx/onnx_pb.h>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ps::onnximport {

struct ModuleLevel
{
    std::string path; // "h.0.fc"
    std::string className; // the class's own name, without its module: "Linear"
};

// The modules a node was called in, outermost first: the root module (empty path) first, the
// node's own module last; nullopt when the node carries no such metadata (a node the exporter's
// optimizer wrote).
[[nodiscard]] std::optional<std::vector<ModuleLevel>> torchModuleLevels(const onnx::NodeProto& node);

// A module path's block: its shortest prefix whose last component (not the first) is an index or
// ends in one ("h.0" of "h.0.attn.c_attn", "encoder.layers.3" of "encoder.layers.3.fc1",
// "blocks.layer_2" of "blocks.layer_2.fc"); empty when none is.
[[nodiscard]] std::string blockOfModulePath(const std::string& path);

} // namespace ps::onnximport
