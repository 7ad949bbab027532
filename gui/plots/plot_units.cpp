#include "plots/plot_units.h"

#include <algorithm>
#include <array>

namespace ps::gui {

AxisUnit byteAxisUnit(double maxBytes)
{
    static const std::array<const char*, 5> kNames { "B", "KiB", "MiB", "GiB", "TiB" };
    double scale = 1;
    std::size_t i = 0;
    while (i + 1 < kNames.size() && maxBytes >= scale * 1024) {
        scale *= 1024;
        ++i;
    }
    return { scale, QString::fromLatin1(kNames[i]) };
}

AxisUnit timeAxisUnit(double maxMs)
{
    if (maxMs >= 1000)
        return { 1000, QStringLiteral("s") };
    if (maxMs > 0 && maxMs < 1)
        return { 1e-3, QStringLiteral("\u00b5s") };
    return { 1, QStringLiteral("ms") };
}

double axisTop(double dataMax, double reference, double headroom, double reach)
{
    const double data = std::max(dataMax, 0.0);
    const double top = reference > 0 && (data <= 0 || reference <= data * reach) ? std::max(data, reference) : data;
    return std::max(1e-12, top) * headroom;
}

} // namespace ps::gui
