#include "app_launcher.h"
#include "models/project_session.h"
#include "plan/plan_editor.h"
#include "plots/op_histogram_plot.h"
#include "plots/scale_shape_plot.h"
#include "store/project_store.h"
#include "util/error.h"
#include "views/main_window.h"
#include "views/new_model_dialog.h"
#include "views/node_table_view.h"
#include "views/onnx_import_dialog.h"
#include "views/scale_dialog.h"
#include "views/summary_panel.h"
#include "zoo/model_config.h"

#include <QCheckBox>
#include <QDir>
#include <QDropEvent>
#include <QFile>
#include <QFileInfo>
#include <QFormLayout>
#include <QImage>
#include <QLabel>
#include <QLineEdit>
#include <QMimeData>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QStatusBar>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTest>
#include <QUrl>

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <tuple>

using namespace ps;
using namespace ps::gui;

namespace {

QString writeProject(const QTemporaryDir& dir, const std::string& model, int layers)
{
    auto c = zooPreset(model);
    c.layers = layers;
    c.seq = 64;
    const auto path = dir.filePath(QString::fromStdString(model) + QStringLiteral(".pstudio"));
    writeNewProject(path.toStdString(), buildZooModel(c), true);
    return path;
}

void dropFile(QWidget* target, const QString& path)
{
    QMimeData mime;
    mime.setUrls({ QUrl::fromLocalFile(path) });
    QDragEnterEvent enter(QPoint(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(target, &enter);
    if (!enter.isAccepted())
        return;
    QDropEvent drop(QPointF(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(target, &drop);
}

} // namespace

TEST(MainWindow, DropOpensAProjectAndFillsTheViews)
{
    QTemporaryDir dir;
    const auto path = writeProject(dir, "gpt2-small", 2);
    MainWindow window;
    QSignalSpy loaded(&window, &MainWindow::loadFinished);
    dropFile(&window, path);
    ASSERT_TRUE(loaded.wait(20'000)); // read on a worker thread, adopted on this one
    ASSERT_TRUE(window.session()->hasProject());
    EXPECT_EQ(window.session()->filePath(), path);
    EXPECT_TRUE(window.windowTitle().contains(QStringLiteral("gpt2-small")));
    EXPECT_EQ(window.nodeTable()->proxy()->rowCount(), static_cast<int>(window.session()->graph()->nodeCount()));
    EXPECT_GT(window.summaryPanel()->histogram()->barCount(), 5);
    EXPECT_EQ(window.recentFiles().front(), QFileInfo(path).absoluteFilePath());
}

TEST(MainWindow, DropIgnoresOtherFilesAndReportsBadProjects)
{
    QTemporaryDir dir;
    MainWindow window;
    QSignalSpy loaded(&window, &MainWindow::loadFinished);
    const auto text = dir.filePath(QStringLiteral("notes.txt"));
    QFile(text).open(QIODevice::WriteOnly);
    dropFile(&window, text);
    EXPECT_FALSE(window.isLoading());
    EXPECT_FALSE(window.session()->hasProject());

    const auto bad = dir.filePath(QStringLiteral("bad.pstudio"));
    QFile f(bad);
    ASSERT_TRUE(f.open(QIODevice::WriteOnly));
    f.write("garbage");
    f.close();
    dropFile(&window, bad);
    ASSERT_TRUE(loaded.wait(20'000));
    EXPECT_FALSE(loaded.front().front().toBool());
    EXPECT_FALSE(window.session()->hasProject());
    EXPECT_TRUE(window.statusBar()->currentMessage().contains(QStringLiteral("not a PipeStudio project")));
}

TEST(MainWindow, FilterBoxNarrowsTheTable)
{
    QTemporaryDir dir;
    MainWindow window;
    ASSERT_TRUE(window.openProject(writeProject(dir, "bert-base", 3)));
    QTest::keyClicks(window.nodeTable()->filterEdit(), QStringLiteral("encoder.layer.1.attention"));
    const auto rows = window.nodeTable()->proxy()->rowCount();
    EXPECT_GT(rows, 10);
    EXPECT_LT(rows, 40);
}

TEST(MainWindow, ScreenshotOfGpt2Medium)
{
    QDir().mkpath(QStringLiteral(PS_SCREENSHOT_DIR));
    const auto path = QStringLiteral(PS_SCREENSHOT_DIR "/main_window.png");
    GuiOptions options;
    options.model = "gpt2-medium";
    options.screenshot = path.toStdString();
    std::string error;
    ASSERT_TRUE(renderScreenshot(options, error)) << error;
    const QImage image(path);
    ASSERT_FALSE(image.isNull());
    EXPECT_EQ(image.width(), 1600);
    EXPECT_EQ(image.height(), 1000);
}

TEST(MainWindow, ScreenshotOfAStoredMixedPipePlan)
{
    QTemporaryDir dir;
    const auto project = writeProject(dir, "gpt2-small", 2);
    // A stored plan whose non-adjacent stages share devices (its own node order, a device map).
    auto store = ProjectStore::open(project.toStdString());
    const auto graph = store.loadGraph();
    const auto& device = DeviceCatalog::builtin().find("a100-40gb");
    const auto profile = estimateProfile(graph, device, {});
    PlanEditor editor(graph, profile, device, { ScheduleKind::OneFOneB, 4, 8, 1, 1 }, 1);
    Placement placement { editor.partition(), {} };
    for (std::uint32_t n = 0; n < graph.nodeCount(); ++n)
        placement.partition.nodeOrder.emplace_back(n);
    for (std::uint32_t d : { 0U, 1U, 0U, 1U })
        placement.stageDevices.emplace_back(d);
    editor.setPlacement(placement);
    const auto id = store.savePlan(editor.snapshot().plan, "mixed", &editor.snapshot().simulation);

    GuiOptions options;
    options.project = project.toStdString();
    options.view = "editor";
    options.plan = id;
    options.screenshot = dir.filePath(QStringLiteral("editor.png")).toStdString();
    std::string error;
    ASSERT_TRUE(renderScreenshot(options, error)) << error;
    EXPECT_FALSE(QImage(QString::fromStdString(options.screenshot)).isNull());
    options.plan = id + 100;
    EXPECT_FALSE(renderScreenshot(options, error));
    EXPECT_NE(error.find("has no plan " + std::to_string(id + 100)), std::string::npos) << error;
}

namespace {

// Written by the onnx_fixtures CTest fixture (tests/data/make_onnx_fixtures.py); empty without it.
QString resnetFixture()
{
    const char* env = std::getenv("PS_ONNX_FIXTURES");
    const auto file = QString::fromLocal8Bit(env ? env : PS_ONNX_FIXTURES_DIR) + QStringLiteral("/resnet18-op17.onnx");
    return QFile::exists(file) ? file : QString();
}

} // namespace

// File > Import ONNX's preview: AlexNet exported at batch 8 with fixed shapes shows its batch as
// fixed at 8 and defaults to it; asking for 128 marks the dimension re-specialised.
TEST(MainWindow, ImportDialogPreviewsFixedAndDynamicDimensions)
{
    const auto dir = QFileInfo(resnetFixture()).absolutePath() + QStringLiteral("/fixed_shapes/");
    if (!QFile::exists(dir + QStringLiteral("alexnet-fixed.onnx")))
        GTEST_SKIP() << "no ONNX fixtures (tests/data/make_onnx_fixtures.py needs Debian's python3-torch)";
    OnnxImportDialog fixed(dir + QStringLiteral("alexnet-fixed.onnx"));
    EXPECT_EQ(fixed.batch(), 8);
    EXPECT_EQ(fixed.sequence(), 0); // an image model: no sequence to ask for
    ASSERT_EQ(fixed.table()->rowCount(), 4);
    EXPECT_EQ(fixed.table()->item(0, 2)->text(), QStringLiteral("batch"));
    EXPECT_EQ(fixed.table()->item(0, 3)->text(), QStringLiteral("fixed at 8"));
    EXPECT_EQ(fixed.table()->item(0, 4)->text(), QStringLiteral("8"));
    fixed.setBatch(128);
    EXPECT_EQ(fixed.table()->item(0, 4)->text(), QStringLiteral("128 (re-specialised)"));
    QDir().mkpath(QStringLiteral(PS_SCREENSHOT_DIR));
    fixed.resize(720, 420);
    EXPECT_TRUE(fixed.grab().save(QStringLiteral(PS_SCREENSHOT_DIR "/import-dialog.png")));

    OnnxImportDialog dynamic(dir + QStringLiteral("tiny_lm-dynamic.onnx"));
    EXPECT_EQ(dynamic.batch(), 1);
    EXPECT_EQ(dynamic.sequence(), 128);
    EXPECT_EQ(dynamic.table()->item(1, 3)->text(), QStringLiteral("dynamic 'seq'"));
    EXPECT_TRUE(dynamic.loss().isEmpty());
    EXPECT_THROW(OnnxImportDialog(dir + QStringLiteral("manifest.json")), ps::Error);
}

// A torch 2.x export (weights in m.onnx.data) opened without its weights file: the dialog ticks
// "without weights" and says why, the import with weights fails naming the file, and the plan-only
// import works and says so. With the file beside it, the weights are read.
TEST(MainWindow, ImportDialogOffersAPlanOnlyImportWhenTheWeightsFileIsMissing)
{
    const QString source = QStringLiteral(PS_SOURCE_DIR "/tests/data/onnx_torch2/");
    QTemporaryDir dir;
    ASSERT_TRUE(dir.isValid());
    const auto alone = dir.filePath(QStringLiteral("gelu_amax.onnx"));
    ASSERT_TRUE(QFile::copy(source + QStringLiteral("gelu_amax.onnx"), alone));
    OnnxImportDialog withData(source + QStringLiteral("gelu_amax.onnx"));
    EXPECT_TRUE(withData.keepWeights());
    OnnxImportDialog dialog(alone);
    EXPECT_FALSE(dialog.keepWeights());
    QDir().mkpath(QStringLiteral(PS_SCREENSHOT_DIR));
    dialog.resize(720, 420);
    EXPECT_TRUE(dialog.grab().save(QStringLiteral(PS_SCREENSHOT_DIR "/import-dialog-no-weights.png")));
    try {
        (void)loadOnnxModel(alone, 0, 0, {}, true);
        ADD_FAILURE() << "imported with weights it does not have";
    } catch (const ps::Error& e) {
        EXPECT_NE(std::string(e.what()).find("gelu_amax.onnx.data"), std::string::npos) << e.what();
    }
    const auto planOnly = loadOnnxModel(alone, 0, 0, {}, false);
    EXPECT_TRUE(planOnly.summary.contains(QStringLiteral("without weights"))) << planOnly.summary.toStdString();
    ASSERT_TRUE(planOnly.graph);
    const auto full = loadOnnxModel(source + QStringLiteral("gelu_amax.onnx"), 0, 0, {}, true);
    EXPECT_EQ(planOnly.graph->parameterCount(), full.graph->parameterCount()); // the same shapes, no values
    EXPECT_FALSE(full.summary.contains(QStringLiteral("without weights")));
}

TEST(MainWindow, DropImportsAnOnnxModel)
{
    const auto file = resnetFixture();
    if (file.isEmpty())
        GTEST_SKIP() << "no ONNX fixtures (tests/data/make_onnx_fixtures.py needs Debian's python3-torch)";
    MainWindow window;
    QSignalSpy loaded(&window, &MainWindow::loadFinished);
    dropFile(&window, file);
    ASSERT_TRUE(loaded.wait(60'000));
    ASSERT_TRUE(window.session()->hasProject());
    EXPECT_EQ(window.session()->graph()->parameterCount(), 11'689'512);
    EXPECT_TRUE(window.session()->isModified()); // imported, not saved yet
    EXPECT_TRUE(window.statusBar()->currentMessage().contains(QStringLiteral("Imported resnet18-op17.onnx")));
}

// The import dialog's loss: the imported classifier ends in a scalar cross-entropy and can train.
TEST(MainWindow, ImportWithALossMakesTheModelTrainable)
{
    const auto file = resnetFixture();
    if (file.isEmpty())
        GTEST_SKIP() << "no ONNX fixtures (tests/data/make_onnx_fixtures.py needs Debian's python3-torch)";
    MainWindow window;
    QSignalSpy loaded(&window, &MainWindow::loadFinished);
    ASSERT_TRUE(window.importOnnxInBackground(file, 2, 128, QStringLiteral("cross-entropy")));
    ASSERT_TRUE(loaded.wait(60'000));
    const auto graph = window.session()->graph();
    ASSERT_TRUE(graph);
    const auto& loss = graph->tensor(graph->outputs().front());
    EXPECT_TRUE(loss.shape.empty());
    EXPECT_EQ(graph->node(loss.producer).op, ps::OpType::CrossEntropy);
    EXPECT_TRUE(window.statusBar()->currentMessage().contains(QStringLiteral("loss: cross-entropy")));
}

TEST(NewModelDialog, AResNetAsksForItsDepthAndImageSide)
{
    // File > New from zoo on the zoo's CNN: the fields say what a ResNet's layers and sequence are,
    // and the configuration builds the depth asked for.
    NewModelDialog dialog;
    const auto labelOf = [&](const char* field) {
        for (auto* spin : dialog.findChildren<QSpinBox*>()) {
            if (spin->objectName() == QLatin1String(field))
                if (auto* label = qobject_cast<QLabel*>(dialog.findChild<QFormLayout*>()->labelForField(spin)))
                    return label->text();
        }
        return QString();
    };
    dialog.selectModel(QStringLiteral("resnet50"));
    EXPECT_EQ(labelOf("layers"), QStringLiteral("Depth (18, 34, 50, 101, 152)"));
    EXPECT_EQ(labelOf("seq"), QStringLiteral("Image side (pixels)"));
    auto c = dialog.config();
    EXPECT_EQ(c.family, ModelFamily::ResNet);
    EXPECT_EQ(c.layers, 50);
    EXPECT_EQ(c.seq, 224);
    EXPECT_EQ(buildZooModel(c).parameterCount(), 25'557'032);
    dialog.show();
    QDir().mkpath(QStringLiteral(PS_SCREENSHOT_DIR));
    EXPECT_TRUE(dialog.grab().save(QStringLiteral(PS_SCREENSHOT_DIR "/new-model-resnet.png")));
    auto* fused = dialog.findChild<QCheckBox*>(QStringLiteral("fusedAttention"));
    ASSERT_NE(fused, nullptr);
    EXPECT_FALSE(fused->isEnabled()) << "a ResNet has no attention";
    dialog.selectModel(QStringLiteral("amoebanet-d"));
    EXPECT_EQ(labelOf("layers"), QStringLiteral("Normal cells (3, 6, 9, ...)"));
    EXPECT_EQ(labelOf("seq"), QStringLiteral("Image side (pixels)"));
    EXPECT_FALSE(fused->isEnabled()) << "AmoebaNet has no attention";
    c = dialog.config();
    EXPECT_EQ(c.family, ModelFamily::AmoebaNet);
    EXPECT_EQ(buildZooModel(c).parameterCount(), 81'505'540);
    EXPECT_TRUE(dialog.grab().save(QStringLiteral(PS_SCREENSHOT_DIR "/new-model-amoebanet.png")));
    dialog.selectModel(QStringLiteral("gpt2-small"));
    EXPECT_EQ(labelOf("layers"), QStringLiteral("Layers"));
    EXPECT_EQ(labelOf("seq"), QStringLiteral("Sequence length"));
    // Fused attention: one Attention node a layer (its dropout inside), the same parameters.
    EXPECT_TRUE(fused->isEnabled());
    EXPECT_FALSE(dialog.config().fusedAttention);
    fused->setChecked(true);
    c = dialog.config();
    EXPECT_TRUE(c.fusedAttention);
    const auto graph = buildZooModel(c);
    EXPECT_EQ(std::count_if(graph.nodes().begin(), graph.nodes().end(),
                  [](const ps::Node& n) { return n.op == ps::OpType::Attention; }),
        12);
    EXPECT_EQ(graph.parameterCount(), 124'439'808);
    EXPECT_TRUE(dialog.grab().save(QStringLiteral(PS_SCREENSHOT_DIR "/new-model-fused-attention.png")));
}

TEST(ScaleDialog, SearchesTheClusterAndPlotsTheScaleOutCurve)
{
    // Plan > Scale out on GPT-2 XL: the searched configurations (fastest first, all fitting) and
    // the best one's TFLOP/s and memory at 8, 16, ... GPUs up to those asked for.
    const auto model = gptShapeOf(buildZooModel(zooPreset("gpt2-xl")));
    ASSERT_TRUE(model.has_value());
    EXPECT_FALSE(gptShapeOf(buildZooModel(zooPreset("resnet-tiny"))).has_value());
    ScaleDialog dialog(*model);
    dialog.setCluster(QStringLiteral("dgx-a100-80gb"), 64, 512);
    dialog.search();
    const auto& r = dialog.result();
    ASSERT_FALSE(r.search.ranked.empty());
    EXPECT_EQ(dialog.table()->rowCount(), static_cast<int>(r.search.ranked.size()));
    EXPECT_EQ(dialog.table()->item(0, 0)->text().toInt(), r.search.ranked.front().config.tensor);
    for (const auto& e : r.search.ranked)
        EXPECT_TRUE(e.fits) << e.config.text();
    ASSERT_EQ(r.curve.size(), 4U); // 8, 16, 32, 64 GPUs
    EXPECT_EQ(r.curve.front().gpus, 8);
    EXPECT_EQ(r.curve.back().gpus, 64);
    EXPECT_DOUBLE_EQ(r.curve.back().best.samplesPerSecond, r.search.ranked.front().samplesPerSecond);
    EXPECT_EQ(dialog.table()->item(0, 6)->text(), QString()); // no options asked for
    // ZeRO-1 and the overlapped reduction for every configuration: the options column says so, and
    // the fastest is at least as fast.
    const double before = r.search.ranked.front().samplesPerSecond;
    dialog.setFeatures({ false, true, true });
    dialog.search();
    ASSERT_FALSE(dialog.result().search.ranked.empty());
    EXPECT_TRUE(dialog.result().search.ranked.front().config.zero1);
    EXPECT_EQ(dialog.table()->item(0, 6)->text(), QStringLiteral("zero1 overlap"));
    EXPECT_GE(dialog.result().search.ranked.front().samplesPerSecond, before);
    dialog.show();
    QDir().mkpath(QStringLiteral(PS_SCREENSHOT_DIR));
    EXPECT_TRUE(dialog.grab().save(QStringLiteral(PS_SCREENSHOT_DIR "/scale-out.png")));
    // Against (t, p, d): one bar per split of the 64 GPUs searched, labelled by it; the fastest
    // configuration overall is its split's bar.
    const auto& shapes = dialog.result().search.bestPerShape;
    ASSERT_FALSE(shapes.empty());
    ASSERT_EQ(dialog.shapePlot()->labels().size(), static_cast<qsizetype>(shapes.size()));
    std::set<std::tuple<int, int, int>> splits;
    for (const auto& e : shapes) {
        EXPECT_EQ(e.config.tensor * e.config.pipeline * e.config.data, 64) << e.config.text();
        EXPECT_TRUE(splits.insert({ e.config.tensor, e.config.pipeline, e.config.data }).second) << e.config.text();
    }
    const auto& best = dialog.result().search.ranked.front().config;
    const auto label = QStringLiteral("t%1 p%2 d%3").arg(best.tensor).arg(best.pipeline).arg(best.data);
    const auto at = dialog.shapePlot()->labels().indexOf(label);
    ASSERT_GE(at, 0) << label.toStdString();
    EXPECT_DOUBLE_EQ(
        shapes[static_cast<std::size_t>(at)].samplesPerSecond, dialog.result().search.ranked.front().samplesPerSecond);
    dialog.showPlot(1);
    EXPECT_TRUE(dialog.grab().save(QStringLiteral(PS_SCREENSHOT_DIR "/scale-out-shapes.png")));
}
