#include "plots/run_monitor_plot.h"

#include "models/run_monitor_model.h"
#include "plots/plot_frame.h"
#include "plots/plot_style.h"
#include "plots/plot_units.h"

#include <qcustomplot.h>

namespace ps::gui {
namespace {

    const QColor kMeasured = palette::measured;
    const QColor kPredicted = palette::predicted;

    QSharedPointer<QCPAxisTickerText> deviceTicker(const RunMonitorModel& model, int devices)
    {
        auto ticker = QSharedPointer<QCPAxisTickerText>::create();
        for (int d = 0; d < devices; ++d)
            ticker->addTick(d, model.deviceName(d));
        return ticker;
    }

    // `headroom` above the largest value: more where a legend sits in the top right corner.
    void fitY(QCPAxis* axis, double top, double headroom = 1.15)
    {
        axis->setRange(0, top > 0 ? top * headroom : 1);
    }

    constexpr double kLegendHeadroom = 1.6;

} // namespace

RunMonitorPlot::RunMonitorPlot(RunMonitorModel* model, QWidget* parent)
    : QWidget(parent)
    , m_model(model)
    , m_plot(new QCustomPlot(this))
{
    plotframe::embed(this, m_plot, 160);
    m_plot->setAutoAddPlottableToLegend(false);
    // One row: the dock is wide and short at the bottom of the window.
    auto* grid = m_plot->plotLayout();
    grid->clear();
    const auto rect = [this, grid](int column, const QString& x, const QString& y) {
        auto* r = new QCPAxisRect(m_plot);
        grid->addElement(0, column, r);
        r->axis(QCPAxis::atBottom)->setLabel(x);
        r->axis(QCPAxis::atLeft)->setLabel(y);
        plotframe::compactAxes(r, plotframe::smallFont(this), 4);
        return r;
    };
    m_loss = rect(0, tr("step"), tr("loss (measured)"));
    m_tokens = rect(1, tr("step"), tr("tokens/s (measured)"));
    m_time = rect(2, tr("step"), tr("step time (ms)"));
    m_memory = rect(3, tr("device"), tr("peak memory"));
    m_busy = rect(4, tr("device"), tr("busy (%, measured)"));
    grid->setColumnStretchFactor(3, 1.3);
    grid->setColumnStretchFactor(4, 0.7);

    const auto graph = [this](QCPAxisRect* r, const QColor& color) {
        auto* g = m_plot->addGraph(r->axis(QCPAxis::atBottom), r->axis(QCPAxis::atLeft));
        g->setPen(QPen(color, 1.5));
        return g;
    };
    m_lossGraph = graph(m_loss, kMeasured);
    m_tokensGraph = graph(m_tokens, kMeasured);
    m_measuredTime = graph(m_time, kMeasured);
    m_measuredTime->setLineStyle(QCPGraph::lsNone);
    m_measuredTime->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 4));
    m_measuredTime->setName(tr("measured"));
    m_predictedTime = graph(m_time, kPredicted);
    m_predictedTime->setPen(QPen(kPredicted, 1.5, Qt::DashLine));
    m_predictedTime->setName(tr("predicted (simulated)"));
    auto* timeLegend = plotframe::insetLegend(m_time, Qt::AlignTop | Qt::AlignRight, plotframe::smallFont(this));
    timeLegend->addItem(new QCPPlottableLegendItem(timeLegend, m_measuredTime));
    timeLegend->addItem(new QCPPlottableLegendItem(timeLegend, m_predictedTime));

    m_predictedPeak = new QCPBars(m_memory->axis(QCPAxis::atBottom), m_memory->axis(QCPAxis::atLeft));
    m_predictedPeak->setName(tr("predicted (simulated)"));
    m_predictedPeak->setBrush(kPredicted.lighter(130));
    m_predictedPeak->setPen(QPen(kPredicted));
    m_measuredPeak = new QCPBars(m_memory->axis(QCPAxis::atBottom), m_memory->axis(QCPAxis::atLeft));
    m_measuredPeak->setName(tr("measured"));
    m_measuredPeak->setBrush(kMeasured.lighter(130));
    m_measuredPeak->setPen(QPen(kMeasured));
    auto* group = new QCPBarsGroup(m_plot);
    m_predictedPeak->setBarsGroup(group);
    m_measuredPeak->setBarsGroup(group);
    for (auto* bars : { m_predictedPeak, m_measuredPeak })
        bars->setWidth(0.35);
    auto* memLegend = plotframe::insetLegend(m_memory, Qt::AlignTop | Qt::AlignRight, plotframe::smallFont(this));
    memLegend->addItem(new QCPPlottableLegendItem(memLegend, m_predictedPeak));
    memLegend->addItem(new QCPPlottableLegendItem(memLegend, m_measuredPeak));
    m_busyBars = new QCPBars(m_busy->axis(QCPAxis::atBottom), m_busy->axis(QCPAxis::atLeft));
    m_busyBars->setBrush(kMeasured.lighter(130));
    m_busyBars->setPen(QPen(kMeasured));
    m_busyBars->setWidth(0.5);
    connect(model, &RunMonitorModel::changed, this, &RunMonitorPlot::rebuild);
    rebuild();
}

