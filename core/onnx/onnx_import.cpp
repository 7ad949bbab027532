#include "onnx/onnx_import.h"

#include "graph/group_norm.h"
#include "graph/shape_inference.h"
#include "graph/validate.h"
#include "onnx/composite_lowering.h"
#include "onnx/external_data.h"
#include "onnx/fixed_shapes.h"
#include "onnx/function_inlining.h"
#include "onnx/importer.h"
#include "onnx/merged_parameters.h"
#include "onnx/module_scopes.h"
#include "onnx/op_mapping.h"
#include "onnx/opset_lowering.h"
#include "onnx/safe_inference.h"
#include "onnx/shape_folding.h"
#include "onnx/window_lowering.h"
#include "util/error.h"

#include <queue>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>
#include <set>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

namespace ps::onnximport {
namespace {

    std::pair<std::string, std::string> scopeOf(const std::string& name)
    {
        std::vector<std::string> parts;
        std::stringstream ss(name);
        std::string part;
        while (std::getline(ss, part, '/')) {
            if (!part.empty())
                parts.push_back(part);
        }
        if (parts.size() > 1)
            parts.pop_back(); // the op itself
        else
            parts.clear();
        std::string scope;
        std::string block;
        for (const auto& p : parts) {
            scope += (scope.empty() ? "" : ".") + p;
            const auto sep = p.find_last_of("._");
            if (block.empty() && sep != std::string::npos && sep + 1 < p.size()
                && std::all_of(p.begin() + static_cast<std::ptrdiff_t>(sep) + 1, p.end(), ::isdigit))
                block = scope;
        }
        return { scope, block };
    }

} // namespace

void Importer::load()
{
    std::ifstream in(m_path, std::ios::binary);
    if (!in)
        fail("cannot be read (no such file or permission denied)");
    std::ostringstream bytes;
    bytes << in.rdbuf();
    const auto data = bytes.str();
    if (data.empty())
        fail("is empty, not an ONNX model");
    if (!m_model.ParseFromString(data))
        fail("is not an ONNX model (the protobuf does not parse; truncated or another format?)");
    if (m_model.ir_version() <= 0 || !m_model.has_graph() || m_model.graph().node_size() == 0)
        fail("is a protobuf but not an ONNX model (no IR version or no graph nodes)");
    // Read before the weights come in (the metadata is found by re-serializing the graph).
    m_signatureParameters = onnximport::torchExportParameters(m_model.graph());
    try {
        m_traced = onnximport::readTracedModule(m_model);
        if (m_traced) {
            std::int64_t trainable = 0;
            for (const auto& t : m_traced->tensors)
                trainable += t.trainable ? t.elements : 0;
            m_result.report.tracedTrainableElements = trainable;
        }
        (void)onnximport::loadExternalData(m_model, m_path, m_options.keepWeights);
    } catch (const Error& e) {
        fail(e.what());
    }
}

void Importer::checkOpset()
{
    for (const auto& o : m_model.opset_import()) {
        if (o.domain().empty() || o.domain() == "ai.onnx")
            m_result.report.opset = static_cast<int>(o.version());
    }
    const int opset = m_result.report.opset;
    if (opset < kMinOpset || opset > onnximport::kNewestLoweredOpset)
        fail("uses ONNX opset " + std::to_string(opset) + "; PipeStudio imports opsets " + std::to_string(kMinOpset)
            + "-" + std::to_string(onnximport::kNewestLoweredOpset)
            + " (re-export with torch.onnx.export(model, args, \"model.onnx\", opset_version=20), the default "
              "of torch 2.9 and newer; with torch 1.x, opset_version=17)");
    try { // local functions' bodies in place of their calls, then newer operator forms become
          // their opset-17 ones; the report keeps the model's opset
        (void)onnximport::untieMergedParameters(m_model); // torch.export's merged equal initializers
        (void)onnximport::tieFoldedCopies(m_model); // ... and its folded copies of one parameter
        if (m_traced) // the TorchScript exporter's copies of a parameter the tracer named (a tied head)
            (void)onnximport::tieCopiesByValue(m_model, onnximport::tracedParameterNames(*m_traced),
                onnximport::tracedParameterNames(*m_traced, true));
        m_foldedConstants = onnximport::foldedBufferConstants(m_model); // read while nodes keep metadata
        (void)onnximport::inlineLocalFunctions(m_model);
        (void)onnximport::decomposeCompositeOps(m_model, opset, m_signatureParameters);
        (void)onnximport::lowerToOpset17(m_model, opset);
    } catch (const Error& e) {
        fail(std::string("at opset ") + std::to_string(opset) + ": " + e.what());
    }
    (void)onnximport::lowerOneDimensionalWindows(m_model); // Conv1d and 1-D pools as 2-D ones
    findFrequencyTables();
}

// Binds every dynamic dimension of the data inputs; fixed ones keep their exported size here
// (fixSizes re-specialises them).
void Importer::bindInputs()
{
    auto batchAxis = m_options.batchAxis;
    if (!batchAxis && onnximport::batchAxisAmbiguous(m_model))
        batchAxis = onnximport::separableAxis(m_model, topologicalOrder(), inferFolded);
    m_dims = onnximport::describeInputDims(m_model, batchAxis);
    const auto dimOf = [this](const std::string& input, int axis) -> OnnxInputDim& {
        for (auto& d : m_dims) {
            if (d.input == input && d.axis == axis)
                return d;
        }
        fail("input '" + input + "' changed while its dimensions were read");
    };
    for (auto& d : m_dims) {
        if (d.dynamic)
            continue;
        if (d.role == DimRole::Batch)
            d.size = m_options.batch.value_or(d.exported);
        else if (d.role == DimRole::Sequence)
            d.size = m_options.sequence.value_or(d.exported);
    }
    const auto batch = m_options.batch.value_or(1);
    const auto sequence = m_options.sequence.value_or(128);
    std::set<std::string> initializers;
    for (const auto& i : m_model.graph().initializer())
        initializers.insert(i.name());
    for (auto& input : *m_model.mutable_graph()->mutable_input()) {
        if (initializers.contains(input.name()) || !input.type().has_tensor_type())
            continue;
        int dynamic = 0;
        int axis = -1;
        for (auto& dim : *input.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim()) {
            ++axis;
            if (dim.has_dim_value() && dim.dim_value() > 0)
                continue;
            const auto name = dim.dim_param();
            std::string lower = name;
            std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
            const auto role = lower.find("batch") != std::string::npos ? DimRole::Batch
                : lower.find("seq") != std::string::npos               ? DimRole::Sequence
                : dynamic == 0                                         ? DimRole::Batch
                                                                       : DimRole::Sequence;
            std::int64_t size = role == DimRole::Batch ? batch : sequence;
            if (const auto it = m_options.dims.find(name); it != m_options.dims.end()) {
                if (role == DimRole::Batch) // the micro-batch follows the batch option alone
                    fail("the dimension '" + name
                        + "' is the batch: size it with the batch option (--batch), not by name");
                size = it->second;
            }
            ++dynamic;
            dim.set_dim_value(size);
            auto& d = dimOf(input.name(), axis);
            d.size = size;
            d.role = role;
            m_result.report.boundDims[name.empty() ? input.name() + "[" + std::to_string(dynamic - 1) + "]" : name] =
                size;
        }
    }
}

// A model exported with fixed shapes asked for at another batch or sequence size: its input
// dimensions and the shape constants carrying them are rewritten (onnx/fixed_shapes.h).
void Importer::fixSizes()
{
    const bool resized = std::any_of(
        m_dims.begin(), m_dims.end(), [](const OnnxInputDim& d) { return !d.dynamic && d.size != d.exported; });
    if (!resized)
        return;
    try {
        m_result.report.respecialisedConstants = onnximport::respecialise(m_model, m_dims, m_order, inferFolded);
    } catch (const Error& e) {
        fail(e.what());
    } catch (const std::exception& e) {
        fail(std::string("shape inference failed while re-specialising the fixed shapes: ") + e.what());
    }
}

void Importer::inferShapes()
{
    const auto infer = [this](onnx::ModelProto& m) {
        try {
            onnximport::inferShapesSafely(m);
        } catch (const std::exception& e) {
            fail(std::string("shape inference failed: ") + e.what());
        }
    };
    // The shape subgraphs torch emits for dynamic axes are evaluated with the bound sizes;
    // the working copy's value_info then has every other shape.
    m_folded = onnximport::foldShapeComputations(m_model, m_inferred, infer, m_frequencyTables);
}

void Importer::collectShapes()
{
    const auto add = [this](const onnx::ValueInfoProto& v) {
        if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape())
            return;
        const auto dtype = dtypeOf(v.type().tensor_type().elem_type());
        Shape shape;
        for (const auto& d : v.type().tensor_type().shape().dim()) {
            if (!d.has_dim_value())
                return; // still symbolic: unknown
            shape.push_back(d.dim_value());
        }
        m_shapes[v.name()] = { shape, dtype.value_or(DType::F32) };
    };
    const auto& g = m_inferred.graph();
    for (const auto& v : g.input())
        add(v);
    for (const auto& v : g.value_info())
        add(v);
    for (const auto& v : g.output())
        add(v);
    for (const auto& t : m_model.graph().initializer())
        m_shapes[t.name()] = { Shape(t.dims().begin(), t.dims().end()), dtypeOf(t.data_type()).value_or(DType::F32) };
    for (const auto& [name, value] : m_folded) {
        if (!m_shapes.contains(name))
            m_shapes[name] = { Shape(value.shape.begin(), value.shape.end()), DType::I64 };
    }
}

