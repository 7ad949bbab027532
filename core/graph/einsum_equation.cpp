// Einsum equations (graph/op_registry.h): parsing into operands and output, and an ellipsis
// written out in letters.
#include "graph/op_registry.h"
#include "util/error.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <string>

namespace ps {

EinsumSpec parseEinsum(std::string_view equation, std::size_t operandCount)
{
    const auto fail = [&](const std::string& why) {
        throw Error("Einsum equation '" + std::string(equation) + "': " + why);
    };
    std::string text;
    for (char c : equation) {
        if (c != ' ')
            text.push_back(c);
    }
    if (text.find("...") != std::string::npos)
        fail("an ellipsis ('...') is not supported");
    EinsumSpec spec;
    const auto arrow = text.find("->");
    const std::string lhs = text.substr(0, arrow);
    std::size_t start = 0;
    for (;;) {
        const auto comma = lhs.find(',', start);
        spec.operands.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        if (comma == std::string::npos)
            break;
        start = comma + 1;
    }
    if (spec.operands.size() != operandCount)
        fail("names " + std::to_string(spec.operands.size()) + " operands, the node has "
            + std::to_string(operandCount));
    std::map<char, int> uses;
    for (const auto& op : spec.operands) {
        for (std::size_t i = 0; i < op.size(); ++i) {
            if (!std::isalpha(static_cast<unsigned char>(op[i])))
                fail(std::string("'") + op[i] + "' is not a letter");
            if (op.find(op[i], i + 1) != std::string::npos)
                fail(std::string("letter '") + op[i] + "' repeats within an operand (diagonals are not supported)");
            ++uses[op[i]];
        }
    }
    if (arrow == std::string::npos) {
        for (const auto& [c, n] : uses) {
            if (n == 1)
                spec.output.push_back(c);
        }
    } else {
        spec.output = text.substr(arrow + 2);
        for (std::size_t i = 0; i < spec.output.size(); ++i) {
            const char c = spec.output[i];
            if (!uses.contains(c))
                fail(std::string("output letter '") + c + "' is in no operand");
            if (spec.output.find(c, i + 1) != std::string::npos)
                fail(std::string("output letter '") + c + "' repeats");
        }
    }
    return spec;
}

namespace {

    // The equation's operands and output (empty without "->"), spaces removed.
    struct RawEquation
    {
        std::string text;
        std::vector<std::string> operands;
        bool arrow = false;
        std::string output;
    };

    RawEquation splitEquation(std::string_view equation)
    {
        RawEquation r;
        for (char c : equation) {
            if (c != ' ')
                r.text.push_back(c);
        }
        const auto arrow = r.text.find("->");
        r.arrow = arrow != std::string::npos;
        const auto lhs = r.text.substr(0, arrow);
        for (std::size_t start = 0;;) {
            const auto comma = lhs.find(',', start);
            r.operands.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
            if (comma == std::string::npos)
                break;
            start = comma + 1;
        }
        if (r.arrow)
            r.output = r.text.substr(arrow + 2);
        return r;
    }

    // Letters `text` does not use, handed out one by one.
    class FreshLetters
    {
    public:
        FreshLetters(const std::string& text, std::string_view equation)
            : m_equation(equation)
        {
            for (const char c : std::string("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")) {
                if (text.find(c) == std::string::npos)
                    m_free.push_back(c);
            }
        }
        char next()
        {
            if (m_used == m_free.size())
                throw Error("Einsum equation '" + std::string(m_equation) + "': needs more letters than remain");
            return m_free[m_used++];
        }

    private:
        std::string_view m_equation;
        std::string m_free;
        std::size_t m_used = 0;
    };

} // namespace

std::string explicitEinsumEquation(std::string_view equation, const std::vector<Shape>& shapes)
{
    auto eq = splitEquation(equation);
    const auto fail = [&](const std::string& why) {
        throw Error("Einsum equation '" + std::string(equation) + "': " + why);
    };
    if (eq.operands.size() != shapes.size())
        fail(
            "names " + std::to_string(eq.operands.size()) + " operands, the node has " + std::to_string(shapes.size()));
    FreshLetters fresh(eq.text, equation);
    // 1. Each ellipsis as letters, aligned from the right across operands.
    std::vector<std::size_t> spans(eq.operands.size(), 0);
    std::size_t widest = 0;
    for (std::size_t i = 0; i < eq.operands.size(); ++i) {
        const bool ellipsis = eq.operands[i].find("...") != std::string::npos;
        const auto letters = eq.operands[i].size() - (ellipsis ? 3 : 0);
        if (letters > shapes[i].size())
            fail("operand " + std::to_string(i) + " '" + eq.operands[i] + "' has more letters than its rank "
                + std::to_string(shapes[i].size()));
        spans[i] = ellipsis ? shapes[i].size() - letters : 0;
        widest = std::max(widest, spans[i]);
    }
    std::string dims; // the ellipsis's letters
    while (dims.size() < widest)
        dims.push_back(fresh.next());
    std::map<char, int> uses;
    for (std::size_t i = 0; i < eq.operands.size(); ++i) {
        auto& op = eq.operands[i];
        if (const auto e = op.find("..."); e != std::string::npos)
            op.replace(e, 3, dims.substr(widest - spans[i]));
        for (const char c : op)
            ++uses[c];
    }
    if (!eq.arrow) { // implicit: the ellipsis's dims, then the letters used once, alphabetically
        eq.output = dims;
        for (const auto& [c, n] : uses) {
            if (n == 1 && dims.find(c) == std::string::npos)
                eq.output.push_back(c);
        }
    } else if (const auto e = eq.output.find("..."); e != std::string::npos) {
        eq.output.replace(e, 3, dims);
    }
    // 2. Broadcasting: where a letter is 1 in one operand and larger in another, the operand's dim
    // gets a letter of its own (summed over its one value), so its gradient sums the broadcast.
    std::map<char, std::int64_t> size;
    for (std::size_t i = 0; i < eq.operands.size(); ++i) {
        for (std::size_t d = 0; d < eq.operands[i].size() && d < shapes[i].size(); ++d)
            size[eq.operands[i][d]] = std::max(size[eq.operands[i][d]], shapes[i][d]);
    }
    bool broadcast = false;
    for (std::size_t i = 0; i < eq.operands.size(); ++i) {
        for (std::size_t d = 0; d < eq.operands[i].size() && d < shapes[i].size(); ++d) {
            if (shapes[i][d] == 1 && size[eq.operands[i][d]] > 1) {
                eq.operands[i][d] = fresh.next();
                broadcast = true;
            }
        }
    }
    if (widest == 0 && !broadcast && eq.text.find("...") == std::string::npos)
        return eq.text;
    std::string out;
    for (std::size_t i = 0; i < eq.operands.size(); ++i)
        out += (i > 0 ? "," : "") + eq.operands[i];
    return out + "->" + eq.output;
}

} // namespace ps
