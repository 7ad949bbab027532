// qcustomplot.h uses Qt keywords and foreach; it must precede every Qt header (see op_histogram_plot.cpp).
#undef QT_NO_KEYWORDS
#undef QT_NO_FOREACH
#include "plots/timeline_plot.h"

#include "models/plan_session.h"
#include "plots/event_style.h"

#include <QToolTip>
#include <QVBoxLayout>
#include <qcustomplot.h>

namespace ps::gui {

TimelinePlot::TimelinePlot(PlanSession* session, QWidget* parent)
    : QWidget(parent)
    , m_session(session)
    , m_plot(new QCustomPlot(this))
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(m_plot);
    m_plot->setAutoAddPlottableToLegend(false);
    m_plot->setMinimumHeight(260);
    m_plot->plotLayout()->clear();
    m_gantt = new QCPAxisRect(m_plot);
    m_memory = new QCPAxisRect(m_plot);
    m_plot->plotLayout()->addElement(0, 0, m_gantt);
    m_plot->plotLayout()->addElement(1, 0, m_memory);
    m_plot->plotLayout()->setRowStretchFactor(0, 2);
    m_plot->plotLayout()->setRowStretchFactor(1, 1);
    m_gantt->axis(QCPAxis::atLeft)->setLabel(tr("device"));
    m_gantt->axis(QCPAxis::atLeft)->setRangeReversed(true);
    m_memory->axis(QCPAxis::atBottom)->setLabel(tr("time (ms)"));
    m_memory->axis(QCPAxis::atLeft)->setLabel(tr("GiB"));
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
    m_plot->clearPlottables();
    m_plot->clearItems();
    m_blocks = 0;
    if (m_session->hasPlan()) {
        drawEvents();
        drawMemory();
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
        block->topLeft->setCoords(e.startNs / 1e6, e.device.value + top);
        block->bottomRight->setCoords(e.endNs / 1e6, e.device.value + bottom);
        block->setBrush(blockColor(e, sim.microBatches));
        block->setPen(QPen(QColor(255, 255, 255), 0.5));
        ++m_blocks;
    }
    auto ticker = QSharedPointer<QCPAxisTickerFixed>::create();
    ticker->setTickStep(1);
    y->setTicker(ticker);
    y->setRange(-0.6, static_cast<double>(sim.devices.size()) - 0.4);
    x->setRange(0, sim.iterationNs / 1e6 * 1.02);
}

void TimelinePlot::drawMemory()
{
    const auto& sim = m_session->snapshot().simulation;
    double top = 0;
    for (std::size_t d = 0; d < sim.devices.size(); ++d) {
        auto* g = m_plot->addGraph(m_memory->axis(QCPAxis::atBottom), m_memory->axis(QCPAxis::atLeft));
        g->setLineStyle(QCPGraph::lsStepLeft);
        g->setPen(QPen(
            QColor::fromHsv(static_cast<int>(d * 360 / std::max<std::size_t>(1, sim.devices.size())), 200, 180), 1.5));
        g->setName(tr("device %1").arg(d));
        for (const auto& p : sim.devices[d].memoryCurve) {
            g->addData(p.timeNs / 1e6, p.bytes / (1024.0 * 1024 * 1024));
            top = std::max(top, p.bytes / (1024.0 * 1024 * 1024));
        }
        g->addData(sim.iterationNs / 1e6, sim.devices[d].memoryCurve.back().bytes / (1024.0 * 1024 * 1024));
        top = std::max(top, sim.devices[d].capacityBytes / (1024.0 * 1024 * 1024));
    }
    m_memory->axis(QCPAxis::atLeft)->setRange(0, std::max(1e-9, top) * 1.1);
}

void TimelinePlot::onMove(QMouseEvent* event)
{
    if (!m_session->hasPlan() || !m_gantt->rect().contains(event->pos()))
        return;
    const double t = m_gantt->axis(QCPAxis::atBottom)->pixelToCoord(event->position().x()) * 1e6;
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