// Kahn's order over the node list (exporters already emit one; a cycle is an error).
std::vector<int> Importer::topologicalOrder() const
{
    const auto& g = m_model.graph();
    std::unordered_map<std::string, int> producer;
    for (int i = 0; i < g.node_size(); ++i) {
        for (const auto& o : g.node(i).output())
            producer[o] = i;
    }
    std::vector<std::vector<int>> next(static_cast<std::size_t>(g.node_size()));
    std::vector<int> indegree(static_cast<std::size_t>(g.node_size()), 0);
    for (int i = 0; i < g.node_size(); ++i) {
        for (const auto& in : g.node(i).input()) {
            if (const auto it = producer.find(in); it != producer.end()) {
                next[static_cast<std::size_t>(it->second)].push_back(i);
                ++indegree[static_cast<std::size_t>(i)];
            }
        }
    }
    // The earliest ready node in the file first: a file already in topological order (exporters
    // write nodes as the model ran them, T5's encoder before its decoder) keeps its order.
    std::vector<int> order;
    std::priority_queue<int, std::vector<int>, std::greater<>> ready;
    for (int i = 0; i < g.node_size(); ++i) {
        if (indegree[static_cast<std::size_t>(i)] == 0)
            ready.push(i);
    }
    while (!ready.empty()) {
        const int i = ready.top();
        ready.pop();
        order.push_back(i);
        for (int j : next[static_cast<std::size_t>(i)]) {
            if (--indegree[static_cast<std::size_t>(j)] == 0)
                ready.push(j);
        }
    }
    if (order.size() != static_cast<std::size_t>(g.node_size())) {
        for (int i = 0; i < g.node_size(); ++i) {
            if (indegree[static_cast<std::size_t>(i)] > 0)
                fail("the graph has a cycle through node '" + g.node(i).name() + "' (" + g.node(i).op_type() + ")");
        }
    }
    return order;
}

