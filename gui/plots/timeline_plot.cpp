#include "plots/timeline_plot.h"

#include "models/plan_session.h"
#include "plots/event_style.h"
#include "plots/plot_frame.h"
#include "plots/plot_units.h"

#include <QToolTip>
#include <qcustomplot.h>

namespace ps::gui {

TimelinePlot::TimelinePlot(PlanSession* session, QWidget* parent)
    : QWidget(parent)
    , m_session(session)
    , m_plot(new QCustomPlot(this))
{
    plotframe::embed(this, m_plot, 260);
    m_plot->setAutoAddPlottableToLegend(false);
    m_plot->plotLayout()->clear();
    m_gantt = new QCPAxisRect(m_plot);
    m_memory = new QCPAxisRect(m_plot);
    m_plot->plotLayout()->addElement(0, 0, m_gantt);
    m_plot->plotLayout()->addElement(1, 0, m_memory);
    // The shades' legend in a row of its own under the memory strip, its entries side by side.
    m_legend = plotframe::rowLegend(m_plot, 2, 8, plotframe::smallFont(this));
    m_plot->plotLayout()->setRowStretchFactor(0, 2);
    m_plot->plotLayout()->setRowStretchFactor(1, 1);
    m_gantt->axis(QCPAxis::atLeft)->setLabel(tr("device"));
    m_gantt->axis(QCPAxis::atLeft)->setRangeReversed(true);
    // Zoom and pan in time; both rows follow.
    for (auto* rect : { m_gantt, m_memory }) {
        rect->setRangeDrag(Qt::Horizontal);
        rect->setRangeZoom(Qt::Horizontal);
    }
    connect(m_gantt->axis(QCPAxis::atBottom), qOverload<const QCPRange&>(&QCPAxis::rangeChanged),
        m_memory->axis(QCPAxis::atBottom), qOverload<const QCPRange&>(&QCPAxis::setRange));
    connect(m_memory->axis(QCPAxis::atBottom), qOverload<const QCPRange&>(&QCPAxis::rangeChanged),
        m_gantt->axis(QCPAxis::atBottom), qOverload<const QCPRange&>(&QCPAxis::setRange));
    m_plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    connect(session, &PlanSession::planChanged, this, &TimelinePlot::rebuild);
    connect(m_plot, &QCustomPlot::mouseMove, this, &TimelinePlot::onMove);
    rebuild();
}

void TimelinePlot::rebuild()
{
    m_legend->clearItems(); // before the swatches it shows go
    m_plot->clearPlottables();
    m_plot->clearItems();
    m_blocks = 0;
    if (m_session->hasPlan()) {
        const auto unit = timeAxisUnit(m_session->snapshot().simulation.iterationNs / 1e6);
        m_nsPerUnit = unit.scale * 1e6;
        m_memory->axis(QCPAxis::atBottom)->setLabel(tr("time (%1)").arg(unit.name));
        drawEvents();
        drawMemory();
        drawLegend();
    }
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void TimelinePlot::drawEvents()
{
    const auto& sim = m_session->snapshot().simulation;
    auto* x = m_gantt->axis(QCPAxis::atBottom);
    auto* y = m_gantt->axis(QCPAxis::atLeft);
    for (const auto& e : sim.events) {
        if (e.endNs <= e.startNs)
            continue;
        const auto [top, bottom] = laneOf(e.stream);
        auto* block = new QCPItemRect(m_plot);
        block->setClipAxisRect(m_gantt);
        block->topLeft->setAxes(x, y);
        block->bottomRight->setAxes(x, y);
        block->topLeft->setCoords(e.startNs / m_nsPerUnit, e.device.value + top);
        block->bottomRight->setCoords(e.endNs / m_nsPerUnit, e.device.value + bottom);
        block->setBrush(blockColor(e, sim.microBatches));
        block->setPen(QPen(QColor(255, 255, 255), 0.5));
        ++m_blocks;
    }
    auto ticker = QSharedPointer<QCPAxisTickerFixed>::create();
    ticker->setTickStep(1);
    y->setTicker(ticker);
    y->setRange(-0.6, static_cast<double>(sim.devices.size()) - 0.4);
    x->setRange(0, sim.iterationNs / m_nsPerUnit * 1.02);
}

void TimelinePlot::drawMemory()
{
    const auto& sim = m_session->snapshot().simulation;
    double top = 0;
    double capacity = 0;
    for (const auto& device : sim.devices) {
        for (const auto& p : device.memoryCurve)
            top = std::max(top, p.bytes);
        capacity = capacity > 0 && device.capacityBytes > 0 ? std::min(capacity, device.capacityBytes)
                                                            : std::max(capacity, device.capacityBytes);
    }
    // In the unit of the curves; the capacity is on the axis only where it is near them.
    const auto unit = byteAxisUnit(top);
    const double axisEnd = axisTop(top, capacity, 1.1);
    m_memory->axis(QCPAxis::atLeft)->setLabel(unit.name);
    auto* x = m_memory->axis(QCPAxis::atBottom);
    auto* y = m_memory->axis(QCPAxis::atLeft);
    for (std::size_t d = 0; d < sim.devices.size(); ++d) {
        const auto color =
            QColor::fromHsv(static_cast<int>(d * 360 / std::max<std::size_t>(1, sim.devices.size())), 200, 180);
        auto* g = m_plot->addGraph(x, y);
        g->setLineStyle(QCPGraph::lsStepLeft);
        g->setPen(QPen(color, 1.5));
        g->setName(tr("device %1").arg(d));
        for (const auto& p : sim.devices[d].memoryCurve)
            g->addData(p.timeNs / m_nsPerUnit, p.bytes / unit.scale);
        if (!sim.devices[d].memoryCurve.empty())
            g->addData(sim.iterationNs / m_nsPerUnit, sim.devices[d].memoryCurve.back().bytes / unit.scale);
        if (sim.devices[d].capacityBytes > 0 && sim.devices[d].capacityBytes <= axisEnd) {
            auto* line = new QCPItemStraightLine(m_plot);
            line->setClipAxisRect(m_memory);
            line->point1->setAxes(x, y);
            line->point2->setAxes(x, y);
            line->point1->setCoords(0, sim.devices[d].capacityBytes / unit.scale);
            line->point2->setCoords(1, sim.devices[d].capacityBytes / unit.scale);
            line->setPen(QPen(color, 1, Qt::DashLine));
        }
    }
    y->setRange(0, axisEnd / unit.scale);
    m_memoryFill = top / axisEnd;
}

QString TimelinePlot::memoryAxisLabel() const
{
    return m_memory->axis(QCPAxis::atLeft)->label();
}

QString TimelinePlot::timeAxisLabel() const
{
    return m_memory->axis(QCPAxis::atBottom)->label();
}

int TimelinePlot::legendEntries() const
{
    return m_legend->itemCount();
}

void TimelinePlot::drawLegend()
{
    // Micro-batch 0's shades (later micro-batches turn the hue).
    const auto& sim = m_session->snapshot().simulation;
    const auto entry = [&](const QString& name, ActionType action, Stream stream) {
        SimEvent e;
        e.action = action;
        e.stream = stream;
        e.microBatch = MicroBatchId(0);
        auto* swatch = new QCPBars(m_gantt->axis(QCPAxis::atBottom), m_gantt->axis(QCPAxis::atLeft));
        swatch->setName(name);
        swatch->setBrush(blockColor(e, sim.microBatches));
        swatch->setPen(Qt::NoPen);
        m_legend->addItem(new QCPPlottableLegendItem(m_legend, swatch));
    };
    entry(tr("forward (hue: micro-batch)"), ActionType::Forward, Stream::Compute);
    entry(tr("backward"), ActionType::Backward, Stream::Compute);
    entry(tr("weight gradients (W)"), ActionType::BackwardWeight, Stream::Compute);
    entry(tr("recompute"), ActionType::Recompute, Stream::Compute);
    entry(tr("optimizer"), ActionType::OptimizerStep, Stream::Compute);
    entry(tr("swap copy"), ActionType::Forward, Stream::CopyToHost);
    entry(tr("send"), ActionType::Forward, Stream::Send);
}

void TimelinePlot::onMove(QMouseEvent* event)
{
    if (!m_session->hasPlan() || !m_gantt->rect().contains(event->pos()))
        return;
    const double t = m_gantt->axis(QCPAxis::atBottom)->pixelToCoord(event->position().x()) * m_nsPerUnit;
    const double row = m_gantt->axis(QCPAxis::atLeft)->pixelToCoord(event->position().y());
    const auto device = static_cast<std::uint32_t>(std::lround(row));
    for (const auto& e : m_session->snapshot().simulation.events) {
        if (e.device.value == device && e.stream == Stream::Compute && e.startNs <= t && t <= e.endNs) {
            QToolTip::showText(event->globalPosition().toPoint(),
                tr("%1 on device %2: %3 - %4 ms (%5 ms)")
                    .arg(QString::fromStdString(formatAction({ e.action, e.stage, e.microBatch })))
                    .arg(device)
                    .arg(e.startNs / 1e6, 0, 'f', 3)
                    .arg(e.endNs / 1e6, 0, 'f', 3)
                    .arg((e.endNs - e.startNs) / 1e6, 0, 'f', 3),
                m_plot);
            return;
        }
    }
    QToolTip::hideText();
}

} // namespace ps::gui
