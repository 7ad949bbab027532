// A report figure (core/report/reproduction.h) drawn with QCustomPlot and saved as a PNG: grouped
// bars over categories, or lines over x. `pipestudio reproduce` renders its figures this way.
#pragma once

#include "report/reproduction.h"

#include <QString>

namespace ps::gui {

// Needs a QApplication. Returns false when the PNG cannot be written.
bool saveFigurePng(const ReportFigure& figure, const QString& path, int width = 900, int height = 520);

} // namespace ps::gui
