// The run the monitor shows, live (steps from the RunLauncher) or loaded from the project (a
// finished run): one row per step with what the child measured, the predicted iteration time and
// per-device peak next to it, and the derived numbers the monitor displays (progress, ETA,
// busy share, measured peak). Views only draw what this model computes.
#pragma once

#include "models/run_launcher.h"

#include <QAbstractTableModel>

namespace ps {
class ProjectStore;
}

namespace ps::gui {

class RunMonitorModel : public QAbstractTableModel
{
    Q_OBJECT
public:
    enum Column { StepColumn, LossColumn, StepMsColumn, TokensColumn, FirstDeviceColumn };

    explicit RunMonitorModel(QObject* parent = nullptr);

    // A new run: `firstStep` is the step it resumed from (0 for a fresh run).
    // `deviceNames`: the run's devices as `train` names them ("cpu:1", "cuda:0.1"); empty: "device N".
    void beginRun(std::int64_t runId, int devices, std::int64_t totalSteps, std::int64_t firstStep = 0,
        std::vector<std::string> deviceNames = {});
    // The simulator's numbers for this run (labelled predicted wherever shown).
    void setPrediction(double iterationMs, std::vector<double> peakBytes, const QString& profileSource);
    void addStep(const RunStep& step);
    void setStatus(const QString& status, const QString& message = {});
    // A stored run's steps, per-device peaks and status; throws ps::Error for an unknown run.
    void loadRun(const ProjectStore& store, std::int64_t runId);
    void clear();

    [[nodiscard]] std::int64_t runId() const
    {
        return m_runId;
    }
    [[nodiscard]] const std::vector<RunStep>& steps() const
    {
        return m_steps;
    }
    [[nodiscard]] int deviceCount() const
    {
        return m_devices;
    }
    [[nodiscard]] QString deviceName(int device) const;
    [[nodiscard]] std::int64_t totalSteps() const
    {
        return m_totalSteps;
    }
    [[nodiscard]] const QString& status() const
    {
        return m_status;
    }
    [[nodiscard]] const QString& message() const
    {
        return m_message;
    }
    [[nodiscard]] double predictedIterationMs() const
    {
        return m_predictedMs;
    }
    [[nodiscard]] const std::vector<double>& predictedPeakBytes() const
    {
        return m_predictedPeak;
    }
    [[nodiscard]] const QString& profileSource() const
    {
        return m_profileSource;
    }
    [[nodiscard]] std::int64_t stepsDone() const;
    // 0..1 of the run's steps.
    [[nodiscard]] double progress() const;
    // Remaining steps times the median of the last measured step times; -1 before two steps.
    [[nodiscard]] double etaSeconds() const;
    // Median measured step time after the first (which allocates and warms caches).
    [[nodiscard]] double medianStepMs() const;
    // Share of the step device `d` was computing (busy / step time, steps after the first).
    [[nodiscard]] double busyShare(int device) const;
    [[nodiscard]] std::int64_t measuredPeakBytes(int device) const;

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

Q_SIGNALS:
    // Any change: a step, the prediction, the status or a new run.
    void changed();

private:
    [[nodiscard]] std::vector<double> laterStepTimes() const;

    std::int64_t m_runId = 0;
    int m_devices = 0;
    std::vector<std::string> m_deviceNames;
    std::int64_t m_totalSteps = 0;
    std::int64_t m_firstStep = 0;
    std::vector<RunStep> m_steps;
    QString m_status;
    QString m_message;
    double m_predictedMs = 0;
    std::vector<double> m_predictedPeak;
    QString m_profileSource;
};

// "1 min 05 s", "12 s"
[[nodiscard]] QString formatDuration(double seconds);

} // namespace ps::gui
