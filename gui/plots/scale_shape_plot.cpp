#include "plots/scale_shape_plot.h"

#include "plots/plot_frame.h"
#include "plots/plot_style.h"
#include "plots/plot_units.h"

#include <qcustomplot.h>

#include <algorithm>

namespace ps::gui {

ScaleShapePlot::ScaleShapePlot(QWidget* parent)
    : QWidget(parent)
    , m_plot(new QCustomPlot(this))
{
    plotframe::embed(this, m_plot);
    m_plot->xAxis->setLabel(tr("tensor x pipeline x data parallel sizes"));
    m_plot->xAxis->setTickLabelRotation(60);
    m_plot->yAxis->setLabel(tr("TFLOP/s per GPU"));
    m_plot->yAxis2->setVisible(true);
    auto* fits = new QCPBars(m_plot->xAxis, m_plot->yAxis);
    fits->setName(tr("TFLOP/s per GPU, best that fits"));
    fits->setBrush(palette::throughput);
    fits->setPen(Qt::NoPen);
    auto* over = new QCPBars(m_plot->xAxis, m_plot->yAxis);
    over->setName(tr("none fits: TFLOP/s of the least memory's"));
    over->setBrush(Qt::NoBrush);
    over->setPen(QPen(palette::throughput, 1, Qt::DashLine));
    auto* memory = m_plot->addGraph(m_plot->xAxis, m_plot->yAxis2);
    memory->setName(tr("memory per GPU"));
    memory->setLineStyle(QCPGraph::lsNone);
    memory->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, palette::memoryPerDevice, 7));
    auto* capacity = m_plot->addGraph(m_plot->xAxis, m_plot->yAxis2);
    capacity->setName(tr("GPU memory"));
    capacity->setPen(QPen(palette::capacity, 1, Qt::DashLine));
    // The legend in a row of its own under the axes: the bars fill the plot.
    plotframe::rowLegend(m_plot, 1, 2, plotframe::smallFont(this), m_plot->legend);
}

void ScaleShapePlot::setShapes(const std::vector<ScaleEstimate>& shapes, double capacityBytes)
{
    QVector<double> x;
    QVector<double> fitting;
    QVector<double> over;
    QVector<double> gib; // in `unit`
    QVector<QString> ticks;
    double maxBytes = 0;
    for (const auto& e : shapes)
        maxBytes = std::max(maxBytes, e.peakBytes);
    const auto unit = byteAxisUnit(maxBytes);
    m_plot->yAxis2->setLabel(tr("%1 per GPU").arg(unit.name));
    m_labels.clear();
    for (std::size_t i = 0; i < shapes.size(); ++i) {
        const auto& e = shapes[i];
        const auto label = QStringLiteral("t%1 p%2 d%3").arg(e.config.tensor).arg(e.config.pipeline).arg(e.config.data);
        m_labels.push_back(label);
        x.push_back(static_cast<double>(i));
        ticks.push_back(label);
        fitting.push_back(e.fits ? e.tflopsPerGpu : 0.0);
        over.push_back(e.fits ? 0.0 : e.tflopsPerGpu);
        gib.push_back(e.peakBytes / unit.scale);
    }
    auto* fits = qobject_cast<QCPBars*>(m_plot->plottable(0));
    auto* none = qobject_cast<QCPBars*>(m_plot->plottable(1));
    fits->setData(x, fitting);
    none->setData(x, over);
    m_plot->graph(0)->setData(x, gib);
    QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
    ticker->addTicks(x, ticks);
    m_plot->xAxis->setTicker(ticker);
    m_plot->graph(1)->data()->clear();
    if (!x.isEmpty()) {
        const double capacity = capacityBytes / unit.scale;
        m_plot->graph(1)->setData({ -0.5, x.back() + 0.5 }, { capacity, capacity });
        m_plot->xAxis->setRange(-0.6, x.back() + 0.6);
        const auto tflops =
            std::max(*std::max_element(fitting.begin(), fitting.end()), *std::max_element(over.begin(), over.end()));
        m_plot->yAxis->setRange(0, std::max(1.0, tflops * 1.2));
        m_plot->yAxis2->setRange(0, axisTop(*std::max_element(gib.begin(), gib.end()), capacity, 1.15));
    }
    m_plot->replot();
}

} // namespace ps::gui