// A node whose every output the folding evaluated (Shape, integer ops on shapes and constants,
// masks and position ids) becomes constant tensors holding those values.
bool Importer::resolveIdentity(const onnx::NodeProto& node)
{
    if (node.op_type() != "Identity" || node.input_size() != 1 || node.output_size() != 1)
        return false;
    const auto source = tensorFor(node.input(0), node);
    const auto& t = m_result.graph.tensor(source);
    if (t.kind == TensorKind::Parameter && !t.producer.valid()) {
        Tensor alias = t;
        alias.id = TensorId();
        alias.name = node.output(0);
        if (m_bnStats.contains(alias.name))
            alias.kind = TensorKind::Constant; // a running mean/variance equal to some weight at export
        // An alias is its own parameter: the user's word applies to it by its own name.
        alias.kind = parameterKind(alias.name, alias.kind == TensorKind::Parameter, alias.dtype) ? TensorKind::Parameter
                                                                                                 : TensorKind::Constant;
        m_tensors[node.output(0)] = m_result.graph.addTensor(std::move(alias));
        ++m_result.report.aliasedParameters;
    } else {
        m_tensors[node.output(0)] = source;
        ++m_result.report.foldedIdentities;
    }
    return true;
}

// The tensors of the node's outputs that are read (every one for the first), with their inferred
// shapes; `everyOutput` gets every output with a shape, read or not. Fails naming the node where an
// output that is read has no shape.
std::vector<Tensor> Importer::outputTensors(
    const onnx::NodeProto& node, const std::string& name, std::vector<Tensor>& everyOutput) const
{
    std::vector<Tensor> outputs;
    for (const auto& out : node.output()) {
        if (out.empty())
            continue;
        const auto it = m_shapes.find(out);
        if (it != m_shapes.end())
            everyOutput.push_back(
                { TensorId(), out, it->second.first, it->second.second, TensorKind::Activation, NodeId(), nullptr });
        if ((it == m_shapes.end() || &out != &node.output(0)) && !m_consumed.contains(out))
            continue; // an optional output nobody reads (BatchNormalization's running statistics)
        if (it == m_shapes.end()) {
            // Often a size the model cannot take: a sequence past a registered buffer or position table.
            std::string sizes;
            for (const auto& [dim, size] : m_result.report.boundDims)
                sizes += (sizes.empty() ? "" : ", ") + dim + "=" + std::to_string(size);
            fail("node '" + name + "' (" + node.op_type() + "): shape inference gave no shape for output '" + out + "'"
                + (sizes.empty() ? std::string()
                                 : " at the dynamic sizes " + sizes
                            + " (a size past one of the model's buffers or position tables does this: import at a "
                              "smaller --seq or --dim)"));
        }
        outputs.push_back(
            { TensorId(), out, it->second.first, it->second.second, TensorKind::Activation, NodeId(), nullptr });
    }
    return outputs;
}

