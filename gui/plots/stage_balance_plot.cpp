#include "plots/stage_balance_plot.h"

#include "graph/graph_summary.h"
#include "models/stage_balance_model.h"
#include "plots/plot_frame.h"
#include "plots/plot_style.h"
#include "plots/plot_units.h"

#include <qcustomplot.h>

namespace ps::gui {

StageBalancePlot::StageBalancePlot(StageBalanceModel* model, QWidget* parent)
    : QWidget(parent)
    , m_model(model)
    , m_plot(new QCustomPlot(this))
{
    plotframe::embed(this, m_plot);
    m_plot->setAutoAddPlottableToLegend(false); // each axis rect has its own legend
    m_plot->plotLayout()->clear();
    m_compute = new QCPAxisRect(m_plot);
    m_memory = new QCPAxisRect(m_plot);
    m_plot->plotLayout()->addElement(0, 0, m_compute);
    m_plot->plotLayout()->addElement(0, 1, m_memory);
    m_compute->axis(QCPAxis::atLeft)->setLabel(tr("ms per micro-batch"));
    for (auto* rect : { m_compute, m_memory }) {
        rect->axis(QCPAxis::atBottom)->setLabel(tr("stage"));
        plotframe::insetLegend(rect, Qt::AlignTop | Qt::AlignRight, plotframe::smallFont(this)); // a narrow dock
    }
    connect(model, &QAbstractItemModel::modelReset, this, &StageBalancePlot::rebuild);
    rebuild();
}

void StageBalancePlot::addStack(
    QCPAxisRect* rect, const QList<int>& columns, const QStringList& names, const QList<QColor>& colors, double scale)
{
    auto* legend = qobject_cast<QCPLegend*>(rect->insetLayout()->elementAt(0));
    QCPBars* below = nullptr;
    for (int c = 0; c < columns.size(); ++c) {
        auto* bars = new QCPBars(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
        bars->setName(names[c]);
        bars->setBrush(colors[c]);
        bars->setPen(Qt::NoPen);
        bars->setWidth(0.6);
        for (int s = 0; s < m_model->rowCount(); ++s)
            bars->addData(s, m_model->value(s, static_cast<StageBalanceModel::Column>(columns[c])) / scale);
        if (below)
            bars->moveAbove(below);
        below = bars;
        if (legend)
            legend->addItem(new QCPPlottableLegendItem(legend, bars));
    }
}

void StageBalancePlot::rebuild()
{
    m_plot->clearPlottables();
    m_plot->clearItems();
    for (auto* rect : { m_compute, m_memory }) {
        if (auto* legend = qobject_cast<QCPLegend*>(rect->insetLayout()->elementAt(0)))
            legend->clearItems();
    }
    using M = StageBalanceModel;
    addStack(m_compute, { M::ForwardColumn, M::BackwardColumn, M::RecomputeColumn, M::SwapStallColumn },
        { tr("forward"), tr("backward"), tr("recompute"), tr("swap stall") },
        { palette::forward, palette::backward, palette::recompute, palette::swap }, 1.0);
    const int stages = m_model->rowCount();
    double maxTime = 0;
    double maxPeak = 0;
    double minCapacity = 0;
    for (int s = 0; s < stages; ++s) {
        maxTime = std::max(maxTime,
            m_model->value(s, M::ForwardColumn) + m_model->value(s, M::BackwardColumn)
                + m_model->value(s, M::RecomputeColumn) + m_model->value(s, M::SwapStallColumn));
        maxPeak = std::max(maxPeak, m_model->value(s, M::PeakColumn));
        const double capacity = m_model->value(s, M::CapacityColumn);
        minCapacity = s == 0 ? capacity : std::min(minCapacity, capacity);
    }
    // The memory axis in the unit of the stages' peaks; a capacity far above them stays off the
    // axis and is named in the legend instead.
    const auto unit = byteAxisUnit(maxPeak);
    m_memory->axis(QCPAxis::atLeft)->setLabel(tr("%1 at the peak").arg(unit.name));
    addStack(m_memory,
        { M::ParametersColumn, M::GradientsColumn, M::OptimizerColumn, M::ActivationsColumn, M::WorkspaceColumn },
        { tr("parameters"), tr("gradients"), tr("optimizer"), tr("activations"), tr("workspace") },
        { palette::parameters, palette::gradients, palette::optimizerStates, palette::activations, palette::workspace },
        unit.scale);
    const double memTop = axisTop(maxPeak, minCapacity) / unit.scale;
    double offAxis = 0; // the smallest capacity above the axis, named once in the legend
    for (int s = 0; s < stages; ++s) {
        if (!drawCapacity(s, unit.scale, memTop)) {
            const double capacity = m_model->value(s, M::CapacityColumn);
            offAxis = offAxis > 0 ? std::min(offAxis, capacity) : capacity;
        }
    }
    if (offAxis > 0) {
        auto* legend = qobject_cast<QCPLegend*>(m_memory->insetLayout()->elementAt(0));
        auto* line = new QCPGraph(m_memory->axis(QCPAxis::atBottom), m_memory->axis(QCPAxis::atLeft));
        line->setPen(QPen(palette::capacity, 2, Qt::DashLine));
        line->setName(tr("capacity %1 \u2191").arg(QString::fromStdString(formatBytes(offAxis)))); // above
        if (legend)
            legend->addItem(new QCPPlottableLegendItem(legend, line));
    }
    for (auto* rect : { m_compute, m_memory }) {
        rect->axis(QCPAxis::atBottom)->setRange(-0.6, std::max(1, stages) - 0.4);
        auto ticker = QSharedPointer<QCPAxisTickerFixed>::create();
        ticker->setTickStep(1);
        rect->axis(QCPAxis::atBottom)->setTicker(ticker);
    }
    m_compute->axis(QCPAxis::atLeft)->setRange(0, std::max(1e-9, maxTime) * 1.2);
    m_memory->axis(QCPAxis::atLeft)->setRange(0, memTop);
    m_memoryFill = maxPeak / unit.scale / memTop;
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

QString StageBalancePlot::memoryAxisLabel() const
{
    return m_memory->axis(QCPAxis::atLeft)->label();
}

bool StageBalancePlot::drawCapacity(int s, double scale, double top)
{
    using M = StageBalanceModel;
    auto* x = m_memory->axis(QCPAxis::atBottom);
    auto* y = m_memory->axis(QCPAxis::atLeft);
    const double capacity = m_model->value(s, M::CapacityColumn) / scale;
    if (capacity <= top) { // the device capacity over this stage's bar
        auto* cap = new QCPItemLine(m_plot);
        cap->start->setAxes(x, y);
        cap->end->setAxes(x, y);
        cap->setClipAxisRect(m_memory);
        cap->start->setCoords(s - 0.45, capacity);
        cap->end->setCoords(s + 0.45, capacity);
        cap->setPen(QPen(palette::capacity, 2, Qt::DashLine));
    }
    if (m_model->isOverCapacity(s)) { // and the overflow in red
        auto* label = new QCPItemText(m_plot);
        label->position->setAxes(x, y);
        label->setClipAxisRect(m_memory);
        label->position->setCoords(s, m_model->value(s, M::PeakColumn) / scale * 1.04);
        label->setColor(palette::capacity);
        label->setText(tr("+%1 over").arg(QString::fromStdString(formatBytes(m_model->value(s, M::OverColumn)))));
    }
    return capacity <= top;
}

} // namespace ps::gui
