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

std::string expandEinsumEllipsis(std::string_view equation, const std::vector<std::size_t>& ranks)
{
    std::string text;
    for (char c : equation) {
        if (c != ' ')
            text.push_back(c);
    }
    if (text.find("...") == std::string::npos)
        return text;
    const auto fail = [&](const std::string& why) {
        throw Error("Einsum equation '" + std::string(equation) + "': " + why);
    };
    const auto arrow = text.find("->");
    std::vector<std::string> operands;
    for (std::size_t start = 0;;) {
        const auto comma = text.find(',', start);
        const auto end = std::min(comma, arrow);
        operands.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
        if (comma == std::string::npos || comma > arrow)
            break;
        start = comma + 1;
    }
    if (operands.size() != ranks.size())
        fail("names " + std::to_string(operands.size()) + " operands, the node has " + std::to_string(ranks.size()));
    std::vector<std::size_t> spans(operands.size(), 0); // dims each operand's ellipsis covers
    std::size_t widest = 0;
    for (std::size_t i = 0; i < operands.size(); ++i) {
        const auto letters = operands[i].size() - (operands[i].find("...") != std::string::npos ? 3 : 0);
        if (letters > ranks[i])
            fail("operand " + std::to_string(i) + " '" + operands[i] + "' has more letters than its rank "
                + std::to_string(ranks[i]));
        spans[i] = operands[i].find("...") != std::string::npos ? ranks[i] - letters : 0;
        widest = std::max(widest, spans[i]);
    }
    std::string fresh; // letters the equation does not use, one per ellipsis dim
    for (const char c : std::string("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")) {
        if (fresh.size() < widest && text.find(c) == std::string::npos)
            fresh.push_back(c);
    }
    if (fresh.size() < widest)
        fail("needs more letters than remain");
    std::string out;
    std::map<char, int> uses;
    for (std::size_t i = 0; i < operands.size(); ++i) {
        auto op = operands[i];
        if (const auto e = op.find("..."); e != std::string::npos)
            op.replace(e, 3, fresh.substr(widest - spans[i]));
        for (const char c : op)
            ++uses[c];
        out += (i > 0 ? "," : "") + op;
    }
    std::string result;
    if (arrow == std::string::npos) { // implicit: the ellipsis dims, then the letters used once
        result = fresh;
        for (const auto& [c, n] : uses) {
            if (n == 1 && fresh.find(c) == std::string::npos)
                result.push_back(c);
        }
    } else {
        result = text.substr(arrow + 2);
        if (const auto e = result.find("..."); e != std::string::npos)
            result.replace(e, 3, fresh);
    }
    return out + "->" + result;
}

} // namespace ps
