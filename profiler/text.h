#pragma once
// Text helpers shared by the trace readers and matchers.

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

namespace ps::profiler {

// `s` in ASCII lower case.
inline std::string toLower(std::string_view s)
{
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
    return out;
}

} // namespace ps::profiler
