#include "models/project_session.h"

#include "onnx/onnx_import.h"
#include "store/project_store.h"

#include <QFileInfo>

#include <exception>

namespace ps::gui {

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
        m_profiles.clear();
        setGraph(std::make_shared<const Graph>(buildZooModel(config)), QString(), true);
        return true;
    } catch (const std::exception& e) {
        Q_EMIT operationFailed(QString::fromStdString(e.what()));
        return false;
    }
}

bool ProjectSession::open(const QString& path)
{
    try {
        const auto store = ProjectStore::open(path.toStdString(), ProjectStore::Access::ReadOnly);
        auto graph = std::make_shared<const Graph>(store.loadGraph());
        std::vector<Profile> profiles;
        if (auto measured = store.loadProfile("cpu", "measured-cpu"))
            profiles.push_back(std::move(*measured));
        m_profiles = std::move(profiles);
        setGraph(std::move(graph), path, false);
        return true;
    } catch (const std::exception& e) {
        Q_EMIT operationFailed(QString::fromStdString(e.what()));
        return false;
    }
}

bool ProjectSession::reloadProfiles()
{
    try {
        const auto store = ProjectStore::open(m_filePath.toStdString(), ProjectStore::Access::ReadOnly);
        std::vector<Profile> profiles;
        if (auto measured = store.loadProfile("cpu", "measured-cpu"))
            profiles.push_back(std::move(*measured));
        m_profiles = std::move(profiles);
        return true;
    } catch (const std::exception& e) {
        Q_EMIT operationFailed(QString::fromStdString(e.what()));
        return false;
    }
}

bool ProjectSession::importOnnx(const QString& path, std::int64_t batch, std::int64_t sequence, QString* summary)
{
    try {
        OnnxImportOptions options;
        options.batch = batch;
        options.sequence = sequence;
        auto imported = ps::importOnnx(path.toStdString(), options);
        if (summary) {
            QStringList opaque;
            for (const auto& [op, count] : imported.report.opaqueOps)
                opaque << QStringLiteral("%1 x%2").arg(QString::fromStdString(op)).arg(count);
            *summary = tr("Imported %1: %2 nodes (opset %3); costed from shapes only: %4")
                           .arg(QFileInfo(path).fileName())
                           .arg(imported.graph.nodeCount())
                           .arg(imported.report.opset)
                           .arg(opaque.isEmpty() ? tr("none") : opaque.join(QStringLiteral(", ")));
        }
        m_profiles.clear();
        setGraph(std::make_shared<const Graph>(std::move(imported.graph)), QString(), true);
        return true;
    } catch (const std::exception& e) {
        Q_EMIT operationFailed(QString::fromStdString(e.what()));
        return false;
    }
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
