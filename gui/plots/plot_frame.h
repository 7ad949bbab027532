// How every plot in gui/plots is framed (issue P20): the plot filling its widget, the small font
// of docked plots, legends inside an axis rect or in a row of their own, compact axes for narrow
// docks. Colours by meaning are plot_style.h's, axis units plot_units.h's.
// Depends on: QCustomPlot.
#pragma once

#include <QFont>
#include <Qt>

class QCPAxisRect;
class QCPLegend;
class QCustomPlot;
class QWidget;

namespace ps::gui::plotframe {

// `plot` fills `owner` edge to edge, at least `minimumHeight` high.
void embed(QWidget* owner, QCustomPlot* plot, int minimumHeight = 0);
// The font of docked plots' legends and compact axes: the owner's family at 8 pt.
[[nodiscard]] QFont smallFont(const QWidget* owner);
// A new, empty legend inside `rect` at `where`, in `font`, drawn on the legend layer.
QCPLegend* insetLegend(QCPAxisRect* rect, Qt::Alignment where, const QFont& font);
// A legend in a row of its own at (row, 0) of the plot's layout, its entries side by side,
// `perRow` to a row: `legend` (the plot's own, taken out of its axis rect) or, when null, a new one.
QCPLegend* rowLegend(QCustomPlot* plot, int row, int perRow, const QFont& font, QCPLegend* legend = nullptr);
// Narrow docks: `ticks` ticks at most on the bottom and left axes of `rect`, labels in `font`.
void compactAxes(QCPAxisRect* rect, const QFont& font, int ticks);

} // namespace ps::gui::plotframe