// The node's module path (scope) and block (layer). Layers are blocks in order of first
// appearance: encoder.layers.0, .1, then decoder.layers.0 ... torch.export's node names carry no
// path; its metadata does (also on the nodes a lowering wrote in a node's place). The TorchScript
// exporter's names are the path.
void Importer::placeInModule(const onnx::NodeProto& node, Node& n)
{
    const auto levels = onnximport::torchModuleLevels(node);
    auto [scope, block] = levels ? std::pair<std::string, std::string>() : scopeOf(node.name());
    if (levels && !levels->empty()) { // the root module's path is empty
        for (const auto& level : *levels)
            m_moduleClasses.emplace(level.path, level.className);
        scope = levels->back().path;
        block = onnximport::blockOfModulePath(scope);
    }
    n.scope = scope;
    if (!block.empty())
        n.layer = m_blocks.try_emplace(block, static_cast<std::int32_t>(m_blocks.size())).first->second;
    // A node the exporter's optimizer wrote (no metadata) in a model whose others have paths: the
    // module of the first input some node computed (not a weight).
    if (n.scope.empty() && !levels && !m_moduleClasses.empty()) {
        for (const auto in : n.inputs) {
            if (const auto from = m_result.graph.tensor(in).producer; from.valid()) {
                n.scope = m_result.graph.node(from).scope;
                n.layer = m_result.graph.node(from).layer;
                break;
            }
        }
    }
}

void Importer::addNode(const onnx::NodeProto& node, int index)
{
    if (node.op_type() == "Constant") {
        addConstant(node);
        return;
    }
    if (foldShapeNode(node) || resolveIdentity(node))
        return;
    Node n;
    n.name = node.name().empty() || m_nodeNames.contains(node.name()) ? node.op_type() + "_" + std::to_string(index)
                                                                      : node.name();
    m_nodeNames.insert(n.name);
    for (const auto& in : node.input()) {
        if (!in.empty())
            n.inputs.push_back(tensorFor(in, node));
    }
    placeInModule(node, n);
    std::vector<Tensor> everyOutput; // read or not, where shape inference gave a shape
    auto outputs = outputTensors(node, n.name, everyOutput);
    n.op = OpType::Opaque;
    n.opaqueType = node.op_type();
    n.outputs.assign(outputs.size(), TensorId()); // the mapping looks at how many outputs are read
    auto mapped = onnximport::mapNode(node, n,
        { m_result.graph, m_folded, m_shapes, m_tensors, [this](const std::string& name, std::vector<std::int64_t> v) {
             const Shape shape { static_cast<std::int64_t>(v.size()) };
             auto bytes = std::make_shared<std::vector<std::byte>>(v.size() * sizeof(std::int64_t));
             std::memcpy(bytes->data(), v.data(), bytes->size());
             return m_result.graph.addTensor(
                 { TensorId(), name, shape, DType::I64, TensorKind::Constant, NodeId(), std::move(bytes) });
         } });
    if (mapped.op != OpType::Opaque) {
        // Keep the mapping only where the IR computes exactly what ONNX inferred.
        std::vector<const Tensor*> in;
        for (auto id : mapped.inputs)
            in.push_back(&m_result.graph.tensor(id));
        try {
            const auto shapes = inferOutputShapes(mapped, in);
            // An IR op computing an output nobody reads (TopK's indices) keeps it.
            if (shapes && shapes->size() > outputs.size() && shapes->size() == everyOutput.size())
                outputs = everyOutput;
            const auto same = [&] {
                for (std::size_t i = 0; i < outputs.size(); ++i) {
                    if ((*shapes)[i] != outputs[i].shape)
                        return false;
                }
                return true;
            };
            if (shapes && shapes->size() == outputs.size() && !outputs.empty() && same()) {
                n = std::move(mapped);
                n.opaqueType.clear();
            }
        } catch (const Error&) { // keep it opaque
        }
    }
    if (n.op == OpType::Opaque)
        ++m_result.report.opaqueOps[node.op_type()];
    n.outputs.clear();
    for (auto& t : outputs) {
        const auto name = t.name;
        const auto id = m_result.graph.addTensor(std::move(t));
        m_tensors[name] = id;
        n.outputs.push_back(id);
    }
    m_result.graph.addNode(std::move(n));
}

