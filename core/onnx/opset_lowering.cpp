#include "onnx/opset_lowering.h"

#include "util/error.h"

#include <algorithm>
#include <cstring>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <vector>

namespace ps::onnximport {
namespace {

    // Since-versions after 17 of the default domain's operators, opsets 18..25, from ONNX 1.23's
    // schemas (onnx.defs.get_all_schemas_with_history()).
    const std::map<std::string, std::vector<int>>& versionsAfter17()
    {
        static const std::map<std::string, std::vector<int>> table = [] {
            const std::vector<std::pair<int, std::vector<std::string>>> byVersion {
                { 18,
                    { "BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor", "CenterCropPad", "Col2Im",
                        "GroupNormalization", "LpPool", "Mish", "OptionalGetElement", "OptionalHasElement", "Pad",
                        "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
                        "ReduceMin", "ReduceProd", "ReduceSumSquare", "Resize", "ScatterElements", "ScatterND",
                        "Split" } },
                { 19,
                    { "AveragePool", "Cast", "CastLike", "Constant", "DeformConv", "DequantizeLinear", "Equal",
                        "Identity", "If", "Loop", "Pad", "QuantizeLinear", "Reshape", "Resize", "Scan", "Shape",
                        "Size" } },
                { 20,
                    { "AffineGrid", "ConstantOfShape", "DFT", "Gelu", "GridSample", "ImageDecoder", "IsInf", "IsNaN",
                        "ReduceMax", "ReduceMin", "RegexFullMatch", "StringConcat", "StringSplit" } },
                { 21,
                    { "Cast", "CastLike", "Constant", "ConstantOfShape", "DequantizeLinear", "Flatten",
                        "GroupNormalization", "Identity", "If", "Loop", "Pad", "QLinearMatMul", "QuantizeLinear",
                        "Reshape", "Scan", "Shape", "Size", "Squeeze", "Transpose", "Unsqueeze" } },
                { 22,
                    { "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "AveragePool", "Bernoulli", "Conv",
                        "ConvTranspose", "Cos", "Cosh", "DeformConv", "Det", "Dropout", "Elu", "EyeLike", "GRU",
                        "GlobalAveragePool", "GlobalLpPool", "GlobalMaxPool", "GridSample", "HardSigmoid", "HardSwish",
                        "InstanceNormalization", "LSTM", "LpNormalization", "LpPool", "MaxPool", "MaxRoiPool",
                        "MaxUnpool", "Mish", "Multinomial", "NegativeLogLikelihoodLoss", "RNN", "RandomNormal",
                        "RandomNormalLike", "RandomUniform", "RandomUniformLike", "RoiAlign", "Round", "Selu", "Sin",
                        "Sinh", "Softplus", "Softsign", "Tan", "ThresholdedRelu" } },
                { 23,
                    { "Attention", "Cast", "CastLike", "Constant", "ConstantOfShape", "DequantizeLinear", "Flatten",
                        "Identity", "If", "Loop", "Pad", "QuantizeLinear", "RMSNormalization", "Reshape",
                        "RotaryEmbedding", "Scan", "Shape", "Size", "Squeeze", "Transpose", "Unsqueeze" } },
                { 24,
                    { "Attention", "Cast", "CastLike", "Constant", "ConstantOfShape", "DequantizeLinear", "Flatten",
                        "Identity", "If", "Loop", "Pad", "QuantizeLinear", "Reshape", "Scan", "Shape", "Size",
                        "SplitToSequence", "Squeeze", "Swish", "TensorScatter", "TopK", "Transpose", "Unsqueeze" } },
                { 25,
                    { "Attention", "Cast", "CastLike", "Constant", "ConstantOfShape", "DequantizeLinear", "Flatten",
                        "Identity", "If", "Loop", "Pad", "QuantizeLinear", "Reshape", "Scan", "Shape", "Size",
                        "Squeeze", "Transpose", "Unsqueeze" } },
            };
            std::map<std::string, std::vector<int>> t;
            for (const auto& [version, ops] : byVersion) {
                for (const auto& op : ops)
                    t[op].push_back(version);
            }
            return t;
        }();
        return table;
    }

