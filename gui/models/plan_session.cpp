#include "models/plan_session.h"

#include "cost/profile_threads.h"
#include "models/run_prediction.h"
#include "runtime/training_run.h"
#include "util/error.h"

#include <QUndoCommand>

namespace ps::gui {
namespace {

    class PartitionCommand : public QUndoCommand
    {
    public:
        PartitionCommand(PlanSession* session, Placement before, Placement after, const QString& text)
            : QUndoCommand(text)
            , m_session(session)
            , m_before(std::move(before))
            , m_after(std::move(after))
        {
        }
        void undo() override
        {
            m_session->restorePlacement(m_before);
        }
        void redo() override
        {
            m_session->restorePlacement(m_after);
        }

    private:
        PlanSession* m_session;
        Placement m_before;
        Placement m_after;
    };

} // namespace

PlanSession::PlanSession(QObject* parent)
    : QObject(parent)
    , m_profile(std::make_unique<Profile>())
    , m_undo(this)
{
}

PlanSession::~PlanSession() = default;

bool PlanSession::setModel(std::shared_ptr<const Graph> graph, const PlanSetup& setup)
{
    m_graph = std::move(graph);
    m_undo.clear();
    if (!m_graph) {
        m_editor.reset();
        Q_EMIT planChanged();
        return true;
    }
    return configure(setup);
}

Cluster PlanSession::clusterOf(const PlanSetup& setup, const DeviceSpec& device, int devices)
{
    auto cluster = makeCluster(device, std::max(1, devices), std::max(1, setup.devicesPerNode));
    if (setup.intraNodeGBps > 0)
        cluster.intraNode.bandwidth = setup.intraNodeGBps * 1e9;
    cluster.interNode.bandwidth = setup.interNodeGBps * 1e9;
    cluster.nicsPerNode = setup.nicsPerNode;
    return cluster;
}

bool PlanSession::configure(const PlanSetup& setup)
{
    if (!m_graph)
        return false;
    try {
        // "cpu": this machine as one of the plan's devices sharing its cores, measured once per process
        // and thread count (MainWindow measures the common counts off the GUI thread).
        const auto device = setup.deviceId == "cpu"
            ? thisCpu(engine::threadsPerDevice(static_cast<std::size_t>(std::max(1, setup.schedule.devices()))))
            : DeviceCatalog::builtin().find(setup.deviceId);
        auto shape = clusterOf(setup, device, std::max(1, setup.devicesPerNode));
        shape.check();
        std::unique_ptr<Profile> profile;
        if (setup.profileSource == "analytical") {
            CostModelOptions cost;
            cost.setup.precision = setup.precision;
            profile = std::make_unique<Profile>(estimateProfile(*m_graph, device, cost));
        } else {
            // The plan's CPU devices share the cores: the profile of their thread count.
            std::vector<Profile> candidates;
            for (const auto& p : m_stored) {
                if (p.source == setup.profileSource && p.deviceKind == setup.deviceId)
                    candidates.push_back(p);
            }
            const auto matched = matchProfileThreads(candidates,
                setup.deviceId == "cpu" ? engine::threadsPerDevice(static_cast<std::size_t>(setup.schedule.devices()))
                                        : 0);
            if (!matched || matched->profile.nodes.size() != m_graph->nodeCount())
                throw Error("the project has no " + setup.profileSource + " profile for device '" + setup.deviceId
                    + "' (measure one with `pipestudio profile --device cpu`, then plan on the device 'cpu')");
            profile = std::make_unique<Profile>(matched->profile);
        }
        const double mb = setup.microBatch > 0 ? setup.microBatch : static_cast<double>(m_graph->info().microBatch);
        // Build the new editor first: if the setup is impossible, the current plan stays.
        auto editor = std::make_unique<PlanEditor>(*m_graph, *profile, shape, setup.schedule, mb, setup.limits);
        m_editor = std::move(editor);
        m_profile = std::move(profile);
        m_setup = setup;
        m_undo.clear();
        Q_EMIT planChanged();
        return true;
    } catch (const std::exception& e) {
        Q_EMIT operationFailed(QString::fromStdString(e.what()));
        return false;
    }
}

void PlanSession::setStoredProfiles(std::vector<Profile> profiles)
{
    m_stored = std::move(profiles);
}

const EditorSnapshot& PlanSession::snapshot() const
{
    if (!m_editor)
        throw Error("no plan is open");
    return m_editor->snapshot();
}

const PlanEditor& PlanSession::editor() const
{
    if (!m_editor)
        throw Error("no plan is open");
    return *m_editor;
}

std::size_t PlanSession::moveBoundary(int boundary, std::size_t node)
{
    if (!m_editor)
        return node;
    const auto [lo, hi] = m_editor->legalRange(boundary);
    const auto snapped = std::clamp(node, lo, hi);
    auto after = m_editor->placement();
    if (after.partition.stageStarts[static_cast<std::size_t>(boundary)] != snapped) {
        const auto before = after;
        after.partition.stageStarts[static_cast<std::size_t>(boundary)] = snapped;
        pushPlacement(before, after, tr("Move boundary %1 to node %2").arg(boundary).arg(snapped));
    }
    return snapped;
}

void PlanSession::addStage()
{
    if (!m_editor)
        return;
    try {
        pushPlacement(m_editor->placement(), m_editor->withAddedStage(), tr("Add stage"));
    } catch (const std::exception& e) {
        Q_EMIT operationFailed(QString::fromStdString(e.what()));
    }
}

void PlanSession::removeStage(int boundary)
{
    if (!m_editor || boundary < 1 || boundary >= m_editor->partition().stageCount())
        return;
    pushPlacement(m_editor->placement(), m_editor->withoutStage(boundary), tr("Remove stage %1").arg(boundary));
}

void PlanSession::applyPartition(const Partition& partition, const QString& description)
{
    applyPlacement({ partition, {} }, description);
}

void PlanSession::applyPlacement(const Placement& placement, const QString& description)
{
    if (!m_editor)
        return;
    try {
        checkPartition(placement.partition, m_graph->nodeCount());
        const auto before = m_editor->placement();
        m_editor->setPlacement(placement); // refused (and nothing recorded) when the map is invalid
        m_editor->setPlacement(before);
        pushPlacement(before, placement, description);
    } catch (const std::exception& e) {
        Q_EMIT operationFailed(QString::fromStdString(e.what()));
    }
}

void PlanSession::pushPlacement(const Placement& before, const Placement& after, const QString& text)
{
    m_undo.push(new PartitionCommand(this, before, after, text)); // redo() applies it
}

void PlanSession::restorePlacement(const Placement& placement)
{
    try {
        m_editor->setPlacement(placement);
    } catch (const std::exception& e) {
        Q_EMIT operationFailed(QString::fromStdString(e.what()));
    }
    Q_EMIT planChanged();
}

} // namespace ps::gui
