#include "plots/scale_out_plot.h"

#include "plots/plot_frame.h"
#include "plots/plot_style.h"
#include "plots/plot_units.h"

#include <qcustomplot.h>

#include <algorithm>

namespace ps::gui {

ScaleOutPlot::ScaleOutPlot(QWidget* parent)
    : QWidget(parent)
    , m_plot(new QCustomPlot(this))
{
    plotframe::embed(this, m_plot);
    m_plot->xAxis->setLabel(tr("GPUs"));
    m_plot->xAxis->setScaleType(QCPAxis::stLogarithmic);
    QSharedPointer<QCPAxisTickerLog> ticker(new QCPAxisTickerLog);
    ticker->setLogBase(2);
    m_plot->xAxis->setTicker(ticker);
    m_plot->yAxis->setLabel(tr("TFLOP/s per GPU (Eq. 3)"));
    m_plot->yAxis2->setVisible(true);
    auto* tflops = m_plot->addGraph(m_plot->xAxis, m_plot->yAxis);
    tflops->setName(tr("TFLOP/s per GPU"));
    tflops->setPen(QPen(palette::throughput, 2));
    tflops->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 6));
    auto* memory = m_plot->addGraph(m_plot->xAxis, m_plot->yAxis2);
    memory->setName(tr("memory per GPU"));
    memory->setPen(QPen(palette::memoryPerDevice, 2, Qt::DashLine));
    memory->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssSquare, 6));
    m_plot->legend->setVisible(true);
    m_plot->legend->setFont(plotframe::smallFont(this));
    m_plot->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignBottom | Qt::AlignRight);
}

void ScaleOutPlot::setCurve(const std::vector<ScaleOutPoint>& curve)
{
    QVector<double> x;
    QVector<double> tflops;
    QVector<double> memory;
    double maxBytes = 0;
    for (const auto& p : curve)
        maxBytes = std::max(maxBytes, p.best.peakBytes);
    const auto unit = byteAxisUnit(maxBytes);
    for (const auto& p : curve) {
        x.push_back(p.gpus);
        tflops.push_back(p.best.tflopsPerGpu);
        memory.push_back(p.best.peakBytes / unit.scale);
    }
    m_plot->yAxis2->setLabel(tr("%1 per GPU").arg(unit.name));
    m_plot->graph(0)->setData(x, tflops);
    m_plot->graph(1)->setData(x, memory);
    if (!x.isEmpty()) {
        m_plot->xAxis->setRange(x.front() / 1.5, x.back() * 1.5);
        m_plot->yAxis->setRange(0, *std::max_element(tflops.begin(), tflops.end()) * 1.15);
        m_plot->yAxis2->setRange(0, *std::max_element(memory.begin(), memory.end()) * 1.15);
    }
    m_plot->replot();
}

} // namespace ps::gui
