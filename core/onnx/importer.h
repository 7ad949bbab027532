// Internal to the ONNX importer: the Importer that onnx_import.cpp (reading, lowering, shapes, nodes)
// and onnx_tensors.cpp (initializers, constants, inputs, folded values) implement between them.
// Depends on: onnx/onnx_import.h, onnx/shape_folding.h, libonnx.
#pragma once

#include "onnx/onnx_import.h"
#include "onnx/shape_folding.h"
#include "onnx/tracer_metadata.h"
#include "util/error.h"

#include <filesystem>
#include <map>
#include <memory>
#include <onnx/onnx_pb.h>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ps::onnximport {

inline constexpr int kMinOpset = 13;

// The IR's element type of an ONNX one, if it has one.
[[nodiscard]] std::optional<DType> dtypeOf(int elemType);

// Shape inference with the importer's folding of static computations, in place: what
// re-specialising a fixed-shape model reads its shapes from.
void inferFolded(onnx::ModelProto& m);

class Importer
{
public:
    Importer(std::filesystem::path path, const OnnxImportOptions& options)
        : m_path(std::move(path))
        , m_options(options)
    {
    }

    OnnxImport run();
    std::vector<OnnxInputDim> describe()
    {
        load();
        checkOpset();
        bindInputs();
        return m_dims;
    }

private:
    [[noreturn]] void fail(const std::string& what) const
    {
        throw Error("'" + m_path.string() + "': " + what);
    }
    void load();
    void checkOpset();
    void bindInputs();
    void fixSizes();
    void inferShapes();
    void collectShapes();
    std::vector<int> topologicalOrder() const;
    void findFrequencyTables();
    void addInitializers();
    void addConstant(const onnx::NodeProto& node);
    void addInputs();
    void addNode(const onnx::NodeProto& node, int index);
    void placeInModule(const onnx::NodeProto& node, Node& n); // scope, layer, module classes
    [[nodiscard]] std::vector<Tensor> outputTensors(
        const onnx::NodeProto& node, const std::string& name, std::vector<Tensor>& everyOutput) const;
    bool foldShapeNode(const onnx::NodeProto& node);
    bool resolveIdentity(const onnx::NodeProto& node);
    std::set<std::string> valuesReachingAFloatOutput() const;
    bool parameterKind(const std::string& name, bool byRules, DType dtype);
    void checkOverridesFound() const;
    TensorId foldedTensor(const std::string& name);
    TensorId tensorFor(const std::string& name, const onnx::NodeProto& user);
    std::shared_ptr<const std::vector<std::byte>> rawData(const onnx::TensorProto& t) const;

    std::filesystem::path m_path;
    OnnxImportOptions m_options;
    onnx::ModelProto m_model;
    std::optional<std::set<std::string>> m_signatureParameters; // torch.export's, when it has one
    std::optional<TracedModule> m_traced; // PipeStudio's tracer's record of the module, when it wrote one
    OnnxImport m_result;
    std::unordered_map<std::string, std::pair<Shape, DType>> m_shapes;
    std::unordered_map<std::string, TensorId> m_tensors;
    std::set<std::string> m_bnStats; // initializers read only as BatchNormalization mean/var
    std::set<std::string> m_foldedConstants; // torch.export folded from buffers only (merged_parameters.h)
    std::set<std::string> m_frequencyTables; // only Sin/Cos position tables read them (frequency_tables.h)
    std::set<std::string> m_nodeNames;
    std::unordered_map<std::string, std::int32_t> m_blocks; // block scope -> layer index
    std::map<std::string, std::string> m_moduleClasses; // torch.export's module path -> class
    std::set<std::string> m_consumed; // tensor names some node or the graph output reads
    onnx::ModelProto m_inferred; // the model with shape computations folded, after inference
    std::unordered_map<std::string, onnximport::FoldedTensor> m_folded;
    std::vector<int> m_order; // topological order of the ONNX nodes
    std::set<std::string> m_trainable; // values a gradient can reach (valuesReachingAFloatOutput)
    std::vector<OnnxInputDim> m_dims; // every data input dimension, with its role and size
    std::set<std::string> m_overridesFound; // names of options.parameters/constants met
};

} // namespace ps::onnximport
