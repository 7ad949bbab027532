// File > Import ONNX as one dialog: the live preview against what `pipestudio info` says of the
// imported project, and an imported language model with a vocabulary under 256 (200) launched from
// the studio on random tokens from its own vocabulary.
#include "models/plan_session.h"
#include "models/project_session.h"
#include "models/run_launcher.h"
#include "models/run_monitor_model.h"
#include "util/error.h"
#include "views/launch_dialog.h"
#include "views/main_window.h"
#include "views/onnx_import_dialog.h"

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTest>

#include <gtest/gtest.h>

#include <cmath>

using namespace ps;
using namespace ps::gui;

namespace {

QString v200Model()
{
    return QStringLiteral(PS_ONNX_FIXTURES_DIR "/fixed_shapes/tiny_lm_v200-dynamic.onnx");
}

QJsonObject infoJson(const QString& project)
{
    QProcess p;
    p.start(QStringLiteral(PS_PIPESTUDIO_EXE), { QStringLiteral("info"), project, QStringLiteral("--json") });
    EXPECT_TRUE(p.waitForFinished(60'000));
    EXPECT_EQ(p.exitCode(), 0) << p.readAllStandardError().toStdString();
    return QJsonDocument::fromJson(p.readAllStandardOutput()).object();
}

} // namespace

TEST(ImportDialog, PreviewMatchesInfoAndAVocabulary200ModelTrainsFromTheStudio)
{
    if (!QFile::exists(v200Model()))
        GTEST_SKIP() << "no ONNX fixtures (tests/data/make_onnx_fixtures.py needs Debian's python3-torch)";
    OnnxImportDialog dialog(v200Model());
    EXPECT_EQ(dialog.table()->item(1, 3)->text(), QStringLiteral("dynamic 'seq'"));
    dialog.setBatch(2);
    dialog.setSequence(16);
    dialog.setLoss(QStringLiteral("cross-entropy"));
    EXPECT_THROW(dialog.setLoss(QStringLiteral("hinge")), ps::Error);
    EXPECT_THROW(dialog.setDim("heads", 4), ps::Error); // batch and seq are its only dynamic dimensions
    const auto preview = dialog.preview();
    ASSERT_TRUE(preview.error.isEmpty()) << preview.error.toStdString();
    EXPECT_TRUE(dialog.importButton()->isEnabled());
    EXPECT_TRUE(preview.opaque.isEmpty()) << preview.opaque.join(QStringLiteral(", ")).toStdString();
    ASSERT_FALSE(preview.inputs.isEmpty());
    EXPECT_TRUE(preview.inputs.front().contains(QStringLiteral("[2, 16]"))) << preview.inputs.front().toStdString();
    // Another sequence length changes what would be imported, not only the table.
    dialog.setSequence(64);
    EXPECT_TRUE(dialog.preview().inputs.front().contains(QStringLiteral("[2, 64]")));
    EXPECT_EQ(dialog.preview().parameters, preview.parameters);
    dialog.setSequence(16);
    // Past the position table (64 rows), the import fails and Import is disabled, naming why.
    dialog.setSequence(65);
    EXPECT_TRUE(dialog.preview().error.contains(QStringLiteral("at the dynamic sizes batch=2, seq=65")))
        << dialog.preview().error.toStdString();
    EXPECT_FALSE(dialog.importButton()->isEnabled());
    dialog.setSequence(16);
    EXPECT_TRUE(dialog.preview().error.isEmpty());
    // The user's word over the parameter rules: the position table kept constant (64 x 32), a
    // misspelt name refused by name.
    dialog.setOverrides(QString(), QStringLiteral("wpe.weight"));
    EXPECT_EQ(dialog.preview().parameters, preview.parameters - 64 * 32);
    dialog.setOverrides(QStringLiteral("wpe.weigth"), QString());
    EXPECT_TRUE(dialog.preview().error.contains(QStringLiteral("'wpe.weigth'")))
        << dialog.preview().error.toStdString();
    EXPECT_FALSE(dialog.importButton()->isEnabled());
    dialog.setOverrides(QString(), QString());
    EXPECT_EQ(dialog.preview().parameters, preview.parameters);
    // Edits preview on a worker after a pause; Import waits for the preview of the current choices.
    dialog.setSequence(20);
    EXPECT_TRUE(dialog.previewPending());
    EXPECT_FALSE(dialog.importButton()->isEnabled());
    QElapsedTimer waited;
    waited.start();
    while (dialog.previewPending() && waited.elapsed() < 60'000)
        QTest::qWait(20);
    ASSERT_FALSE(dialog.previewPending());
    EXPECT_TRUE(dialog.importButton()->isEnabled());
    EXPECT_TRUE(dialog.preview().inputs.front().contains(QStringLiteral("[2, 20]")));
    dialog.setSequence(16);
    QDir().mkpath(QStringLiteral(PS_SCREENSHOT_DIR));
    dialog.resize(720, 560);
    EXPECT_TRUE(dialog.grab().save(QStringLiteral(PS_SCREENSHOT_DIR "/import-dialog-preview.png")));

    // Import with the dialog's choices, save, and ask the CLI what the project holds.
    QTemporaryDir dir;
    ASSERT_TRUE(dir.isValid());
    MainWindow window;
    window.launcher()->setExecutable(QStringLiteral(PS_PIPESTUDIO_EXE));
    QSignalSpy loaded(&window, &MainWindow::loadFinished);
    ASSERT_TRUE(window.importOnnxInBackground(v200Model(), dialog.options(), dialog.loss()));
    ASSERT_TRUE(loaded.wait(60'000));
    ASSERT_TRUE(loaded.front().front().toBool());
    const auto project = dir.filePath(QStringLiteral("v200.pstudio"));
    ASSERT_TRUE(window.session()->saveAs(project));
    const auto info = infoJson(project);
    EXPECT_EQ(info.value(QStringLiteral("nodes")).toInteger(), static_cast<qint64>(preview.nodes));
    EXPECT_EQ(info.value(QStringLiteral("parameters")).toInteger(), preview.parameters);
    EXPECT_EQ(info.value(QStringLiteral("parameter_bytes")).toInteger(), preview.parameterBytes);
    EXPECT_EQ(info.value(QStringLiteral("micro_batch")).toInteger(), 2);

    // Run > Launch on random tokens: drawn from the model's 200-token vocabulary, 3 steps.
    auto setup = window.planSession()->setup();
    setup.schedule = { ScheduleKind::OneFOneB, 2, 2, 1, 1 };
    ASSERT_TRUE(window.planSession()->configure(setup));
    LaunchDialog launch(window.planSession(), project);
    launch.setRandomTokens(true);
    launch.setSteps(3);
    ASSERT_TRUE(launch.canLaunch()) << launch.refusal().toStdString();
    auto* launcher = window.launcher();
    QSignalSpy done(launcher, &RunLauncher::finished);
    ASSERT_TRUE(window.launch(launch));
    ASSERT_TRUE(done.wait(120'000)) << "the training child did not end";
    const auto outcome = done.front().front().value<RunOutcome>();
    EXPECT_EQ(outcome.status, QStringLiteral("finished")) << outcome.message.toStdString();
    ASSERT_EQ(window.monitorModel()->steps().size(), 3u);
    EXPECT_TRUE(std::isfinite(window.monitorModel()->steps().back().loss));
}

// A second named dynamic dimension ("mem", a memory of its own length) gets its own size in its
// row; the batch and the sequence keep theirs.
TEST(ImportDialog, AnotherNamedDynamicDimensionIsSizedByItsName)
{
    const auto model = QStringLiteral(PS_ONNX_FIXTURES_DIR "/fixed_shapes/cross_mem-dynamic.onnx");
    if (!QFile::exists(model))
        GTEST_SKIP() << "no ONNX fixtures (tests/data/make_onnx_fixtures.py needs Debian's python3-torch)";
    OnnxImportDialog dialog(model);
    ASSERT_EQ(dialog.table()->rowCount(), 6); // input and memory, three dimensions each
    EXPECT_NE(dialog.table()->cellWidget(4, 4), nullptr); // memory[1] 'mem'
    EXPECT_EQ(dialog.table()->cellWidget(1, 4), nullptr); // input[1] 'seq' follows the sequence box
    dialog.setBatch(2);
    dialog.setSequence(5);
    dialog.setDim("mem", 9);
    EXPECT_EQ(dialog.dims(), (std::map<std::string, std::int64_t> { { "mem", 9 } }));
    const auto& preview = dialog.preview();
    ASSERT_TRUE(preview.error.isEmpty()) << preview.error.toStdString();
    EXPECT_TRUE(preview.inputs.join(QStringLiteral("; ")).contains(QStringLiteral("memory [2, 9, 16]")))
        << preview.inputs.join(QStringLiteral("; ")).toStdString();
    EXPECT_TRUE(preview.inputs.join(QStringLiteral("; ")).contains(QStringLiteral("input [2, 5, 16]")));
    EXPECT_EQ(dialog.table()->item(4, 4)->text(), QStringLiteral("9"));
}
