// Bar chart of how many nodes of each op type the model has (from core's GraphSummary).
// QCustomPlot stays inside gui/plots/*.cpp.
#pragma once

#include <QWidget>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

class QCustomPlot;

namespace ps::gui {

class OpHistogramPlot : public QWidget
{
    Q_OBJECT
public:
    explicit OpHistogramPlot(QWidget* parent = nullptr);

    void setHistogram(const std::vector<std::pair<std::string, std::int64_t>>& histogram);
    [[nodiscard]] int barCount() const
    {
        return m_barCount;
    }

protected:
    void changeEvent(QEvent* event) override;

private:
    void applyPalette();

    QCustomPlot* m_plot;
    int m_barCount = 0;
};

} // namespace ps::gui
