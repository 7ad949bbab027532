#include "onnx/frequency_tables.h"
#include "onnx/importer.h"
#include "onnx/safe_inference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>

namespace ps::onnximport {
namespace {

    bool isFloat(DType t)
    {
        return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64;
    }

    // A mask, not a weight: infinities, or the float extremes exporters write for them (torch's
    // causal SDPA mask at opset 20 holds 0 and -3.4028235e38), which no trained weight reaches.
    bool holdsMaskValues(const std::vector<std::byte>& f32)
    {
        for (std::size_t i = 0; i + 4 <= f32.size(); i += 4) {
            float v = 0;
            std::memcpy(&v, f32.data() + i, 4);
            if (!std::isfinite(v) || std::abs(v) >= 1e30F)
                return true;
        }
        return false;
    }

    // Every element equal (a fill: zeros_like, full).
    bool uniform(const std::vector<std::byte>& f32)
    {
        for (std::size_t i = 4; i + 4 <= f32.size(); i += 4) {
            if (std::memcmp(f32.data() + i, f32.data(), 4) != 0)
                return false;
        }
        return true;
    }

    // Whether `name` is read only as the data a scatter writes into (ScatterElements' or
    // ScatterND's first input): the canvas of torch.zeros_like(x).scatter(...), not a weight.
    bool onlyScatteredInto(const onnx::GraphProto& g, const std::string& name)
    {
        bool read = false;
        for (const auto& n : g.node()) {
            for (int i = 0; i < n.input_size(); ++i) {
                if (n.input(i) != name)
                    continue;
                if (i != 0 || (n.op_type() != "ScatterElements" && n.op_type() != "ScatterND"))
                    return false;
                read = true;
            }
        }
        return read;
    }

} // namespace

void inferFolded(onnx::ModelProto& m)
{
    onnx::ModelProto inferred;
    onnximport::foldShapeComputations(m, inferred, [](onnx::ModelProto& w) { onnximport::inferShapesSafely(w); });
    m = std::move(inferred);
}

std::optional<DType> dtypeOf(int elemType)
{
    using Proto = onnx::TensorProto;
    switch (elemType) {
    case Proto::FLOAT:
        return DType::F32;
    case Proto::FLOAT16:
        return DType::F16;
    case Proto::BFLOAT16:
        return DType::BF16;
    case Proto::DOUBLE:
        return DType::F64;
    case Proto::INT64:
        return DType::I64;
    case Proto::INT32:
        return DType::I32;
    case Proto::INT8:
        return DType::I8;
    case Proto::UINT8:
        return DType::U8;
    case Proto::BOOL:
        return DType::Bool;
    default:
        return std::nullopt;
    }
}

std::shared_ptr<const std::vector<std::byte>> Importer::rawData(const onnx::TensorProto& t) const
{
    if (!m_options.keepWeights)
        return nullptr;
    std::vector<std::byte> bytes;
    const auto copy = [&bytes](const void* p, std::size_t n) {
        bytes.resize(n);
        std::memcpy(bytes.data(), p, n);
    };
    if (t.has_raw_data())
        copy(t.raw_data().data(), t.raw_data().size());
    else if (t.float_data_size() > 0)
        copy(t.float_data().data(), static_cast<std::size_t>(t.float_data_size()) * sizeof(float));
    else if (t.int64_data_size() > 0)
        copy(t.int64_data().data(), static_cast<std::size_t>(t.int64_data_size()) * sizeof(std::int64_t));
    else if (t.int32_data_size() > 0)
        copy(t.int32_data().data(), static_cast<std::size_t>(t.int32_data_size()) * sizeof(std::int32_t));
    else if (t.data_location() == onnx::TensorProto::EXTERNAL)
        return nullptr; // weights in a side file: plan without them
    return std::make_shared<const std::vector<std::byte>>(std::move(bytes));
}

// Frequency tables (frequency_tables.h), but for those the user (--parameters) or the tracer's
// record names trainable: their Sin/Cos tables fold only where the tensor stays a constant.
void Importer::findFrequencyTables()
{
    m_frequencyTables = onnximport::frequencyTables(m_model);
    std::map<std::string, const onnx::TensorProto*> tensors;
    for (const auto& t : m_model.graph().initializer())
        tensors[t.name()] = &t;
    for (const auto& n : m_model.graph().node()) {
        if (n.op_type() == "Constant" && n.output_size() == 1 && n.attribute_size() > 0 && n.attribute(0).has_t())
            tensors[n.output(0)] = &n.attribute(0).t();
    }
    std::erase_if(m_frequencyTables, [&](const std::string& name) {
        if (m_options.parameters.contains(name))
            return true;
        const auto it = tensors.find(name);
        if (!m_traced || it == tensors.end())
            return false;
        const auto& t = *it->second;
        const auto data = rawData(t);
        const auto d = decideByTracer(*m_traced, name, numElements(Shape(t.dims().begin(), t.dims().end())),
            t.data_type() == onnx::TensorProto::FLOAT ? data.get() : nullptr);
        return d && d->parameter;
    });
    m_result.report.frequencyTables.assign(m_frequencyTables.begin(), m_frequencyTables.end());
}

void Importer::addInitializers()
{
    // BatchNormalization's running mean and variance are buffers, not trainable parameters.
    std::map<std::string, int> uses;
    for (const auto& o : m_model.graph().output())
        m_consumed.insert(o.name());
    for (const auto& n : m_model.graph().node()) {
        for (int i = 0; i < n.input_size(); ++i) {
            ++uses[n.input(i)];
            m_consumed.insert(n.input(i));
            if (n.op_type() == "BatchNormalization" && i >= 3)
                m_bnStats.insert(n.input(i));
        }
    }
    // torch.export's graph signature names the module's parameters; a one-element initializer
    // it does not name is a constant its optimizer folded (an attention scale).
    const auto& signatureParameters = m_signatureParameters;
    for (const auto& t : m_model.graph().initializer()) {
        const auto dtype = dtypeOf(t.data_type());
        if (!dtype)
            fail("initializer '" + t.name() + "' has an unsupported element type " + std::to_string(t.data_type()));
        // Trainable unless a BatchNorm statistic, a scalar (a constant folded by the exporter) or
        // holding infinities, NaNs or float extremes (an additive attention mask).
        const Shape shape(t.dims().begin(), t.dims().end());
        auto data = rawData(t);
        // A buffer that only feeds comparisons (a registered causal mask read as `mask == 0`)
        // never gets a gradient: a constant too.
        const bool foldedScalar =
            signatureParameters && numElements(shape) == 1 && !signatureParameters->contains(t.name());
        std::string rule = "parameter: a gradient reaches it";
        if (!isFloat(*dtype))
            rule = "constant: not floating point";
        else if (m_bnStats.contains(t.name()))
            rule = "constant: a BatchNormalization running statistic";
        else if (shape.empty())
            rule = "constant: a scalar (folded by the exporter)";
        else if (foldedScalar)
            rule = "constant: one element torch.export's signature does not name a parameter";
        else if (data && *dtype == DType::F32 && holdsMaskValues(*data))
            rule = "constant: holds infinities or float extremes (an additive mask)";
        else if (m_frequencyTables.contains(t.name()))
            rule = "constant: only position tables computed through Sin/Cos read it (a frequency table)";
        else if (!m_trainable.contains(t.name()))
            rule = "constant: no gradient reaches it (read by comparisons, shapes or integer casts)";
        else if (m_foldedConstants.contains(t.name()))
            rule = "constant: torch.export folded it from buffers only";
        // The tracer's record of the module (tracer_metadata.h) decides every float initializer but
        // BatchNorm statistics and scalars, over the rules above: torch knows its buffers and frozen
        // parameters, and trains a parameter that no gradient reaches (its gradient is zero).
        if (m_traced && isFloat(*dtype) && !m_bnStats.contains(t.name()) && !shape.empty()) {
            if (const auto d = decideByTracer(
                    *m_traced, t.name(), numElements(shape), *dtype == DType::F32 ? data.get() : nullptr))
                rule = d->rule;
        }
        const bool parameter = parameterKind(t.name(), rule.starts_with("parameter"), *dtype);
        if (m_options.parameters.contains(t.name()))
            rule = "parameter: named by the user (--parameters)";
        else if (m_options.constants.contains(t.name()))
            rule = "constant: named by the user (--constants)";
        m_result.report.initializerRules.push_back({ t.name(), parameter, rule });
        const auto kind = parameter ? TensorKind::Parameter : TensorKind::Constant;
        Tensor tensor { TensorId(), t.name(), shape, *dtype, kind, NodeId(), std::move(data) };
        m_tensors[t.name()] = m_result.graph.addTensor(std::move(tensor));
    }
}

// The rules' decision `byRules`, unless the user named the value in --parameters or --constants.
bool Importer::parameterKind(const std::string& name, bool byRules, DType dtype)
{
    const bool parameter = m_options.parameters.contains(name);
    const bool constant = m_options.constants.contains(name);
    if (parameter && constant)
        fail("'" + name + "' is named both a parameter and a constant");
    if (!parameter && !constant)
        return byRules;
    m_overridesFound.insert(name);
    if (parameter && !isFloat(dtype))
        fail("'" + name + "' cannot be a parameter: its elements are " + std::string(toString(dtype))
            + ", not floating point");
    return parameter;
}

// Every name the user gave is a value of the model: a misspelt one would otherwise do nothing.
void Importer::checkOverridesFound() const
{
    for (const auto* names : { &m_options.parameters, &m_options.constants }) {
        for (const auto& name : *names) {
            if (!m_overridesFound.contains(name))
                fail("'" + name + "' (named as a " + (names == &m_options.parameters ? "parameter" : "constant")
                    + ") is not an initializer or constant of the model");
        }
    }
}

// The values a gradient can reach: walking the nodes backwards from the graph outputs, a node
// with a float output something needs passes the need to its float inputs. Comparisons, casts to
// integers and shape computations stop it.
std::set<std::string> Importer::valuesReachingAFloatOutput() const
{
    const auto floating = [this](const std::string& name) {
        const auto it = m_shapes.find(name);
        return it == m_shapes.end() || isFloat(it->second.second); // unknown: assume it can train
    };
    std::set<std::string> needed;
    for (const auto& o : m_model.graph().output())
        needed.insert(o.name());
    for (auto i = m_order.rbegin(); i != m_order.rend(); ++i) {
        const auto& node = m_model.graph().node(*i);
        const bool needs = std::any_of(node.output().begin(), node.output().end(),
            [&](const std::string& o) { return needed.contains(o) && floating(o); });
        if (!needs)
            continue;
        for (const auto& in : node.input()) {
            if (!in.empty() && floating(in))
                needed.insert(in);
        }
    }
    return needed;
}

void Importer::addConstant(const onnx::NodeProto& node)
{
    for (const auto& a : node.attribute()) {
        if (a.name() == "value" && a.has_t()) {
            const auto& t = a.t();
            const auto dtype = dtypeOf(t.data_type()).value_or(DType::F32);
            const Shape shape(t.dims().begin(), t.dims().end());
            // torch's constant folding turns slices of parameters (e.g. MultiheadAttention's
            // in_proj_bias split into q, k, v) into Constant nodes: float tensors with more
            // than one element are parameters; scalars (scales, epsilons) stay constants.
            // An attention mask the exporter folded holds infinities: a constant. So is a fill that
            // is only scattered into, and a rotary frequency table (frequency_tables.h).
            auto data = rawData(t);
            const bool canvas =
                data && dtype == DType::F32 && uniform(*data) && onlyScatteredInto(m_model.graph(), node.output(0));
            const bool parameter = isFloat(dtype) && !shape.empty() && numElements(shape) > 1
                && !(data && dtype == DType::F32 && holdsMaskValues(*data)) && !canvas
                && m_trainable.contains(node.output(0)) && !m_frequencyTables.contains(node.output(0));
            const auto kind =
                parameterKind(node.output(0), parameter, dtype) ? TensorKind::Parameter : TensorKind::Constant;
            Tensor tensor { TensorId(), node.output(0), shape, dtype, kind, NodeId(), std::move(data) };
            m_tensors[node.output(0)] = m_result.graph.addTensor(std::move(tensor));
            ++m_result.report.foldedConstants;
            return;
        }
    }
    // value_float / value_ints ...: a scalar or small list; keep its inferred shape.
    const auto it = m_shapes.find(node.output(0));
    Tensor tensor { TensorId(), node.output(0), it != m_shapes.end() ? it->second.first : Shape {},
        it != m_shapes.end() ? it->second.second : DType::F32, TensorKind::Constant, NodeId(), nullptr };
    m_tensors[node.output(0)] = m_result.graph.addTensor(std::move(tensor));
    ++m_result.report.foldedConstants;
}

void Importer::addInputs()
{
    for (const auto& input : m_model.graph().input()) {
        if (m_tensors.contains(input.name()))
            continue; // an initializer listed as input (older exporters)
        const auto it = m_shapes.find(input.name());
        if (it == m_shapes.end())
            fail("input '" + input.name() + "' has a dimension that could not be bound (pass --batch/--seq)");
        m_tensors[input.name()] = m_result.graph.addTensor(
            { TensorId(), input.name(), it->second.first, it->second.second, TensorKind::Input, NodeId(), nullptr });
    }
}

TensorId Importer::tensorFor(const std::string& name, const onnx::NodeProto& user)
{
    const auto it = m_tensors.find(name);
    if (it == m_tensors.end() && m_folded.contains(name))
        return foldedTensor(name);
    if (it == m_tensors.end())
        fail("node '" + user.name() + "' (" + user.op_type() + ") reads '" + name + "', which nothing produces");
    return it->second;
}

// Scope from the exporter's node name ("/encoder/layers.0/self_attn/MatMul" -> encoder.layers.0.self_attn)
// and the block it belongs to: the scope up to its first component numbered like "layers.0",
// "h.3" or "encoder_layer_11" (the outermost, so ViT's "encoder_layer_0/ln_1" is block 0).

bool Importer::foldShapeNode(const onnx::NodeProto& node)
{
    if (node.output_size() == 0)
        return false;
    for (const auto& out : node.output()) {
        if (!m_folded.contains(out))
            return false;
    }
    ++m_result.report.foldedShapeNodes;
    return true;
}

// The constant tensor of a folded value, created when an op of the graph first reads it (most
// folded values only feed other folded computations).
TensorId Importer::foldedTensor(const std::string& out)
{
    {
        const auto& value = m_folded.at(out);
        const auto dtype = dtypeOf(value.elemType).value_or(DType::I64);
        auto bytes = std::make_shared<std::vector<std::byte>>(
            static_cast<std::size_t>(numBytes(Shape(value.shape.begin(), value.shape.end()), dtype)));
        const auto store = [&bytes]<typename E>(const auto& values, E) {
            for (std::size_t i = 0; i < values.size(); ++i) {
                const auto e = static_cast<E>(values[i]);
                std::memcpy(bytes->data() + i * sizeof(E), &e, sizeof(E));
            }
        };
        switch (dtype) {
        case DType::F32:
            store(value.values, float {});
            break;
        case DType::F64:
            store(value.values, double {});
            break;
        case DType::I32:
            store(value.values, std::int32_t {});
            break;
        case DType::I8:
            store(value.values, std::int8_t {});
            break;
        case DType::U8:
        case DType::Bool:
            store(value.values, std::uint8_t {});
            break;
        default:
            store(value.ints(), std::int64_t {});
            break;
        }
        const auto id = m_result.graph.addTensor({ TensorId(), out, Shape(value.shape.begin(), value.shape.end()),
            dtype == DType::F16 || dtype == DType::BF16 ? DType::I64 : dtype, TensorKind::Constant, NodeId(),
            std::move(bytes) });
        m_tensors[out] = id;
        return id;
    }
}

// torch.onnx.export stores initializers with equal contents once (fresh biases, LayerNorm and
// BatchNorm scales) and re-creates the others as Identity nodes reading it. Those were separate
// parameters in the module, equal only at export: each alias becomes its own parameter starting
// from the shared value (untied). Parameters the module really shares (tied embeddings) are one
// initializer read by several nodes and stay one parameter. An Identity of anything else is
// folded away: its output is its input.

} // namespace ps::onnximport
