// The document the main window edits: one project (graph + file), its dirty state and the
// load/save flows. Views observe it; they never touch the store directly.
#pragma once

#include "cost/profile.h"
#include "graph/graph.h"
#include "onnx/onnx_import.h"
#include "zoo/model_config.h"

#include <QObject>
#include <QString>

#include <memory>

namespace ps::gui {

// A project read or built without touching any session, so it can be computed on a worker thread
// (BackgroundJob) and adopted on the GUI thread.
struct LoadedProject
{
    std::shared_ptr<const Graph> graph;
    std::vector<Profile> profiles; // measured profiles stored in the file
    QString path; // empty: a new or imported project, not saved yet
    QString summary; // what an import did
};

// Each throws with a message naming the file or model when it cannot.
[[nodiscard]] LoadedProject loadProjectFile(const QString& path);
// `loss` "cross-entropy" or "mse" attaches that loss (graph/loss.h); empty: none. Without
// `keepWeights` the weights are not read (external data files included).
[[nodiscard]] LoadedProject loadOnnxModel(const QString& path, const OnnxImportOptions& options, const QString& loss);
// The same with batch and sequence sizes (0: the exported or default size).
[[nodiscard]] LoadedProject loadOnnxModel(
    const QString& path, std::int64_t batch, std::int64_t sequence, const QString& loss = {}, bool keepWeights = true);
[[nodiscard]] LoadedProject buildZooProject(const ModelConfig& config);

class ProjectSession : public QObject
{
    Q_OBJECT
public:
    explicit ProjectSession(QObject* parent = nullptr);

    [[nodiscard]] std::shared_ptr<const Graph> graph() const
    {
        return m_graph;
    }
    [[nodiscard]] const QString& filePath() const
    {
        return m_filePath;
    }
    [[nodiscard]] bool isModified() const
    {
        return m_modified;
    }
    [[nodiscard]] bool hasProject() const
    {
        return m_graph != nullptr;
    }
    [[nodiscard]] QString displayName() const;

    // Each returns false and emits operationFailed with a message naming the file on error;
    // the current project is left as it was.
    bool newFromZoo(const ModelConfig& config);
    bool open(const QString& path);
    // Imports an ONNX file as a new, unsaved project; `summary` receives what the import did.
    bool importOnnx(const QString& path, std::int64_t batch, std::int64_t sequence, QString* summary = nullptr,
        const QString& loss = {});
    // Makes `project` the current one (GUI thread); a project without a path is unsaved.
    void adopt(LoadedProject project);
    bool save();
    bool saveAs(const QString& path);
    // Re-reads the measured profiles of the project file (after `pipestudio profile` wrote one).
    bool reloadProfiles();
    // Measured profiles stored in the opened project file (none for a new or imported project).
    [[nodiscard]] const std::vector<Profile>& storedProfiles() const
    {
        return m_profiles;
    }

Q_SIGNALS:
    void projectChanged();
    void modifiedChanged(bool modified);
    void filePathChanged(const QString& path);
    void operationFailed(const QString& message);

private:
    void setGraph(std::shared_ptr<const Graph> graph, QString path, bool modified);

    std::shared_ptr<const Graph> m_graph;
    QString m_filePath;
    bool m_modified = false;
    std::vector<Profile> m_profiles;
};

} // namespace ps::gui
