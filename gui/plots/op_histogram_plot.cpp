#include "plots/op_histogram_plot.h"

#include "plots/plot_frame.h"
#include "plots/plot_style.h"

#include <qcustomplot.h>

namespace ps::gui {

OpHistogramPlot::OpHistogramPlot(QWidget* parent)
    : QWidget(parent)
    , m_plot(new QCustomPlot(this))
{
    plotframe::embed(this, m_plot, 220);
    m_plot->yAxis->setLabel(tr("nodes"));
    m_plot->xAxis->setTickLabelRotation(60);
    m_plot->xAxis->grid()->setVisible(false);
    applyPalette();
}

void OpHistogramPlot::setHistogram(const std::vector<std::pair<std::string, std::int64_t>>& histogram)
{
    m_plot->clearPlottables();
    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    QVector<double> keys;
    QVector<double> values;
    double maxValue = 1;
    for (std::size_t i = 0; i < histogram.size(); ++i) {
        keys << static_cast<double>(i + 1);
        values << static_cast<double>(histogram[i].second);
        ticker->addTick(static_cast<double>(i + 1), QString::fromStdString(histogram[i].first));
        maxValue = std::max(maxValue, static_cast<double>(histogram[i].second));
    }
    m_plot->xAxis->setTicker(ticker);
    auto* bars = new QCPBars(m_plot->xAxis, m_plot->yAxis);
    bars->setData(keys, values, true);
    bars->setWidth(0.7);
    bars->setPen(Qt::NoPen);
    bars->setBrush(palette::forward);
    m_plot->xAxis->setRange(0.3, static_cast<double>(histogram.size()) + 0.7);
    m_plot->yAxis->setRange(0, maxValue * 1.1);
    m_barCount = static_cast<int>(histogram.size());
    m_plot->replot(QCustomPlot::rpQueuedRefresh);
}

void OpHistogramPlot::changeEvent(QEvent* event)
{
    QWidget::changeEvent(event);
    if (event->type() == QEvent::PaletteChange)
        applyPalette();
}

void OpHistogramPlot::applyPalette()
{
    const auto pal = palette();
    m_plot->setBackground(pal.color(QPalette::Base));
    for (auto* axis : { m_plot->xAxis, m_plot->yAxis }) {
        axis->setBasePen(QPen(pal.color(QPalette::Text)));
        axis->setTickPen(QPen(pal.color(QPalette::Text)));
        axis->setTickLabelColor(pal.color(QPalette::Text));
        axis->setLabelColor(pal.color(QPalette::Text));
    }
    m_plot->replot(QCustomPlot::rpQueuedRefresh);
}

} // namespace ps::gui
