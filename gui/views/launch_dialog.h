// Run > Launch: which plan (the current edit or a stored plan), on which devices (N CPU devices
// with a memory cap each, or a local GPU split into them: the CUDA backend), how many steps,
// which data, learning rate and checkpoint interval. Before launch it shows the simulator's
// predicted iteration time and per-device peak memory for exactly that run, and refuses a plan
// predicted to run out of memory (naming the device and the bytes) unless the user overrides.
#pragma once

#include "models/run_launcher.h"
#include "models/run_prediction.h"

#include <QDialog>

#include <optional>

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QTableWidget;

namespace ps::gui {

class PlanSession;

class LaunchDialog : public QDialog
{
    Q_OBJECT
public:
    // `projectPath`: the saved project the run trains; its stored plans are offered.
    LaunchDialog(PlanSession* session, const QString& projectPath, QWidget* parent = nullptr);

    // The request for the chosen options; planId is 0 when the current edit is chosen (the
    // caller stores it as a plan first).
    [[nodiscard]] LaunchRequest request() const;
    [[nodiscard]] bool usesCurrentEdit() const;
    [[nodiscard]] const std::optional<RunPrediction>& prediction() const
    {
        return m_prediction;
    }
    // Why the launch is refused (predicted out of memory, no plan), empty when it may go.
    [[nodiscard]] const QString& refusal() const
    {
        return m_refusal;
    }
    [[nodiscard]] bool canLaunch() const;

    // For tests and scripted use.
    void selectPlan(int index); // 0: the current edit (when there is one), then stored plans
    void setDeviceMemoryBytes(std::int64_t bytes);
    void setSteps(int steps);
    void setRandomTokens(bool on); // on: Random tokens; off: the default corpus
    void setOverride(bool on);
    [[nodiscard]] int planCount() const;
    [[nodiscard]] QPushButton* launchButton() const
    {
        return m_launch;
    }

private:
    void setupForm();
    void setupPrediction();
    void fillPlans();
    void updatePrediction();
    [[nodiscard]] std::optional<RunShape> chosenShape() const;
    [[nodiscard]] int deviceCountOf(const RunShape& shape) const;
    // The chosen GPU's CUDA ordinal; -1 for CPU devices.
    [[nodiscard]] int gpu() const;

    PlanSession* m_session;
    QString m_project;
    std::vector<std::pair<std::int64_t, std::string>> m_plans; // stored: id, JSON
    std::optional<RunPrediction> m_prediction;
    QString m_refusal;
    int m_devices = 1;
    std::int64_t m_microBatch = 0;

    QComboBox* m_plan = nullptr;
    QComboBox* m_deviceKind = nullptr;
    QLabel* m_deviceCount = nullptr;
    QDoubleSpinBox* m_memoryMiB = nullptr;
    QSpinBox* m_steps = nullptr;
    QComboBox* m_data = nullptr;
    QLineEdit* m_dataFile = nullptr;
    QDoubleSpinBox* m_lr = nullptr;
    QSpinBox* m_checkpointEvery = nullptr;
    QLabel* m_predicted = nullptr;
    QTableWidget* m_devicesTable = nullptr;
    QLabel* m_refusalLabel = nullptr;
    QCheckBox* m_override = nullptr;
    QPushButton* m_launch = nullptr;
};

} // namespace ps::gui
