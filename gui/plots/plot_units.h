// Units that fit an axis's data (issue P20): a memory axis of a model whose stages hold a few MiB
// reads in MiB, not as empty GiB bars. Depends on: Qt Core only.
#pragma once

#include <QString>

namespace ps::gui {

struct AxisUnit
{
    double scale = 1; // data value / scale = the value in this unit
    QString name; // "MiB", "ms"
};

// The binary byte unit (B, KiB, MiB, GiB, TiB) in which `maxBytes`, the axis's largest value,
// reads from 1 to below 1024 (B below 1 KiB, including zero and negative input).
[[nodiscard]] AxisUnit byteAxisUnit(double maxBytes);

// The time unit (us, ms, s) in which `maxMs` reads from 1 to below 1000 (ms when it is zero).
[[nodiscard]] AxisUnit timeAxisUnit(double maxMs);

// An upper bound for an axis whose data reaches `dataMax`: `headroom` above it, and a reference
// line (a capacity) at `reference` taken into the range only where it is within `reach` times the
// data (a device of 80 GiB does not flatten stages of a few MiB).
[[nodiscard]] double axisTop(double dataMax, double reference, double headroom = 1.2, double reach = 2.0);

} // namespace ps::gui