OnnxImport Importer::run()
{
    load();
    checkOpset();
    bindInputs();
    m_order = topologicalOrder();
    const auto& order = m_order;
    fixSizes();
    inferShapes();
    collectShapes();
    m_trainable = valuesReachingAFloatOutput();
    m_result.report.onnxNodes = static_cast<std::size_t>(m_model.graph().node_size());
    m_result.report.inputDims = m_dims;
    const auto exported = onnximport::exportedBatch(m_dims);
    m_result.graph = Graph(ModelInfo {
        m_path.stem().string(), "onnx", inputDimsToJson(m_dims), m_options.batch.value_or(exported.value_or(1)) });
    addInitializers();
    addInputs();
    for (int i : order)
        addNode(m_model.graph().node(i), i);
    std::vector<TensorId> outputs;
    for (const auto& o : m_model.graph().output())
        outputs.push_back(tensorFor(o.name(), m_model.graph().node(order.back())));
    m_result.graph.setOutputs(std::move(outputs));
    checkOverridesFound();
    NormalizationsFused norms;
    m_result.graph = fuseNormalizations(m_result.graph, &norms);
    m_result.report.groupNorms = norms.groupNorms;
    m_result.report.layerNorms = norms.layerNorms;
    m_result.report.rmsNorms = norms.rmsNorms;
    auto info = m_result.graph.info();
    info.configJson = importConfigJson(m_dims, m_result.report.initializerRules, m_moduleClasses);
    m_result.graph.setInfo(std::move(info));
    try {
        validateGraphOrThrow(m_result.graph);
    } catch (const Error& e) {
        fail(e.what());
    }
    return std::move(m_result);
}

} // namespace ps::onnximport

namespace ps {

using onnximport::Importer;

std::vector<OnnxInputDim> describeOnnxInputs(const std::filesystem::path& path, const OnnxImportOptions& options)
{
    try {
        auto shapesOnly = options; // the preview reads no weights (a missing data file is the import's error)
        shapesOnly.keepWeights = false;
        Importer importer(path, shapesOnly);
        return importer.describe();
    } catch (const Error&) {
        throw;
    } catch (const std::exception& e) {
        throw Error("ONNX file '" + path.string() + "': malformed graph (" + e.what() + ")");
    }
}

std::vector<std::string> missingWeightFiles(const std::filesystem::path& path)
{
    onnx::ModelProto model;
    std::ifstream in(path, std::ios::binary);
    if (!in || !model.ParseFromIstream(&in))
        throw Error("ONNX file '" + path.string() + "' cannot be read as an ONNX model");
    return onnximport::missingExternalFiles(model, path);
}

OnnxImport importOnnx(const std::filesystem::path& path, const OnnxImportOptions& options)
{
    if (options.batch.value_or(1) < 1 || options.sequence.value_or(1) < 1)
        throw Error("ONNX import: batch and sequence sizes must be positive");
    try {
        Importer importer(path, options);
        return importer.run();
    } catch (const Error&) {
        throw;
    } catch (const std::bad_alloc&) {
        throw;
    } catch (const std::exception& e) { // a malformed graph reached a lookup or libonnx check the importer missed
        throw Error("ONNX file '" + path.string() + "': malformed graph (" + e.what() + ")");
    }
}

} // namespace ps
