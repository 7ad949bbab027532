// The summary panel: whole-model figures and the op histogram.
#pragma once

#include <QWidget>

class QTableView;

namespace ps::gui {

class OpHistogramPlot;
class SummaryModel;

class SummaryPanel : public QWidget
{
    Q_OBJECT
public:
    SummaryPanel(SummaryModel* model, QWidget* parent = nullptr);

    [[nodiscard]] OpHistogramPlot* histogram() const
    {
        return m_histogram;
    }

private:
    void refreshHistogram();

    SummaryModel* m_model;
    QTableView* m_table;
    OpHistogramPlot* m_histogram;
};

} // namespace ps::gui
