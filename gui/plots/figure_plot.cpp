#include "plots/figure_plot.h"

#include "plots/plot_frame.h"

#include <qcustomplot.h>

#include <cmath>

namespace ps::gui {
namespace {

    QColor seriesColor(std::size_t i)
    {
        static const QColor colors[] = { QColor(0x1f, 0x77, 0xb4), QColor(0xae, 0xc7, 0xe8), QColor(0xd6, 0x27, 0x28),
            QColor(0xff, 0x98, 0x96), QColor(0x2c, 0xa0, 0x2c), QColor(0x98, 0xdf, 0x8a), QColor(0x94, 0x67, 0xbd),
            QColor(0xc5, 0xb0, 0xd5), QColor(0x8c, 0x56, 0x4b), QColor(0xc4, 0x9c, 0x94) };
        return colors[i % std::size(colors)];
    }

    double largest(const ReportFigure& figure)
    {
        double top = 0;
        for (const auto& s : figure.series) {
            for (double v : s.values) {
                if (std::isfinite(v))
                    top = std::max(top, v);
            }
        }
        return top > 0 ? top : 1;
    }

    void addBars(QCustomPlot& plot, const ReportFigure& figure)
    {
        auto ticker = QSharedPointer<QCPAxisTickerText>::create();
        for (std::size_t c = 0; c < figure.categories.size(); ++c)
            ticker->addTick(static_cast<double>(c + 1), QString::fromStdString(figure.categories[c]));
        plot.xAxis->setTicker(ticker);
        auto* group = new QCPBarsGroup(&plot);
        const double width = 0.8 / static_cast<double>(std::max<std::size_t>(1, figure.series.size()));
        for (std::size_t s = 0; s < figure.series.size(); ++s) {
            auto* bars = new QCPBars(plot.xAxis, plot.yAxis);
            bars->setName(QString::fromStdString(figure.series[s].name));
            QVector<double> keys;
            QVector<double> values;
            for (std::size_t c = 0; c < figure.series[s].values.size(); ++c) {
                const double v = figure.series[s].values[c];
                keys << static_cast<double>(c + 1);
                values << (std::isfinite(v) ? v : 0.0);
            }
            bars->setData(keys, values, true);
            bars->setWidth(width);
            bars->setPen(Qt::NoPen);
            bars->setBrush(seriesColor(s));
            bars->setBarsGroup(group);
        }
        plot.xAxis->setRange(0.4, static_cast<double>(figure.categories.size()) + 0.6);
    }

    void addLines(QCustomPlot& plot, const ReportFigure& figure)
    {
        double lo = 0;
        double hi = 1;
        if (!figure.x.empty()) {
            lo = *std::min_element(figure.x.begin(), figure.x.end());
            hi = *std::max_element(figure.x.begin(), figure.x.end());
        }
        for (std::size_t s = 0; s < figure.series.size(); ++s) {
            auto* graph = plot.addGraph();
            graph->setName(QString::fromStdString(figure.series[s].name));
            graph->setPen(QPen(seriesColor(2 * s), 2));
            graph->setScatterStyle(figure.x.size() <= 12 ? QCPScatterStyle(QCPScatterStyle::ssCircle, 6)
                                                         : QCPScatterStyle(QCPScatterStyle::ssNone));
            QVector<double> keys;
            QVector<double> values;
            for (std::size_t i = 0; i < figure.x.size() && i < figure.series[s].values.size(); ++i) {
                keys << figure.x[i];
                values << figure.series[s].values[i];
            }
            graph->setData(keys, values, true);
        }
        plot.xAxis->setRange(lo - 0.5, hi + 0.5);
    }

} // namespace

bool saveFigurePng(const ReportFigure& figure, const QString& path, int width, int height)
{
    QCustomPlot plot;
    plot.resize(width, height);
    plot.setBackground(Qt::white);
    plot.plotLayout()->insertRow(0);
    plot.plotLayout()->addElement(0, 0, new QCPTextElement(&plot, QString::fromStdString(figure.title)));
    plot.xAxis->setLabel(QString::fromStdString(figure.xLabel));
    plot.yAxis->setLabel(QString::fromStdString(figure.yLabel));
    // Below the axes, in columns, so it never covers a bar or a line: placed before the series
    // fill it (placed after them, it came out as an empty frame below the image's edge).
    plotframe::rowLegend(&plot, 2, 3, plotframe::smallFont(&plot), plot.legend);
    if (figure.x.empty()) {
        addBars(plot, figure);
        // Category names wider than their share of the axis are slanted rather than overlapped.
        const QFontMetrics metrics(plot.xAxis->tickLabelFont());
        int widest = 0;
        for (const auto& c : figure.categories)
            widest = std::max(widest, metrics.horizontalAdvance(QString::fromStdString(c)));
        const auto share =
            static_cast<double>(width) * 0.85 / static_cast<double>(std::max<std::size_t>(1, figure.categories.size()));
        if (widest > share)
            plot.xAxis->setTickLabelRotation(-30); // each ends at its tick: none past the right edge
    } else
        addLines(plot, figure);
    plot.yAxis->setRange(0, largest(figure) * 1.15);
    return plot.savePng(path, width, height);
}

} // namespace ps::gui
