// Profile > On this machine: a real `pipestudio profile` child, its progress and cancel, and the
// views switching to the measured profile.
#include "models/plan_session.h"
#include "models/profile_compare_model.h"
#include "models/profile_runner.h"
#include "models/project_session.h"
#include "models/run_launcher.h"
#include "store/project_store.h"
#include "views/main_window.h"
#include "views/profile_dock.h"
#include "zoo/model_config.h"

#include <QDir>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QTemporaryDir>
#include <QTest>

#include <gtest/gtest.h>

#include <cmath>

using namespace ps;
using namespace ps::gui;

namespace {

QString project(const QTemporaryDir& dir, const std::string& model, int layers)
{
    auto c = zooPreset(model);
    if (layers > 0)
        c.layers = layers;
    const auto path = dir.filePath(QStringLiteral("p.pstudio"));
    writeNewProject(path.toStdString(), buildZooModel(c), true);
    return path;
}

} // namespace

TEST(ProfileAction, MeasuresThisMachineAndTheViewsSwitchToIt)
{
    QTemporaryDir dir;
    const auto path = project(dir, "gpt2-tiny", 0);
    MainWindow window;
    ASSERT_TRUE(window.openProject(path));
    EXPECT_EQ(window.planSession()->setup().profileSource, "analytical");
    EXPECT_EQ(window.profileDock()->model()->rowCount(), 0);
    QSignalSpy progress(window.profileDock()->runner(), &ProfileRunner::progress);
    QSignalSpy done(window.profileDock(), &ProfileDock::profiled);
    QSignalSpy failed(window.profileDock(), &ProfileDock::failed);
    // profileThisMachine() sets the executable from the launcher's; point that at the build's.
    window.launcher()->setExecutable(QStringLiteral(PS_PIPESTUDIO_EXE));
    window.profileThisMachine();
    ASSERT_TRUE(done.wait(120'000)) << (failed.isEmpty() ? "" : failed.front().front().toString().toStdString());
    EXPECT_GE(progress.size(), 3); // start, each micro-batch size, the end
    EXPECT_EQ(window.planSession()->setup().deviceId, "cpu");
    EXPECT_EQ(window.planSession()->setup().profileSource, "measured-cpu");
    EXPECT_EQ(window.planSession()->profile().source, "measured-cpu");
    const auto* model = window.profileDock()->model();
    ASSERT_EQ(model->rowCount(), static_cast<int>(window.session()->graph()->nodeCount()));
    // Sorted by time error, largest first.
    const auto* proxy = window.profileDock()->proxy();
    const auto error = [proxy](int row) {
        return proxy->index(row, ProfileCompareModel::TimeErrorColumn).data(Qt::UserRole).toDouble();
    };
    EXPECT_GE(error(0), error(proxy->rowCount() - 1));
    EXPECT_TRUE(ProjectStore::open(path.toStdString(), ProjectStore::Access::ReadOnly)
                    .loadProfile("cpu", "measured-cpu")
                    .has_value());
}

TEST(ProfileAction, CancelLeavesTheProjectWithoutAProfile)
{
    QTemporaryDir dir;
    const auto path = project(dir, "gpt2-small", 2);
    ProfileRunner runner;
    runner.setExecutable(QStringLiteral(PS_PIPESTUDIO_EXE));
    QSignalSpy progress(&runner, &ProfileRunner::progress);
    QSignalSpy done(&runner, &ProfileRunner::finished);
    ASSERT_TRUE(runner.start(path, 2));
    // gpt2-small's 50k-token embedding takes the child well over a second to measure.
    QTest::qWait(500);
    ASSERT_TRUE(runner.isRunning());
    runner.cancel();
    if (done.isEmpty()) {
        ASSERT_TRUE(done.wait(10'000));
    }
    EXPECT_FALSE(done.front().at(0).toBool());
    EXPECT_TRUE(done.front().at(1).toString().contains(QStringLiteral("cancelled")));
    EXPECT_FALSE(ProjectStore::open(path.toStdString(), ProjectStore::Access::ReadOnly)
                     .loadProfile("cpu", "measured-cpu")
                     .has_value());
}
