#include "einsum_plan.h"

#include "graph/op_registry.h"
#include "util/error.h"

#include <algorithm>

namespace ps::engine {
namespace {

    std::string einsumPrefix(const Node& node)
    {
        return "node '" + node.name + "' (" + std::string(toString(node.op)) + "): ";
    }

    bool hasLetter(const std::string& letters, char c)
    {
        return letters.find(c) != std::string::npos;
    }

    // Row-major strides of a term, by letter (a repeated letter: its first occurrence's).
    std::array<long long, 128> letterStrides(const std::string& letters, const EinsumPlan& plan)
    {
        std::array<long long, 128> strides {};
        long long stride = 1;
        for (std::size_t i = letters.size(); i-- > 0;) { // the first occurrence is written last
            strides[static_cast<std::size_t>(letters[i])] = stride;
            stride *= plan.sizes[static_cast<std::size_t>(letters[i])];
        }
        return strides;
    }

} // namespace

EinsumPlan einsumPlan(const Node& node, const std::vector<Shape>& operands)
{
    EinsumPlan plan;
    const auto it = node.attrs.find("equation");
    const auto* equation = it == node.attrs.end() ? nullptr : std::get_if<std::string>(&it->second);
    if (it != node.attrs.end() && equation == nullptr)
        throw Error(einsumPrefix(node) + "attribute 'equation' is not a string");
    try {
        auto parsed = parseEinsum(equation != nullptr ? *equation : std::string(), operands.size());
        plan.inputs = std::move(parsed.operands);
        plan.output = std::move(parsed.output);
    } catch (const Error& e) {
        throw Error(einsumPrefix(node) + e.what());
    }
    for (const auto& term : plan.inputs) {
        for (char c : term) {
            if (static_cast<unsigned char>(c) >= plan.sizes.size())
                throw Error(einsumPrefix(node) + "letter '" + c + "' is not ASCII");
        }
    }
    for (std::size_t t = 0; t < operands.size(); ++t) {
        const auto& term = plan.inputs[t];
        const auto& shape = operands[t];
        if (shape.size() != term.size())
            throw Error(einsumPrefix(node) + "operand '" + term + "' has shape " + formatShape(shape));
        for (std::size_t i = 0; i < term.size(); ++i) {
            auto& size = plan.sizes[static_cast<std::size_t>(term[i])];
            if (size != 0 && size != shape[i] + 1)
                throw Error(einsumPrefix(node) + "letter '" + term[i] + "' has sizes " + std::to_string(size - 1)
                    + " and " + std::to_string(shape[i]));
            size = shape[i] + 1; // 0: not seen yet
        }
    }
    for (auto& s : plan.sizes)
        s = std::max<std::int64_t>(s - 1, 0);
    return plan;
}

Shape einsumShape(const std::string& letters, const EinsumPlan& plan)
{
    Shape s;
    for (char c : letters)
        s.push_back(plan.sizes[static_cast<std::size_t>(c)]);
    return s;
}

math::EinsumLoop einsumLoop(
    const Node& node, const std::vector<std::string>& terms, const std::string& result, const EinsumPlan& plan)
{
    std::string summed;
    for (const auto& t : terms)
        for (char c : t)
            if (!hasLetter(result, c) && !hasLetter(summed, c))
                summed += c;
    if (result.size() > static_cast<std::size_t>(math::kMaxEinsumLetters)
        || summed.size() > static_cast<std::size_t>(math::kMaxEinsumLetters))
        throw Error(einsumPrefix(node) + "'" + result + "' and the summed letters '" + summed + "': at most "
            + std::to_string(math::kMaxEinsumLetters) + " letters each");
    math::EinsumLoop loop;
    loop.terms = static_cast<int>(terms.size());
    loop.outRank = static_cast<int>(result.size());
    loop.sumRank = static_cast<int>(summed.size());
    for (std::size_t t = 0; t < terms.size() && t < 2; ++t) {
        const auto strides = letterStrides(terms[t], plan);
        for (std::size_t l = 0; l < result.size(); ++l)
            loop.outStride[t][l] = hasLetter(terms[t], result[l]) ? strides[static_cast<std::size_t>(result[l])] : 0;
        for (std::size_t l = 0; l < summed.size(); ++l)
            loop.sumStride[t][l] = hasLetter(terms[t], summed[l]) ? strides[static_cast<std::size_t>(summed[l])] : 0;
    }
    for (std::size_t l = 0; l < result.size(); ++l)
        loop.outSize[l] = plan.sizes[static_cast<std::size_t>(result[l])];
    for (std::size_t l = 0; l < summed.size(); ++l) {
        loop.sumSize[l] = plan.sizes[static_cast<std::size_t>(summed[l])];
        loop.sumCount *= loop.sumSize[l];
    }
    return loop;
}

std::optional<EinsumGemm> einsumGemm(const std::string& a, const std::string& b, const std::string& result)
{
    const auto inTwo = [&](char c) { return hasLetter(a, c) + hasLetter(b, c) + hasLetter(result, c) >= 2; };
    if (!std::all_of(a.begin(), a.end(), inTwo) || !std::all_of(b.begin(), b.end(), inTwo)
        || !std::all_of(result.begin(), result.end(), inTwo))
        return std::nullopt;
    const auto split = [&](const std::string& x, const std::string& y) {
        EinsumGemm g;
        for (char c : result)
            (hasLetter(x, c) && hasLetter(y, c) ? g.batch : hasLetter(x, c) ? g.m : g.n) += c;
        for (char c : x)
            if (!hasLetter(result, c))
                g.k += c;
        return g;
    };
    auto g = split(a, b);
    if (g.batch + g.m + g.n != result && result == g.batch + g.n + g.m) {
        g = split(b, a);
        g.swapped = true;
    }
    return g;
}

} // namespace ps::engine
