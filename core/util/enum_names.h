// Parsing an enum from the name its toString gives (command-line options, project files).
#pragma once

#include "util/error.h"

#include <initializer_list>
#include <string>
#include <string_view>

namespace ps {

// The value among `values` whose toString (found by argument-dependent lookup) is `text`. Throws
// ps::Error "unknown <what> '<text>' (<every name, in the order of values>)" when none is.
template <typename Values> auto parseByName(std::string_view what, std::string_view text, const Values& values)
{
    for (auto value : values) {
        if (toString(value) == text)
            return value;
    }
    std::string names;
    for (auto value : values)
        names += (names.empty() ? "" : ", ") + std::string(toString(value));
    throw Error("unknown " + std::string(what) + " '" + std::string(text) + "' (" + names + ")");
}

template <typename Enum>
Enum parseByName(std::string_view what, std::string_view text, std::initializer_list<Enum> values)
{
    return parseByName<std::initializer_list<Enum>>(what, text, values);
}

} // namespace ps
