// ONNX import: a model exported by torch.onnx.export (opsets 13-25; 18 and newer lowered to opset-17
// forms first, onnx/opset_lowering.h) becomes a fine-grained graph
// with bound shapes and its initializers as parameters (with their values).
//
// Dynamic dimensions are bound from user-given sizes (batch, sequence). A model exported with fixed
// shapes (torch.onnx.export's default) imports at the sizes it was exported with; another batch or
// sequence size re-specialises it (onnx/fixed_shapes.h) or is refused naming the node whose
// constant fixes the size. Every tensor's shape comes
// from ONNX's own shape inference, and what is static once they are bound is evaluated and folded
// into constant tensors (Constant nodes, shape computations, masks and position ids: see
// onnx/shape_folding.h). Initializers a gradient can reach become parameters; `Identity` copies of
// an initializer (torch's exporter stores equal initializers once) become parameters of their own
// with the shared value, other Identity nodes are removed. ONNX ops map to IR ops by one rule each
// (onnx/op_mapping.cpp), including the decomposed forms torch emits. Anything else becomes an
// opaque node costed from its shapes, listed in the report as an op the engine cannot train.
// Depends on: graph/, Debian's libonnx (protobuf); no Qt, no CUDA.
#pragma once

#include "graph/graph.h"

#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ps {

enum class DimRole { Batch, Sequence, Other };
[[nodiscard]] const char* toString(DimRole role);

// One dimension of a data input (a graph input that is not an initializer), as imported.
struct OnnxInputDim
{
    std::string input;
    int axis = 0;
    bool dynamic = false; // symbolic in the file (named or not)
    std::string param; // the dim_param of a dynamic dimension ("" when unnamed)
    std::int64_t exported = 0; // the size written in the file; 0 when dynamic
    DimRole role = DimRole::Other;
    std::int64_t size = 0; // the size imported

    bool operator==(const OnnxInputDim&) const = default;
};

struct OnnxImportOptions
{
    // Unset: 1 for dynamic batch dimensions, the exported size for fixed ones. Binds dims named like
    // "batch" and the first dynamic dim of each input; re-specialises a fixed batch dimension.
    std::optional<std::int64_t> batch;
    // Unset: 128 for dynamic sequence dimensions, the exported size for fixed ones. Binds dims named
    // like "seq"/"sequence" and the second dynamic dim; re-specialises fixed sequence dimensions.
    std::optional<std::int64_t> sequence;
    std::optional<int> batchAxis; // the batch dimension of fixed inputs (default: see fixed_shapes.h)
    std::map<std::string, std::int64_t> dims; // explicit bindings by dim_param name
    bool keepWeights = true; // store initializer values in the graph (and the project)
    // The user's word over the parameter rules, by initializer (or folded Constant) name: `parameters`
    // train whatever the rules decided (floating-point tensors only), `constants` never do. A name
    // the model does not hold, or one in both, fails the import naming it.
    std::set<std::string> parameters;
    std::set<std::string> constants;
};

// How the importer decided whether an initializer trains (`info` lists them).
struct InitializerRule
{
    std::string name;
    bool parameter = false;
    std::string rule; // "parameter: a gradient reaches it", "constant: a BatchNormalization running statistic", ...

    bool operator==(const InitializerRule&) const = default;
};

struct OnnxImportReport
{
    int opset = 0;
    std::size_t onnxNodes = 0;
    std::size_t foldedConstants = 0; // Constant nodes
    std::size_t foldedShapeNodes = 0; // static computations evaluated at import (shapes, masks, position ids)
    std::size_t aliasedParameters = 0; // Identity copies of an initializer, each its own parameter
    std::size_t foldedIdentities = 0; // other Identity nodes, removed
    std::map<std::string, std::int64_t> boundDims; // dim_param -> size
    std::map<std::string, int> opaqueOps; // op type -> count: costed, not trainable by the engine
    std::vector<OnnxInputDim> inputDims; // every dimension of every data input
    int respecialisedConstants = 0; // shape constants rewritten for a size other than the exported one
    std::vector<InitializerRule> initializerRules; // every initializer, in the file's order
    // Tensors taken for frequency tables and kept constant (frequency_tables.h), their tables folded
    std::vector<std::string> frequencyTables;
    // GroupNorm/InstanceNorm, LayerNorm and RMSNorm chains run as one node each (graph/group_norm.h)
    std::size_t groupNorms = 0;
    std::size_t layerNorms = 0;
    std::size_t rmsNorms = 0;
    // Where PipeStudio's tracer wrote its record (tracer_metadata.h): the elements of the module's
    // trainable parameters as torch counts them, each tied tensor once.
    std::optional<std::int64_t> tracedTrainableElements;
};

// The data inputs' dimensions of an ONNX file as `importOnnx(path, options)` would import them,
// without importing (the import dialog's preview). Throws ps::Error like importOnnx.
[[nodiscard]] std::vector<OnnxInputDim> describeOnnxInputs(
    const std::filesystem::path& path, const OnnxImportOptions& options = {});
// The weights files (external data) the model at `path` names that are not beside it: importing it
// then needs `keepWeights` off. Throws ps::Error naming the file when it is not an ONNX model.
[[nodiscard]] std::vector<std::string> missingWeightFiles(const std::filesystem::path& path);
// The dimensions as JSON (stored in the project's model configuration, read by `info`).
[[nodiscard]] std::string inputDimsToJson(const std::vector<OnnxInputDim>& dims);
[[nodiscard]] std::vector<OnnxInputDim> inputDimsFromJson(const std::string& configJson);
// The model configuration an import stores: the dimensions, the initializer rules and, for a
// torch.export model, each module's class by module path ("h.0.fc" -> "Linear", "" -> the root
// module's; onnx/module_scopes.h).
[[nodiscard]] std::string importConfigJson(const std::vector<OnnxInputDim>& dims,
    const std::vector<InitializerRule>& rules, const std::map<std::string, std::string>& moduleClasses = {});
[[nodiscard]] std::vector<InitializerRule> initializerRulesFromJson(const std::string& configJson);
// The module classes an import stored (empty for other models and TorchScript exports).
[[nodiscard]] std::map<std::string, std::string> moduleClassesFromJson(const std::string& configJson);

struct OnnxImport
{
    Graph graph;
    OnnxImportReport report;
};

// Throws ps::Error with one line naming the file and the problem (not a model, unsupported opset,
// a cycle through a named node, shape inference failure, unbound dimension).
[[nodiscard]] OnnxImport importOnnx(const std::filesystem::path& path, const OnnxImportOptions& options = {});

} // namespace ps
