#include "graph/shape_inference.h"

#include "graph/op_registry.h"
#include "util/error.h"

namespace ps {

Shape broadcastShapes(const Shape& a, const Shape& b)
{
    const auto rank = std::max(a.size(), b.size());
    Shape out(rank, 1);
    for (std::size_t i = 0; i < rank; ++i) {
        const auto da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
        const auto db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
        if (da != db && da != 1 && db != 1)
            throw Error("shapes " + formatShape(a) + " and " + formatShape(b) + " cannot be broadcast");
        out[i] = da == 1 ? db : da;
    }
    return out;
}

std::optional<std::vector<Shape>> inferOutputShapes(const Node& node, const std::vector<const Tensor*>& inputs)
{
    const auto& def = opDef(node.op);
    if (def.shapes == nullptr)
        return std::nullopt;
    if (inputs.size() < def.minInputs || inputs.size() > def.maxInputs) {
        throw Error(std::string(def.name) + " expects " + std::to_string(def.minInputs)
            + (def.minInputs == def.maxInputs ? "" : "-" + std::to_string(def.maxInputs)) + " inputs, got "
            + std::to_string(inputs.size()));
    }
    return def.shapes(node, inputs);
}

} // namespace ps
