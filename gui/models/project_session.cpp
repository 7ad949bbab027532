#include "models/project_session.h"

#include "onnx/model_import.h"
#include "store/project_store.h"
#include "util/error.h"

#include <QFileInfo>

#include <exception>

namespace ps::gui {
namespace {

    // The measured CPU profiles, one per thread count, the most threads first (what the planning
    // views use; a launch matches its devices' thread count among them).
    std::vector<Profile> measuredCpuProfiles(const ProjectStore& store)
    {
        std::vector<Profile> profiles;
        auto counts = store.profileThreads("cpu", "measured-cpu");
        for (auto t = counts.rbegin(); t != counts.rend(); ++t) {
            if (auto measured = store.loadProfile("cpu", "measured-cpu", *t))
                profiles.push_back(std::move(*measured));
        }
        return profiles;
    }

    std::vector<Profile> storedProfilesOf(const QString& path)
    {
        return measuredCpuProfiles(ProjectStore::open(path.toStdString(), ProjectStore::Access::ReadOnly));
    }

} // namespace

LoadedProject loadProjectFile(const QString& path)
{
    const auto store = ProjectStore::open(path.toStdString(), ProjectStore::Access::ReadOnly);
    LoadedProject p;
    p.graph = std::make_shared<const Graph>(store.loadGraph());
    p.profiles = measuredCpuProfiles(store);
    p.path = path;
    return p;
}

LoadedProject loadOnnxModel(
    const QString& path, std::int64_t batch, std::int64_t sequence, const QString& loss, bool keepWeights)
{
    OnnxImportOptions options; // 0: the exported size of a fixed dimension, the default of a dynamic one
    options.keepWeights = keepWeights;
    if (batch > 0)
        options.batch = batch;
    if (sequence > 0)
        options.sequence = sequence;
    return loadOnnxModel(path, options, loss);
}

LoadedProject loadOnnxModel(const QString& path, const OnnxImportOptions& options, const QString& loss)
{
    const bool keepWeights = options.keepWeights;
    auto imported = importModel(path.toStdString(), { options, loss.toStdString(), std::nullopt });
    QStringList opaque;
    for (const auto& [op, count] : imported.report.opaqueOps)
        opaque << QStringLiteral("%1 x%2").arg(QString::fromStdString(op)).arg(count);
    LoadedProject p;
    p.summary =
        ProjectSession::tr("Imported %1%7: %2 nodes (opset %3), micro-batch %6; loss: %4; costed from shapes only: %5")
            .arg(QFileInfo(path).fileName())
            .arg(imported.graph.nodeCount())
            .arg(imported.report.opset)
            .arg(loss.isEmpty() ? ProjectSession::tr("none (not trainable)") : loss)
            .arg(opaque.isEmpty() ? ProjectSession::tr("none") : opaque.join(QStringLiteral(", ")))
            .arg(imported.graph.info().microBatch)
            .arg(keepWeights ? QString() : ProjectSession::tr(" without weights"));
    p.graph = std::make_shared<const Graph>(std::move(imported.graph));
    return p;
}

LoadedProject buildZooProject(const ModelConfig& config)
{
    LoadedProject p;
    p.graph = std::make_shared<const Graph>(buildZooModel(config));
    return p;
}

ProjectSession::ProjectSession(QObject* parent)
    : QObject(parent)
{
}

QString ProjectSession::displayName() const
{
    if (!m_graph)
        return tr("No project");
    const auto name = m_filePath.isEmpty() ? tr("Untitled") : QFileInfo(m_filePath).fileName();
    return name + QStringLiteral(" — ") + QString::fromStdString(m_graph->info().name);
}

bool ProjectSession::newFromZoo(const ModelConfig& config)
{
    try {
        adopt(buildZooProject(config));
        return true;
    } catch (const std::exception& e) {
        Q_EMIT operationFailed(QString::fromStdString(e.what()));
        return false;
    }
}

bool ProjectSession::open(const QString& path)
{
    try {
        adopt(loadProjectFile(path));
        return true;
    } catch (const std::exception& e) {
        Q_EMIT operationFailed(QString::fromStdString(e.what()));
        return false;
    }
}

bool ProjectSession::reloadProfiles()
{
    try {
        m_profiles = storedProfilesOf(m_filePath);
        return true;
    } catch (const std::exception& e) {
        Q_EMIT operationFailed(QString::fromStdString(e.what()));
        return false;
    }
}

bool ProjectSession::importOnnx(
    const QString& path, std::int64_t batch, std::int64_t sequence, QString* summary, const QString& loss)
{
    try {
        auto project = loadOnnxModel(path, batch, sequence, loss);
        if (summary)
            *summary = project.summary;
        adopt(std::move(project));
        return true;
    } catch (const std::exception& e) {
        Q_EMIT operationFailed(QString::fromStdString(e.what()));
        return false;
    }
}

void ProjectSession::adopt(LoadedProject project)
{
    m_profiles = std::move(project.profiles);
    const bool unsaved = project.path.isEmpty();
    setGraph(std::move(project.graph), std::move(project.path), unsaved);
}

bool ProjectSession::save()
{
    if (m_filePath.isEmpty()) {
        Q_EMIT operationFailed(tr("The project has no file yet; use Save As."));
        return false;
    }
    return saveAs(m_filePath);
}

bool ProjectSession::saveAs(const QString& path)
{
    if (!m_graph) {
        Q_EMIT operationFailed(tr("There is no project to save."));
        return false;
    }
    try {
        // An opened project is copied whole: its profiles, plans and runs go with it (the GUI
        // never edits the graph itself, so saving onto the same file has nothing to write).
        if (!m_filePath.isEmpty() && !m_modified && QFileInfo::exists(m_filePath))
            copyProject(m_filePath.toStdString(), path.toStdString());
        else
            writeNewProject(path.toStdString(), *m_graph, true);
        setGraph(m_graph, path, false);
        return true;
    } catch (const std::exception& e) {
        Q_EMIT operationFailed(QString::fromStdString(e.what()));
        return false;
    }
}

void ProjectSession::setGraph(std::shared_ptr<const Graph> graph, QString path, bool modified)
{
    const bool changedGraph = graph != m_graph;
    m_graph = std::move(graph);
    if (m_filePath != path) {
        m_filePath = std::move(path);
        Q_EMIT filePathChanged(m_filePath);
    }
    if (m_modified != modified) {
        m_modified = modified;
        Q_EMIT modifiedChanged(modified);
    }
    if (changedGraph)
        Q_EMIT projectChanged();
}

} // namespace ps::gui
