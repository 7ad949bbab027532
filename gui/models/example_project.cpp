#include "models/example_project.h"

#include "store/project_store.h"
#include "util/error.h"
#include "zoo/model_config.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QStandardPaths>

namespace ps::gui {

QString exampleProjectPath()
{
    return QDir(QStandardPaths::writableLocation(QStandardPaths::AppDataLocation))
        .filePath(QStringLiteral("example.pstudio"));
}

PlanSetup examplePlanSetup()
{
    PlanSetup setup;
    setup.deviceId = "cpu";
    setup.devicesPerNode = 2;
    setup.schedule = { ScheduleKind::OneFOneB, 2, 2, 1, 1 };
    return setup;
}

namespace {

    void writeExample(const QString& path)
    {
        if (!QDir().mkpath(QFileInfo(path).absolutePath()))
            throw Error("cannot create the folder of '" + path.toStdString() + "'");
        const auto graph = std::make_shared<const Graph>(buildZooModel(zooPreset("gpt2-tiny")));
        // Written next to its place and renamed, so an interrupted start never leaves half a project.
        const QString partial = path + QStringLiteral(".partial");
        QFile::remove(partial);
        writeNewProject(partial.toStdString(), *graph, true);
        {
            PlanSession session; // this worker's own: the plan and its simulation, as the editor makes them
            if (!session.setModel(graph, examplePlanSetup()))
                throw Error("cannot plan the example model");
            const auto& snap = session.snapshot();
            auto plan = snap.plan;
            plan.algorithm = "manual";
            ProjectStore::open(partial.toStdString())
                .savePlan(plan, "example: 2 stages, 1F1B on this CPU", &snap.simulation);
        }
        if (!QFile::rename(partial, path))
            throw Error("cannot write the example project '" + path.toStdString() + "'");
    }

} // namespace

LoadedProject openOrCreateExample(const QString& path)
{
    if (!QFileInfo::exists(path))
        writeExample(path);
    return loadProjectFile(path);
}

} // namespace ps::gui
