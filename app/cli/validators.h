// Internal to the CLI: option checks whose messages a user can read ("--lr: must be between 0 and
// 10, got nan"), unlike CLI11's ranges over the whole double type; NaN and infinities never pass.
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <cmath>
#include <string>

namespace ps::app {

// A finite number in [min, max] (an open lower end with `minExclusive`).
inline CLI::Validator numberIn(double min, double max, bool minExclusive = false)
{
    return CLI::Validator(
        [=](std::string& text) -> std::string {
            double value = 0;
            const bool parsed = CLI::detail::lexical_cast(text, value);
            const bool low = minExclusive ? value > min : value >= min;
            if (parsed && std::isfinite(value) && low && value <= max)
                return {};
            return fmt::format("must be {} {:.12g} and at most {:.12g}, got '{}'",
                minExclusive ? "greater than" : "at least", min, max, text);
        },
        fmt::format("{}{:.12g}..{:.12g}", minExclusive ? ">" : "", min, max));
}

// A finite number greater than 0 and at most `max`.
inline CLI::Validator positiveUpTo(double max)
{
    return numberIn(0, max, true);
}

} // namespace ps::app
