#include "plots/compare_timeline_plot.h"

#include "plots/event_style.h"
#include "plots/plot_frame.h"
#include "runtime/run_comparison.h"

#include <qcustomplot.h>

namespace ps::gui {

CompareTimelinePlot::CompareTimelinePlot(QWidget* parent)
    : QWidget(parent)
    , m_plot(new QCustomPlot(this))
{
    plotframe::embed(this, m_plot, 140);
    m_plot->xAxis->setLabel(tr("time from the iteration's first action (ms)"));
    m_plot->yAxis->setRangeReversed(true);
    m_plot->axisRect()->setRangeDrag(Qt::Horizontal);
    m_plot->axisRect()->setRangeZoom(Qt::Horizontal);
    m_plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
}

void CompareTimelinePlot::clear()
{
    m_plot->clearItems();
    m_predictedBlocks = m_measuredBlocks = 0;
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

int CompareTimelinePlot::drawRow(const std::vector<SimEvent>& events, int microBatches, int row0, int rowsPerDevice)
{
    int blocks = 0;
    for (const auto& e : events) {
        if (e.endNs <= e.startNs)
            continue;
        const double row = row0 + static_cast<double>(e.device.value) * rowsPerDevice;
        const auto [top, bottom] = laneOf(e.stream);
        auto* block = new QCPItemRect(m_plot);
        block->topLeft->setCoords(e.startNs / 1e6, row + top);
        block->bottomRight->setCoords(e.endNs / 1e6, row + bottom);
        block->setBrush(blockColor(e, microBatches));
        block->setPen(QPen(QColor(255, 255, 255), 0.5));
        ++blocks;
    }
    return blocks;
}

void CompareTimelinePlot::setComparison(const RunComparison& c)
{
    m_plot->clearItems();
    const int devices = static_cast<int>(c.predicted.devices.size());
    const int mbs = c.predicted.microBatches;
    m_predictedBlocks = drawRow(c.predicted.events, mbs, 0, 2);
    m_measuredBlocks = drawRow(c.measured, mbs, 1, 2);
    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    for (int d = 0; d < devices; ++d) {
        const auto name = d < static_cast<int>(c.deviceNames.size())
            ? QString::fromStdString(c.deviceNames[static_cast<std::size_t>(d)])
            : QStringLiteral("device %1").arg(d);
        ticker->addTick(2 * d, tr("%1 predicted").arg(name));
        ticker->addTick(2 * d + 1, tr("%1 measured").arg(name));
    }
    m_plot->yAxis->setTicker(ticker);
    m_plot->yAxis->setRange(-0.6, 2 * devices - 0.4);
    const double end = std::max(c.predicted.iterationNs, c.measuredIterationNs) / 1e6;
    m_plot->xAxis->setRange(0, std::max(1e-6, end) * 1.02);
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

} // namespace ps::gui