    // Operators whose versions after 17 add element types only (their inputs, outputs and
    // attributes are those of their opset-17 version: checked against ONNX 1.23's signatures).
    const std::set<std::string>& typeOnly()
    {
        static const std::set<std::string> ops { "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Bernoulli",
            "Constant", "ConstantOfShape", "Conv", "ConvTranspose", "Cos", "Cosh", "Det", "Dropout", "Elu", "Equal",
            "EyeLike", "Flatten", "GlobalAveragePool", "GlobalLpPool", "GlobalMaxPool", "HardSigmoid", "HardSwish",
            "Identity", "InstanceNormalization", "IsInf", "IsNaN", "LpNormalization", "MaxPool", "MaxRoiPool",
            "MaxUnpool", "Multinomial", "NegativeLogLikelihoodLoss", "RandomNormal", "RandomNormalLike",
            "RandomUniform", "RandomUniformLike", "Reshape", "RoiAlign", "Round", "Selu", "Shape", "Sin", "Sinh",
            "Size", "Softplus", "Softsign", "Squeeze", "Tan", "ThresholdedRelu", "TopK", "Transpose", "Unsqueeze" };
        return ops;
    }

    bool isReduction(const std::string& op)
    {
        return op == "ReduceL1" || op == "ReduceL2" || op == "ReduceLogSum" || op == "ReduceLogSumExp"
            || op == "ReduceMax" || op == "ReduceMean" || op == "ReduceMin" || op == "ReduceProd"
            || op == "ReduceSumSquare";
    }

    std::string nodeLabel(const onnx::NodeProto& n, int version)
    {
        const auto id = !n.name().empty() ? n.name() : n.output_size() > 0 ? n.output(0) : std::string("(unnamed)");
        return "node '" + id + "' (" + n.op_type() + ", version " + std::to_string(version) + ")";
    }

    const onnx::AttributeProto* attribute(const onnx::NodeProto& n, const std::string& name)
    {
        for (const auto& a : n.attribute()) {
            if (a.name() == name)
                return &a;
        }
        return nullptr;
    }

    void dropAttribute(onnx::NodeProto& n, const std::string& name)
    {
        auto* attrs = n.mutable_attribute();
        for (int i = 0; i < attrs->size(); ++i) {
            if (attrs->Get(i).name() == name) {
                attrs->DeleteSubrange(i, 1);
                return;
            }
        }
    }

    bool hasInput(const onnx::NodeProto& n, int i)
    {
        return n.input_size() > i && !n.input(i).empty();
    }

    // Integer values of a constant tensor (an initializer or a Constant node's value).
    // nullopt when the tensor is not int64 or its bytes do not make whole values.
    std::optional<std::vector<std::int64_t>> integers(const onnx::TensorProto& t)
    {
        if (t.data_type() != onnx::TensorProto::INT64)
            return std::nullopt;
        std::vector<std::int64_t> out(t.int64_data().begin(), t.int64_data().end());
        if (out.empty() && t.has_raw_data()) {
            if (t.raw_data().size() % sizeof(std::int64_t) != 0)
                return std::nullopt;
            out.resize(t.raw_data().size() / sizeof(std::int64_t));
            std::memcpy(out.data(), t.raw_data().data(), out.size() * sizeof(std::int64_t));
        }
        return out;
    }

    class Lowering
    {
    public:
        Lowering(onnx::ModelProto& model, int opset)
            : m_model(model)
            , m_opset(opset)
        {
            for (const auto& t : model.graph().initializer())
                m_constants[t.name()] = &t;
            for (const auto& n : model.graph().node()) {
                const auto* value = n.op_type() == "Constant" ? attribute(n, "value") : nullptr;
                if (value != nullptr && n.output_size() == 1)
                    m_constants[n.output(0)] = &value->t();
            }
        }

        int run()
        {
            int changed = 0;
            for (auto& n : *m_model.mutable_graph()->mutable_node()) {
                if (!n.domain().empty() && n.domain() != "ai.onnx")
                    continue;
                const int version = versionAfter17(n.op_type(), m_opset);
                if (version > 0)
                    changed += lower(n, version) ? 1 : 0;
            }
            return changed;
        }

    private:
        [[noreturn]] void refuse(const onnx::NodeProto& n, int version, const std::string& why) const
        {
            throw Error(nodeLabel(n, version) + " " + why);
        }

