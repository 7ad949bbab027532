#include "plots/plot_frame.h"

#include <QVBoxLayout>
#include <qcustomplot.h>

namespace ps::gui::plotframe {

void embed(QWidget* owner, QCustomPlot* plot, int minimumHeight)
{
    auto* layout = new QVBoxLayout(owner);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(plot);
    if (minimumHeight > 0)
        plot->setMinimumHeight(minimumHeight);
}

QFont smallFont(const QWidget* owner)
{
    return QFont(owner->font().family(), 8);
}

QCPLegend* insetLegend(QCPAxisRect* rect, Qt::Alignment where, const QFont& font)
{
    auto* legend = new QCPLegend;
    rect->insetLayout()->addElement(legend, where);
    legend->setLayer(QStringLiteral("legend"));
    legend->setFont(font);
    return legend;
}

QCPLegend* rowLegend(QCustomPlot* plot, int row, int perRow, const QFont& font, QCPLegend* legend)
{
    if (legend == nullptr) {
        legend = new QCPLegend;
        legend->setBorderPen(Qt::NoPen);
    } else {
        plot->axisRect()->insetLayout()->take(legend);
        plot->axisRect()->insetLayout()->simplify();
        legend->setVisible(true);
    }
    plot->plotLayout()->addElement(row, 0, legend);
    legend->setLayer(QStringLiteral("legend"));
    legend->setFont(font);
    legend->setWrap(perRow); // then the fill order re-lays the items out in rows of `perRow`
    legend->setFillOrder(QCPLegend::foColumnsFirst, true);
    plot->plotLayout()->setRowStretchFactor(row, 0.001);
    return legend;
}

void compactAxes(QCPAxisRect* rect, const QFont& font, int ticks)
{
    for (auto* axis : { rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft) }) {
        axis->ticker()->setTickCount(ticks);
        axis->setTickLabelFont(font);
        axis->setLabelFont(font);
    }
}

} // namespace ps::gui::plotframe