int RunMonitorPlot::lossPointCount() const
{
    return m_lossGraph->dataCount();
}

double RunMonitorPlot::predictedLineMs() const
{
    return m_predictedTime->dataCount() > 0 ? m_predictedTime->data()->constBegin()->value : 0;
}

void RunMonitorPlot::rebuild()
{
    drawSteps();
    drawDevices();
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void RunMonitorPlot::drawSteps()
{
    QVector<double> step;
    QVector<double> loss;
    QVector<double> tokens;
    QVector<double> ms;
    double topMs = m_model->predictedIterationMs();
    for (const auto& s : m_model->steps()) {
        step << static_cast<double>(s.step);
        loss << s.loss;
        tokens << s.tokensPerSecond;
        ms << s.stepMs;
    }
    m_lossGraph->setData(step, loss, true);
    m_tokensGraph->setData(step, tokens, true);
    m_measuredTime->setData(step, ms, true);
    // Axis ranges: the first step (allocation, cold caches) may be far slower; keep it visible.
    for (double v : ms)
        topMs = std::max(topMs, v);
    const double first = step.isEmpty() ? 0 : step.front();
    const double last = step.isEmpty() ? 1 : std::max(step.back(), first + 1);
    // The whole run when it is short; else the steps so far with a little room to grow.
    const double total = first + static_cast<double>(m_model->totalSteps());
    const double end = std::max(last, std::min(total, std::max(first + 10, first + (last - first) * 1.1)));
    m_predictedTime->data()->clear();
    if (m_model->predictedIterationMs() > 0)
        m_predictedTime->setData({ first, end }, { m_model->predictedIterationMs(), m_model->predictedIterationMs() });
    for (auto* r : { m_loss, m_tokens, m_time })
        r->axis(QCPAxis::atBottom)->setRange(first, end);
    bool found = false;
    const auto lossRange = m_lossGraph->getValueRange(found);
    m_loss->axis(QCPAxis::atLeft)->setRange(found ? lossRange.lower * 0.95 : 0, found ? lossRange.upper * 1.05 : 1);
    const auto tokRange = m_tokensGraph->getValueRange(found);
    fitY(m_tokens->axis(QCPAxis::atLeft), found ? tokRange.upper : 0);
    fitY(m_time->axis(QCPAxis::atLeft), topMs, kLegendHeadroom);
}

void RunMonitorPlot::drawDevices()
{
    const int devices = std::max(m_model->deviceCount(), static_cast<int>(m_model->predictedPeakBytes().size()));
    QVector<double> keys;
    QVector<double> predicted;
    QVector<double> measured;
    QVector<double> busy;
    double top = 0;
    for (int d = 0; d < devices; ++d) {
        keys << d;
        const auto& p = m_model->predictedPeakBytes();
        predicted << (d < static_cast<int>(p.size()) ? p[static_cast<std::size_t>(d)] : 0);
        measured << static_cast<double>(m_model->measuredPeakBytes(d));
        busy << 100 * m_model->busyShare(d);
        top = std::max({ top, predicted.back(), measured.back() });
    }
    const auto unit = byteAxisUnit(top); // in the unit of the largest peak
    for (auto* values : { &predicted, &measured }) {
        for (auto& v : *values)
            v /= unit.scale;
    }
    m_memory->axis(QCPAxis::atLeft)->setLabel(tr("peak memory (%1)").arg(unit.name));
    m_predictedPeak->setData(keys, predicted, true);
    m_measuredPeak->setData(keys, measured, true);
    m_busyBars->setData(keys, busy, true);
    for (auto* r : { m_memory, m_busy }) {
        r->axis(QCPAxis::atBottom)->setTicker(deviceTicker(*m_model, devices));
        r->axis(QCPAxis::atBottom)->setRange(-0.6, std::max(1, devices) - 0.4);
    }
    fitY(m_memory->axis(QCPAxis::atLeft), top / unit.scale, kLegendHeadroom);
    m_busy->axis(QCPAxis::atLeft)->setRange(0, 105);
}

} // namespace ps::gui
