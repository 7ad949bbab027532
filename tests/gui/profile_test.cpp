// Profile > On this machine: a real `pipestudio profile` child, its progress and cancel, and the
// views switching to the measured profile.
#include "graph/loss.h"
#include "models/plan_session.h"
#include "models/profile_compare_model.h"
#include "models/profile_runner.h"
#include "models/project_session.h"
#include "models/run_launcher.h"
#include "onnx/onnx_import.h"
#include "store/project_store.h"
#include "views/main_window.h"
#include "views/profile_dock.h"
#include "views/trace_import_dialog.h"
#include "zoo/model_config.h"

#include <QDir>
#include <QJsonArray>
#include <QPushButton>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTest>

#include <gtest/gtest.h>

#include <algorithm>
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

// Profile > Import profiler trace: the preview's coverage report is `import-trace --dry-run
// --json`'s (a real torch 2.15 trace of an MLP training step), a minimum coverage above it
// disables Import, and Import stores the imported profile.
TEST(TraceImport, PreviewShowsTheCoverageReportAndImportStoresTheProfile)
{
    QTemporaryDir dir;
    auto c = zooPreset("mlp");
    c.layers = 4;
    c.hidden = 1024;
    c.vocab = 1000;
    c.microBatch = 128;
    c.dropout = 0;
    const auto path = dir.filePath(QStringLiteral("mlp.pstudio"));
    writeNewProject(path.toStdString(), buildZooModel(c), true);
    const auto trace = QStringLiteral(PS_SOURCE_DIR "/tests/data/traces/mlp_train_step_cpu.json");
    TraceImportDialog dialog(path, QStringLiteral(PS_PIPESTUDIO_EXE));
    dialog.setTracePath(trace);
    QSignalSpy previewed(&dialog, &TraceImportDialog::previewed);
    QSignalSpy failed(&dialog, &TraceImportDialog::failed);
    dialog.preview();
    ASSERT_TRUE(previewed.wait(60'000)) << (failed.isEmpty() ? "" : failed.front().front().toString().toStdString());
    const auto& r = dialog.report();
    EXPECT_EQ(r.value(QStringLiteral("nodes_matched")).toInt(), 15);
    EXPECT_FALSE(r.value(QStringLiteral("saved")).toBool());
    const double coverage = r.value(QStringLiteral("coverage")).toDouble();
    EXPECT_GT(coverage, 0.5);
    EXPECT_TRUE(dialog.summaryText().contains(QStringLiteral("15 of")));
    EXPECT_TRUE(dialog.summaryText().contains(QString::number(100 * coverage, 'f', 1) + QStringLiteral("%")));
    EXPECT_EQ(dialog.unmatchedTable()->rowCount(), r.value(QStringLiteral("unmatched_names")).toArray().size());
    EXPECT_TRUE(dialog.importButton()->isEnabled());
    dialog.resize(760, 480);
    dialog.show();
    QDir().mkpath(QStringLiteral(PS_SCREENSHOT_DIR));
    EXPECT_TRUE(dialog.grab().save(QStringLiteral(PS_SCREENSHOT_DIR "/trace-import-dialog.png")));
    dialog.setMinimumCoverage(std::min(1.0, coverage + 0.01)); // above what the trace covers
    EXPECT_FALSE(dialog.importButton()->isEnabled());
    EXPECT_TRUE(dialog.summaryText().contains(QStringLiteral("refused")));
    EXPECT_FALSE(ProjectStore::open(path.toStdString(), ProjectStore::Access::ReadOnly)
                     .loadProfile("cpu", "imported")
                     .has_value()); // a preview stores nothing
    dialog.setMinimumCoverage(0.5);
    QSignalSpy imported(&dialog, &TraceImportDialog::imported);
    dialog.import();
    ASSERT_TRUE(imported.wait(60'000)) << (failed.isEmpty() ? "" : failed.back().front().toString().toStdString());
    EXPECT_TRUE(ProjectStore::open(path.toStdString(), ProjectStore::Access::ReadOnly)
                    .loadProfile("cpu", "imported")
                    .has_value());
    EXPECT_EQ(dialog.result(), QDialog::Accepted);
}

// A with_stack trace (module calls) of a torch.export model: the report names the module calls.
TEST(TraceImport, AWithStackTracesModuleCallsAreInTheReport)
{
    QTemporaryDir dir;
    const auto path = dir.filePath(QStringLiteral("gpt.pstudio"));
    writeNewProject(path.toStdString(),
        attachLoss(importOnnx(PS_SOURCE_DIR "/tests/data/onnx_torch2/gpt_sdpa_gelu_tanh.onnx").graph, LossSpec {}),
        true);
    TraceImportDialog dialog(path, QStringLiteral(PS_PIPESTUDIO_EXE));
    dialog.setTracePath(QStringLiteral(PS_SOURCE_DIR "/tests/data/traces/gpt_with_stack_cpu.json.gz"));
    QSignalSpy previewed(&dialog, &TraceImportDialog::previewed);
    QSignalSpy failed(&dialog, &TraceImportDialog::failed);
    dialog.preview();
    ASSERT_TRUE(previewed.wait(60'000)) << (failed.isEmpty() ? "" : failed.front().front().toString().toStdString());
    EXPECT_TRUE(dialog.summaryText().contains(QStringLiteral("within 51 module calls named after 17 modules")))
        << dialog.summaryText().toStdString();
    EXPECT_TRUE(dialog.importButton()->isEnabled());
    dialog.resize(760, 480);
    dialog.show();
    QDir().mkpath(QStringLiteral(PS_SCREENSHOT_DIR));
    EXPECT_TRUE(dialog.grab().save(QStringLiteral(PS_SCREENSHOT_DIR "/trace-import-modules.png")));
}