        // true when the node changed form.
        bool lower(onnx::NodeProto& n, int version)
        {
            const auto& op = n.op_type();
            if (typeOnly().contains(op))
                return false;
            if (isReduction(op))
                return lowerReduction(n, version);
            if (op == "Split") {
                if (hasInput(n, 1)) // explicit sizes: opset 13's form already
                    return dropIfPresent(n, "num_outputs");
                const auto* count = attribute(n, "num_outputs");
                if (count != nullptr && count->i() != n.output_size())
                    refuse(n, version,
                        "names num_outputs " + std::to_string(count->i()) + " for " + std::to_string(n.output_size())
                            + " outputs");
                return dropIfPresent(n, "num_outputs"); // even split into the outputs, as opset 13 reads it
            }
            if (op == "Pad") {
                if (hasInput(n, 3))
                    refuse(n, version, "pads only some axes (its axes input); PipeStudio reads Pad over every axis");
                if (const auto* mode = attribute(n, "mode"); mode != nullptr && mode->s() == "wrap")
                    refuse(n, version, "pads in \"wrap\" mode, which opset 17 has not");
                return false;
            }
            if (op == "Resize")
                return lowerResize(n, version);
            if (op == "AveragePool" || op == "LpPool")
                return lowerPool(n, version);
            if (op == "ScatterElements" || op == "ScatterND") {
                if (const auto* r = attribute(n, "reduction"); r != nullptr && (r->s() == "max" || r->s() == "min"))
                    refuse(n, version, "reduces with \"" + r->s() + "\", which opset 17 has not");
                return false;
            }
            if (op == "Cast" || op == "CastLike") { // only 8- and 4-bit floats read these
                const bool a = dropIfPresent(n, "saturate");
                const bool b = dropIfPresent(n, "round_mode");
                return a || b;
            }
            if (op == "Gelu") {
                if (const auto* a = attribute(n, "approximate"); a != nullptr && a->s() != "none" && a->s() != "tanh")
                    refuse(n, version, "has approximate=\"" + a->s() + "\" (none or tanh expected)");
                return false; // mapped as it is; shape inference sees shapeStandIn's op
            }
            refuse(n, version,
                "is not read by PipeStudio yet at this version (it reads opsets 13-"
                    + std::to_string(kNewestLoweredOpset) + " for the operators torch exports to them)");
        }

        bool dropIfPresent(onnx::NodeProto& n, const std::string& name)
        {
            if (attribute(n, name) == nullptr)
                return false;
            dropAttribute(n, name);
            return true;
        }

        bool lowerReduction(onnx::NodeProto& n, int version)
        {
            const auto* noop = attribute(n, "noop_with_empty_axes");
            const bool noopEmpty = noop != nullptr && noop->i() != 0;
            dropIfPresent(n, "noop_with_empty_axes");
            if (n.input_size() < 1)
                refuse(n, version, "has no input");
            if (!hasInput(n, 1)) {
                if (noopEmpty)
                    refuse(n, version, "reduces nothing (noop_with_empty_axes without axes)");
                n.mutable_input()->DeleteSubrange(1, n.input_size() - 1);
                return true;
            }
            const auto it = m_constants.find(n.input(1));
            if (it == m_constants.end())
                refuse(n, version, "takes its axes from '" + n.input(1) + "', which is not a constant");
            const auto axes = integers(*it->second);
            if (!axes)
                refuse(n, version, "has axes '" + n.input(1) + "' that are not int64 values");
            if (axes->empty() && noopEmpty)
                refuse(n, version, "reduces nothing (noop_with_empty_axes with empty axes)");
            n.mutable_input()->DeleteSubrange(1, n.input_size() - 1);
            if (!axes->empty()) {
                auto* a = n.add_attribute();
                a->set_name("axes");
                a->set_type(onnx::AttributeProto::INTS);
                for (const auto axis : *axes)
                    a->add_ints(axis);
            }
            return true;
        }

        bool lowerResize(onnx::NodeProto& n, int version)
        {
            if (const auto* a = attribute(n, "antialias"); a != nullptr && a->i() != 0)
                refuse(n, version, "antialiases, which opset 17 has not");
            if (attribute(n, "axes") != nullptr)
                refuse(n, version, "resizes only some axes (axes), which opset 17 has not");
            if (const auto* a = attribute(n, "keep_aspect_ratio_policy"); a != nullptr && a->s() != "stretch")
                refuse(n, version, "keeps the aspect ratio (" + a->s() + "), which opset 17 has not");
            if (const auto* a = attribute(n, "coordinate_transformation_mode");
                a != nullptr && a->s() == "half_pixel_symmetric")
                refuse(n, version, "uses half_pixel_symmetric coordinates, which opset 17 has not");
            const bool a = dropIfPresent(n, "antialias");
            const bool b = dropIfPresent(n, "axes");
            const bool c = dropIfPresent(n, "keep_aspect_ratio_policy");
            return a || b || c;
        }

