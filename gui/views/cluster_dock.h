// Cluster and device settings of the plan: catalog device and count (one per stage), schedule,
// micro-batches, memory limit, whether swap/recompute may be used, and the profile source.
#pragma once

#include <QWidget>

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QSpinBox;

namespace ps::gui {

class PlanSession;
struct PlanSetup;

class ClusterDock : public QWidget
{
    Q_OBJECT
public:
    explicit ClusterDock(PlanSession* session, QWidget* parent = nullptr);

    [[nodiscard]] PlanSetup setup() const;
    // Applies the form to the session (rebuilds profile, partition and simulation).
    bool apply();
    void setDevice(const QString& id);
    void setStages(int stages);
    // Selects a profile source offered in the combo ("analytical", "measured-cpu"); false if absent.
    bool setProfileSource(const QString& source);
    // Selects the precision of the analytical estimate ("fp32", "tf32", "bf16", "fp16"); false if unknown.
    bool setPrecision(const QString& precision);

private:
    void setupForm();
    void loadFromSession();

    PlanSession* m_session;
    QComboBox* m_device = nullptr;
    QSpinBox* m_stages = nullptr;
    QSpinBox* m_perNode = nullptr;
    QDoubleSpinBox* m_intra = nullptr;
    QDoubleSpinBox* m_inter = nullptr;
    QComboBox* m_schedule = nullptr;
    QSpinBox* m_microBatches = nullptr;
    QDoubleSpinBox* m_microBatch = nullptr;
    QDoubleSpinBox* m_memoryGiB = nullptr;
    QCheckBox* m_swap = nullptr;
    QCheckBox* m_recompute = nullptr;
    QComboBox* m_profile = nullptr;
    QComboBox* m_precision = nullptr;
    QLabel* m_local = nullptr;
};

} // namespace ps::gui
