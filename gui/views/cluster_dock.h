// Cluster and device settings of the plan: catalog device and count (one per stage), schedule,
// micro-batches, memory limit, whether swap/recompute may be used, and the profile source; and
// across nodes, the plan's pipeline at tensor and data parallel sizes on a node kind (a GPT's
// per-GPU TFLOP/s, memory and time split, gui/models/scale_out.h).
#pragma once

#include "models/scale_out.h"

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
    // The sizes across nodes (an unknown node kind is refused: false); the estimate follows at once.
    bool setClusterSizes(const ClusterSizes& sizes);
    [[nodiscard]] ClusterSizes clusterSizes() const;
    // The applied plan at those sizes.
    [[nodiscard]] const ClusterScale& clusterScale() const
    {
        return m_scale;
    }

private:
    void setupForm();
    QWidget* scaleForm();
    void loadFromSession();
    void updateScale();

    PlanSession* m_session;
    QComboBox* m_device = nullptr;
    QSpinBox* m_stages = nullptr;
    QSpinBox* m_perNode = nullptr;
    QDoubleSpinBox* m_intra = nullptr;
    QDoubleSpinBox* m_inter = nullptr;
    QSpinBox* m_nics = nullptr;
    QComboBox* m_schedule = nullptr;
    QSpinBox* m_microBatches = nullptr;
    QDoubleSpinBox* m_microBatch = nullptr;
    QDoubleSpinBox* m_memoryGiB = nullptr;
    QCheckBox* m_swap = nullptr;
    QCheckBox* m_recompute = nullptr;
    QComboBox* m_profile = nullptr;
    QComboBox* m_precision = nullptr;
    QLabel* m_local = nullptr;
    QComboBox* m_nodeKind = nullptr;
    QSpinBox* m_tensor = nullptr;
    QSpinBox* m_data = nullptr;
    QComboBox* m_scaleRecompute = nullptr;
    QLabel* m_scaleText = nullptr;
    ClusterScale m_scale;
};

} // namespace ps::gui