        bool lowerPool(onnx::NodeProto& n, int version)
        {
            bool changed = false;
            if (n.op_type() == "LpPool") { // ceil_mode came with LpPool 18
                if (const auto* c = attribute(n, "ceil_mode"); c != nullptr && c->i() != 0)
                    refuse(n, version, "rounds its output size up (ceil_mode), which LpPool at 17 cannot");
                changed = dropIfPresent(n, "ceil_mode");
            }
            const auto* d = attribute(n, "dilations");
            if (d == nullptr)
                return changed;
            if (std::any_of(d->ints().begin(), d->ints().end(), [](std::int64_t x) { return x != 1; }))
                refuse(n, version, "has dilations, which its opset-17 version has not");
            dropAttribute(n, "dilations");
            return true;
        }

        onnx::ModelProto& m_model;
        int m_opset;
        std::map<std::string, const onnx::TensorProto*> m_constants;
    };

} // namespace

int versionAfter17(const std::string& op, int opset)
{
    const auto it = versionsAfter17().find(op);
    if (it == versionsAfter17().end())
        return 0;
    int version = 0;
    for (const int v : it->second)
        version = v <= opset ? v : version;
    return version;
}

int lowerToOpset17(onnx::ModelProto& model, int opset)
{
    if (opset <= 17)
        return 0;
    if (opset > kNewestLoweredOpset)
        throw Error("uses ONNX opset " + std::to_string(opset) + "; PipeStudio reads opsets 13-"
            + std::to_string(kNewestLoweredOpset));
    const int changed = Lowering(model, opset).run();
    for (auto& o : *model.mutable_opset_import()) {
        if (o.domain().empty() || o.domain() == "ai.onnx")
            o.set_version(17);
    }
    model.set_ir_version(std::min<std::int64_t>(model.ir_version(), 8)); // opset 17's IR
    return changed;
}

std::vector<std::string> unknownMessageFields(const google::protobuf::Message& message, int field)
{
    using google::protobuf::internal::WireFormatLite;
    std::vector<std::string> out;
    const auto bytes = message.SerializeAsString(); // unknown fields are written back as they came
    google::protobuf::io::CodedInputStream in(
        reinterpret_cast<const std::uint8_t*>(bytes.data()), static_cast<int>(bytes.size()));
    while (const auto tag = in.ReadTag()) {
        if (static_cast<int>(WireFormatLite::GetTagFieldNumber(tag)) == field
            && WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
            std::string entry;
            std::uint32_t length = 0;
            if (!in.ReadVarint32(&length) || !in.ReadString(&entry, static_cast<int>(length)))
                break;
            out.push_back(std::move(entry));
        } else if (!WireFormatLite::SkipField(&in, tag)) {
            break;
        }
    }
    return out;
}

std::vector<std::pair<std::string, std::string>> graphMetadata(const onnx::GraphProto& graph)
{
    constexpr int kMetadataProps = 16;
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& entry : unknownMessageFields(graph, kMetadataProps)) {
        onnx::StringStringEntryProto kv;
        if (kv.ParseFromString(entry))
            out.emplace_back(kv.key(), kv.value());
    }
    return out;
}

std::optional<std::map<std::string, std::string>> torchExportPlaceholders(const onnx::GraphProto& graph)
{
    std::optional<std::map<std::string, std::string>> out;
    for (const auto& [key, value] : graphMetadata(graph)) {
        if (key != "pkg.torch.export.ExportedProgram.graph_signature")
            continue;
        out.emplace();
        std::istringstream lines(value);
        constexpr std::string_view kParameter = ": PARAMETER target='";
        for (std::string line; std::getline(lines, line);) {
            const auto at = line.find(kParameter);
            const auto from = at + kParameter.size();
            const auto end = at == std::string::npos ? at : line.find('\'', from);
            if (end == std::string::npos)
                continue;
            auto placeholder = line.substr(0, at);
            placeholder.erase(0, placeholder.find_first_not_of(' '));
            (*out)[placeholder] = line.substr(from, end - from);
        }
    }
    return out;
}

std::optional<std::set<std::string>> torchExportParameters(const onnx::GraphProto& graph)
{
    const auto placeholders = torchExportPlaceholders(graph);
    if (!placeholders)
        return std::nullopt;
    std::set<std::string> out;
    for (const auto& [placeholder, target] : *placeholders)
        out.insert(target);
    return out;
}

std::string shapeStandIn(const std::string& op)
{
    return op == "Gelu" ? "Erf" : std::string();
}

} // namespace ps::onnximport
