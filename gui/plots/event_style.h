// How the timelines draw an action: its color (by action and micro-batch; copies red, sends grey)
// and its lane within a device row (compute in the middle, sends and copies in thin strips).
#pragma once

#include "plots/plot_style.h"
#include "sim/simulator.h"

#include <QColor>

#include <utility>

namespace ps::gui {

inline QColor blockColor(const SimEvent& e, int microBatches)
{
    if (e.stream == Stream::Send)
        return palette::send;
    if (e.stream == Stream::CopyToHost || e.stream == Stream::CopyFromHost)
        return palette::swap;
    const int mb = e.microBatch.valid() ? static_cast<int>(e.microBatch.value) : 0;
    const int hue = (mb * 360 / std::max(1, microBatches) + 200) % 360;
    switch (e.action) {
    case ActionType::Forward:
        return QColor::fromHsv(hue, 90, 240);
    case ActionType::BackwardWeight:
        return QColor::fromHsv(hue, 255, 150);
    case ActionType::Recompute:
        return palette::recompute;
    case ActionType::OptimizerStep:
        return palette::optimizer;
    default:
        return QColor::fromHsv(hue, 200, 200);
    }
}

// Lane offset within a device's row: compute in the middle, sends and copies in thin strips.
inline std::pair<double, double> laneOf(Stream s)
{
    switch (s) {
    case Stream::Compute:
        return { -0.3, 0.3 };
    case Stream::Send:
        return { 0.32, 0.42 };
    default:
        return { -0.42, -0.32 };
    }
}

} // namespace ps::gui
