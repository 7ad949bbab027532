// The monitor's charts: loss, tokens/s and step time (measured points against the predicted
// iteration time as a dashed line) over the steps, per-device peak memory (predicted against
// measured) and per-device busy share. Everything drawn comes from RunMonitorModel.
#pragma once

#include <QWidget>

class QCustomPlot;
class QCPAxisRect;
class QCPGraph;
class QCPBars;

namespace ps::gui {

class RunMonitorModel;

class RunMonitorPlot : public QWidget
{
    Q_OBJECT
public:
    explicit RunMonitorPlot(RunMonitorModel* model, QWidget* parent = nullptr);

    [[nodiscard]] QCustomPlot* plot() const
    {
        return m_plot;
    }
    // Measured points drawn in the loss chart (for tests).
    [[nodiscard]] int lossPointCount() const;
    // The predicted iteration time line's value, 0 when none is drawn.
    [[nodiscard]] double predictedLineMs() const;

private:
    void rebuild();
    void drawSteps();
    void drawDevices();

    RunMonitorModel* m_model;
    QCustomPlot* m_plot;
    QCPAxisRect* m_loss = nullptr;
    QCPAxisRect* m_tokens = nullptr;
    QCPAxisRect* m_time = nullptr;
    QCPAxisRect* m_memory = nullptr;
    QCPAxisRect* m_busy = nullptr;
    QCPGraph* m_lossGraph = nullptr;
    QCPGraph* m_tokensGraph = nullptr;
    QCPGraph* m_measuredTime = nullptr;
    QCPGraph* m_predictedTime = nullptr;
    QCPBars* m_predictedPeak = nullptr;
    QCPBars* m_measuredPeak = nullptr;
    QCPBars* m_busyBars = nullptr;
};

} // namespace ps::gui
