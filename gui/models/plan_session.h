// The plan being edited in the planning studio: a core PlanEditor plus undo/redo. Every edit is
// a command on the QUndoStack holding the partition before and after, so undo restores the exact
// previous plan. Views read snapshot(); they never compute planning numbers themselves.
#pragma once

#include "plan/plan_editor.h"

#include <QObject>
#include <QUndoStack>

#include <memory>

namespace ps::gui {

struct PlanSetup
{
    std::string deviceId = "a100-40gb"; // a catalog id, or "cpu" for this machine (measured)
    int devicesPerNode = 8;
    double intraNodeGBps = 0; // 0: the device's peer link
    double interNodeGBps = 12.5; // 100 Gb/s Ethernet, one NIC
    int nicsPerNode = 1; // each at interNodeGBps (cluster/cluster.h: a device sends over NIC i mod n)
    ScheduleSpec schedule { ScheduleKind::OneFOneB, 4, 8, 1, 1 };
    double microBatch = 0; // 0: the model's
    PlannerLimits limits;
    std::string profileSource = "analytical"; // or a stored profile's source ("measured-cpu")
    Precision precision = Precision::Fp32; // of the analytical estimate (cost/training_setup.h)

    bool operator==(const PlanSetup& o) const
    {
        return profileSource == o.profileSource && precision == o.precision && deviceId == o.deviceId
            && devicesPerNode == o.devicesPerNode && intraNodeGBps == o.intraNodeGBps
            && interNodeGBps == o.interNodeGBps && nicsPerNode == o.nicsPerNode && schedule == o.schedule
            && microBatch == o.microBatch && limits.memoryLimitBytes == o.limits.memoryLimitBytes
            && limits.allowSwap == o.limits.allowSwap && limits.allowRecompute == o.limits.allowRecompute;
    }
};

class PlanSession : public QObject
{
    Q_OBJECT
public:
    explicit PlanSession(QObject* parent = nullptr);
    ~PlanSession() override;

    // Builds the analytical profile for the setup's device and a balanced starting partition.
    // Returns false and emits operationFailed when the setup is impossible.
    bool setModel(std::shared_ptr<const Graph> graph, const PlanSetup& setup);
    // Profiles stored in the project (`pipestudio profile`); a setup may plan with one of them
    // instead of the analytical estimate.
    void setStoredProfiles(std::vector<Profile> profiles);
    [[nodiscard]] const std::vector<Profile>& storedProfiles() const
    {
        return m_stored;
    }
    bool configure(const PlanSetup& setup);
    [[nodiscard]] bool hasPlan() const
    {
        return m_editor != nullptr;
    }
    [[nodiscard]] const PlanSetup& setup() const
    {
        return m_setup;
    }
    // `devices` devices of kind `device`, with `setup`'s devices per node and links (the Cluster
    // dock's): the plan's cluster, and the one the auto-search plans on.
    [[nodiscard]] static Cluster clusterOf(const PlanSetup& setup, const DeviceSpec& device, int devices);
    [[nodiscard]] const EditorSnapshot& snapshot() const;
    [[nodiscard]] const PlanEditor& editor() const;
    [[nodiscard]] std::shared_ptr<const Graph> graph() const
    {
        return m_graph;
    }
    [[nodiscard]] const Profile& profile() const
    {
        return *m_profile;
    }
    [[nodiscard]] QUndoStack* undoStack()
    {
        return &m_undo;
    }

    // Undoable edits. moveBoundary snaps into the legal range and returns where it landed.
    std::size_t moveBoundary(int boundary, std::size_t node);
    void addStage();
    void removeStage(int boundary);
    void applyPartition(const Partition& partition, const QString& description);
    // A plan whose stages share devices (Mixed-pipe): its node order, cuts and stage-to-device map.
    void applyPlacement(const Placement& placement, const QString& description);

    // Used by the undo commands: sets the placement without recording an edit.
    void restorePlacement(const Placement& placement);

Q_SIGNALS:
    void planChanged();
    void operationFailed(const QString& message);

private:
    void pushPlacement(const Placement& before, const Placement& after, const QString& text);

    std::shared_ptr<const Graph> m_graph;
    std::unique_ptr<Profile> m_profile; // the editor refers to it; replaced together
    std::vector<Profile> m_stored;
    PlanSetup m_setup;
    std::unique_ptr<PlanEditor> m_editor;
    QUndoStack m_undo;
};

} // namespace ps::gui
