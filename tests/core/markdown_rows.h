// A Markdown table's row as the reproduction tests read it.
#pragma once

#include <string>
#include <vector>

namespace ps::test {

// The cells of the first Markdown row starting with `prefix`, split on '|'.
inline std::vector<std::string> rowCells(const std::string& markdown, const std::string& prefix)
{
    auto at = markdown.find(prefix);
    while (at != std::string::npos && at > 0 && markdown[at - 1] != '\n')
        at = markdown.find(prefix, at + 1);
    if (at == std::string::npos)
        return {};
    const auto line = markdown.substr(at, markdown.find('\n', at) - at);
    std::vector<std::string> cells;
    std::size_t start = 1;
    for (auto bar = line.find('|', start); bar != std::string::npos; bar = line.find('|', start)) {
        cells.push_back(line.substr(start + 1, bar - start - 2));
        start = bar + 1;
    }
    return cells;
}

} // namespace ps::test
