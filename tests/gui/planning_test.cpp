#include "cpu_profiler.h"
#include "models/node_table_model.h"
#include "models/partition_editor_data.h"
#include "models/plan_session.h"
#include "models/plans_model.h"
#include "models/scale_out.h"
#include "models/search_results_model.h"
#include "models/stage_balance_model.h"
#include "plots/partition_editor_plot.h"
#include "plots/timeline_plot.h"
#include "scale/scale_sim.h"
#include "store/project_store.h"
#include "views/auto_search_dialog.h"
#include "views/cluster_dock.h"
#include "views/main_window.h"
#include "views/node_table_view.h"
#include "views/plans_panel.h"
#include "zoo/model_config.h"

#include <QAbstractItemModelTester>
#include <QElapsedTimer>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>
#include <QToolBar>

#include <gtest/gtest.h>

using namespace ps;
using namespace ps::gui;

namespace {

std::shared_ptr<const Graph> gpt2(int layers, int seq = 256)
{
    auto c = zooPreset("gpt2-small");
    c.layers = layers;
    c.seq = seq;
    return std::make_shared<const Graph>(buildZooModel(c));
}

PlanSetup fourA100()
{
    PlanSetup s;
    s.deviceId = "a100-40gb";
    s.schedule = { ScheduleKind::OneFOneB, 4, 8, 1, 1 };
    s.microBatch = 4;
    return s;
}

// A saved 4-layer GPT-2 project and a session planning it on four A100s.
struct SavedProject
{
    QTemporaryDir dir;
    QString path = dir.filePath(QStringLiteral("p.pstudio"));
    std::shared_ptr<const Graph> graph = gpt2(4);
    PlanSession session;
    bool planned = false;

    SavedProject()
    {
        writeNewProject(path.toStdString(), *graph, false);
        planned = session.setModel(graph, fourA100());
    }
};

} // namespace

TEST(PlanningStudio, DraggingABoundaryUpdatesPlanBalanceAndSimulationLikeTheCli)
{
    PlanSession session;
    StageBalanceModel balance(&session);
    QAbstractItemModelTester tester(&balance, QAbstractItemModelTester::FailureReportingMode::Fatal);
    const auto graph = gpt2(4);
    ASSERT_TRUE(session.setModel(graph, fourA100()));
    PartitionEditorPlot editor(&session);
    QSignalSpy changed(&session, &PlanSession::planChanged);
    const auto before = session.editor().partition();
    const double forwardBefore = balance.value(0, StageBalanceModel::ForwardColumn);
    // The drag moves work between two stages: their devices' busy time changes (the iteration
    // only when one of them is the slowest).
    const double busyBefore = session.snapshot().simulation.devices.at(0).busyNs;

    // The line sits in the gap left of a stage's first node: x = node - 0.5.
    editor.dragBoundaryTo(1, static_cast<double>(before.stageStarts[1]) + 19.5);
    EXPECT_EQ(changed.count(), 1);
    EXPECT_EQ(session.editor().partition().stageStarts[1], before.stageStarts[1] + 20);
    EXPECT_GT(balance.value(0, StageBalanceModel::ForwardColumn), forwardBefore);
    EXPECT_GT(session.snapshot().simulation.devices.at(0).busyNs, busyBefore);

    // The CLI's `simulate --cuts` path on the same cuts gives the same iteration time.
    const auto& partition = session.editor().partition();
    const auto stages = computeStageCosts(*graph, session.profile(), partition, 4);
    const auto schedule = generateSchedule(fourA100().schedule);
    const auto cli = simulate({ schedule, stages, session.editor().cluster(), {}, 4, {}, {} });
    ASSERT_TRUE(session.snapshot().plan.feasible);
    EXPECT_NEAR(session.snapshot().simulation.iterationNs, cli.iterationNs, 1e-6 * cli.iterationNs);
    EXPECT_DOUBLE_EQ(balance.value(0, StageBalanceModel::ForwardColumn), stages[0].forwardNs / 1e6);
}

TEST(PlanningStudio, AMouseDragShowsWhereTheBoundaryLandsThenMovesIt)
{
    PlanSession session;
    ASSERT_TRUE(session.setModel(gpt2(4), fourA100()));
    PartitionEditorPlot editor(&session);
    editor.resize(1000, 500);
    editor.show();
    ASSERT_TRUE(QTest::qWaitForWindowExposed(&editor));
    QTest::qWait(50); // the queued replot lays the axes out
    auto* canvas = editor.findChildren<QWidget*>().front(); // the plot widget
    const auto before = session.editor().partition().stageStarts[1];
    const int y = canvas->height() / 2;
    const int from = static_cast<int>(editor.boundaryPixelX(1));
    QTest::mousePress(canvas, Qt::LeftButton, {}, QPoint(from, y));
    EXPECT_FALSE(editor.dragGuideX().has_value());
    const int to = from + 120;
    for (int x = from + 20; x <= to; x += 20)
        QTest::mouseMove(canvas, QPoint(x, y));
    ASSERT_TRUE(editor.dragGuideX().has_value()); // the guide follows the mouse
    const double guide = *editor.dragGuideX();
    EXPECT_GT(guide, static_cast<double>(before) - 0.5);
    EXPECT_EQ(session.editor().partition().stageStarts[1], before); // nothing moved yet
    QTest::mouseRelease(canvas, Qt::LeftButton, {}, QPoint(to, y));
    EXPECT_FALSE(editor.dragGuideX().has_value());
    EXPECT_EQ(static_cast<double>(session.editor().partition().stageStarts[1]) - 0.5, guide); // landed there
}

TEST(PlanningStudio, UndoRestoresTheExactPreviousPlan)
{
    PlanSession session;
    ASSERT_TRUE(session.setModel(gpt2(4), fourA100()));
    const auto original = session.editor().partition();
    const auto originalTime = session.snapshot().simulation.iterationNs;
    session.moveBoundary(2, original.stageStarts[2] - 15);
    session.addStage();
    EXPECT_EQ(session.editor().partition().stageCount(), 5);
    session.undoStack()->undo();
    session.undoStack()->undo();
    EXPECT_EQ(session.editor().partition(), original);
    EXPECT_DOUBLE_EQ(session.snapshot().simulation.iterationNs, originalTime);
    session.undoStack()->redo();
    EXPECT_EQ(session.editor().partition().stageStarts[2], original.stageStarts[2] - 15);
}

// The toolbar's Undo keeps its word (and width) whatever the command; the command is its tooltip.
TEST(PlanningStudio, ToolbarUndoKeepsItsWordAndNamesTheCommandInItsTooltip)
{
    MainWindow window;
    auto* session = window.planSession();
    ASSERT_TRUE(session->setModel(gpt2(4), fourA100()));
    const auto original = session->editor().partition();
    auto* toolbar = window.findChild<QToolBar*>(QStringLiteral("planToolbar"));
    ASSERT_NE(toolbar, nullptr);
    auto* undo = toolbar->actions().at(0);
    EXPECT_EQ(undo->text(), QStringLiteral("Undo"));
    EXPECT_FALSE(undo->isEnabled());
    const auto width = toolbar->widgetForAction(undo)->sizeHint().width();
    session->moveBoundary(2, original.stageStarts[2] - 15);
    EXPECT_TRUE(undo->isEnabled());
    EXPECT_EQ(undo->text(), QStringLiteral("Undo"));
    EXPECT_TRUE(undo->toolTip().startsWith(QStringLiteral("Undo "))) << undo->toolTip().toStdString();
    EXPECT_EQ(toolbar->widgetForAction(undo)->sizeHint().width(), width);
    undo->trigger();
    EXPECT_EQ(session->editor().partition(), original);
    EXPECT_FALSE(undo->isEnabled());
}

TEST(PlanningStudio, KeyboardNudgesTheSelectedBoundary)
{
    PlanSession session;
    ASSERT_TRUE(session.setModel(gpt2(2), fourA100()));
    PartitionEditorPlot editor(&session);
    editor.selectBoundary(1);
    const auto start = session.editor().partition().stageStarts[1];
    QTest::keyClick(&editor, Qt::Key_Right);
    EXPECT_EQ(session.editor().partition().stageStarts[1], start + 1);
    QTest::keyClick(&editor, Qt::Key_Left, Qt::ShiftModifier);
    EXPECT_EQ(session.editor().partition().stageStarts[1], start - 9);
}

TEST(PlanningStudio, OverCapacityStagesAreFlagged)
{
    PlanSession session;
    StageBalanceModel balance(&session);
    auto setup = fourA100();
    setup.limits = { 5e8, false, false }; // 500 MB per device and no way to trade memory
    ASSERT_TRUE(session.setModel(gpt2(4, 512), setup));
    bool anyOver = false;
    for (int s = 0; s < balance.rowCount(); ++s) {
        anyOver = anyOver || balance.isOverCapacity(s);
        if (balance.isOverCapacity(s)) {
            EXPECT_GT(
                balance.value(s, StageBalanceModel::PeakColumn), balance.value(s, StageBalanceModel::CapacityColumn));
            EXPECT_TRUE(balance.index(s, StageBalanceModel::PeakColumn).data(Qt::ForegroundRole).isValid());
        }
    }
    EXPECT_TRUE(anyOver);
    EXPECT_FALSE(session.snapshot().plan.feasible);
}

TEST(PlanningStudio, CancelStopsASearchWithinOneSecond)
{
    PlanSession session;
    auto setup = fourA100();
    setup.schedule.stages = 8;
    ASSERT_TRUE(session.setModel(std::make_shared<const Graph>(buildZooModel(zooPreset("gpt2-xl"))), setup));
    AutoSearchDialog dialog(&session);
    QSignalSpy finished(&dialog, &AutoSearchDialog::searchFinished);
    SearchRequest request;
    request.device = DeviceCatalog::builtin().find("a100-40gb");
    request.microBatch = 4;
    for (int k = 1; k <= 8; ++k)
        request.schedules.push_back({ ScheduleKind::KFKB, 8, 16, k, 1 });
    request.algorithms = allPlanAlgorithms();
    dialog.start(request);
    ASSERT_TRUE(dialog.isRunning());
    QTest::qWait(50);
    QElapsedTimer timer;
    timer.start();
    dialog.cancel();
    ASSERT_TRUE(finished.wait(5000));
    EXPECT_LT(timer.elapsed(), 1000);
    EXPECT_FALSE(dialog.isRunning());
    EXPECT_LT(dialog.results()->rowCount(), 8 * 6); // stopped early
}

TEST(PlanningStudio, SearchResultsApplyToTheEditor)
{
    PlanSession session;
    ASSERT_TRUE(session.setModel(gpt2(4), fourA100()));
    AutoSearchDialog dialog(&session);
    QAbstractItemModelTester tester(dialog.results(), QAbstractItemModelTester::FailureReportingMode::Fatal);
    QSignalSpy finished(&dialog, &AutoSearchDialog::searchFinished);
    auto request = dialog.request();
    request.algorithms = { PlanAlgorithm::DawnPiper, PlanAlgorithm::GPipe };
    request.schedules = { { ScheduleKind::OneFOneB, 3, 6, 1, 1 } };
    dialog.start(request);
    ASSERT_TRUE(finished.wait(20000));
    ASSERT_EQ(dialog.results()->rowCount(), 2);
    // Ranked by the simulated iteration (with communication), which the table shows.
    const auto* model = dialog.results();
    const auto throughput = [&](int row) {
        return model->index(row, SearchResultsModel::ThroughputColumn).data().toString().toDouble();
    };
    EXPECT_FALSE(model->index(0, SearchResultsModel::IterationColumn).data().toString().isEmpty());
    EXPECT_GE(throughput(0), throughput(1));
    const auto best = dialog.results()->results().front();
    ASSERT_TRUE(dialog.applyResult(0));
    EXPECT_EQ(session.editor().partition(), best.partition);
    EXPECT_EQ(session.editor().schedule().stages, 3);
}

TEST(PlanningStudio, PlansPanelSavesComparesAppliesAndDeletes)
{
    SavedProject project;
    ASSERT_TRUE(project.planned);
    auto& session = project.session;
    const auto& path = project.path;
    PlansModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
    model.setProject(path);
    PlansPanel panel(&session, &model);
    const auto first = session.editor().partition();
    ASSERT_TRUE(panel.saveCurrent(QStringLiteral("balanced")));
    session.moveBoundary(1, first.stageStarts[1] + 30);
    ASSERT_TRUE(panel.saveCurrent(QStringLiteral("lopsided")));
    ASSERT_EQ(model.rowCount(), 2);
    EXPECT_EQ(model.index(0, PlansModel::NameColumn).data().toString(), QStringLiteral("balanced")); // fastest first
    EXPECT_GT(model.index(0, PlansModel::IterationColumn).data(PlansModel::ValueRole).toDouble(), 0);
    const auto lines = panel.comparison(0, 1);
    EXPECT_GT(lines.size(), PlansModel::ColumnCount);
    EXPECT_NE(lines[PlansModel::CutsColumn][1], lines[PlansModel::CutsColumn][2]);
    EXPECT_TRUE(model.setData(model.index(1, PlansModel::NameColumn), QStringLiteral("renamed")));
    model.reload();
    EXPECT_EQ(model.index(1, PlansModel::NameColumn).data().toString(), QStringLiteral("renamed"));
    QSignalSpy messages(&panel, &PlansPanel::message);
    panel.table()->selectionModel()->select(
        model.index(0, 0), QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
    ASSERT_EQ(panel.table()->selectionModel()->selectedRows().size(), 1);
    ASSERT_TRUE(panel.applySelected()) << (messages.isEmpty() ? std::string()
                                                              : messages.back().at(0).toString().toStdString());
    EXPECT_EQ(session.editor().partition(), first);
    ASSERT_TRUE(panel.deleteSelected());
    EXPECT_EQ(model.rowCount(), 1);
}

TEST(PlanningStudio, NodeSelectionSyncsWithTheEditor)
{
    QTemporaryDir dir;
    const auto path = dir.filePath(QStringLiteral("p.pstudio"));
    writeNewProject(path.toStdString(), *gpt2(2), false);
    MainWindow window;
    ASSERT_TRUE(window.openProject(path));
    ASSERT_TRUE(window.planSession()->hasPlan());
    EXPECT_GT(window.timeline()->blockCount(), 0);
    Q_EMIT window.editor()->nodeClicked(17);
    const auto current = window.nodeTable()->table()->currentIndex();
    ASSERT_TRUE(current.isValid());
    EXPECT_EQ(current.data(NodeTableModel::NodeIdRole).toInt(), 17);
}

TEST(PlanningStudio, ClusterShapeReachesTheSimulation)
{
    PlanSession session;
    auto setup = fourA100();
    setup.devicesPerNode = 2; // 4 stages over 2 nodes: the middle cut crosses the network
    setup.interNodeGBps = 0.5;
    ASSERT_TRUE(session.setModel(gpt2(4), setup));
    EXPECT_EQ(session.editor().cluster().nodes, 2);
    const double slow = session.snapshot().simulation.iterationNs;
    setup.interNodeGBps = 50;
    ASSERT_TRUE(session.configure(setup));
    EXPECT_LT(session.snapshot().simulation.iterationNs, slow);
    setup.nicsPerNode = 4;
    ASSERT_TRUE(session.configure(setup));
    EXPECT_EQ(session.editor().cluster().nicsPerNode, 4);
    QSignalSpy failed(&session, &PlanSession::operationFailed);
    setup.deviceId = "tpu-v9";
    EXPECT_FALSE(session.configure(setup));
    EXPECT_EQ(failed.count(), 1);
    EXPECT_TRUE(session.hasPlan()); // the previous plan stays
}

TEST(PlanningStudio, PlansWithTheProjectsMeasuredCpuProfile)
{
    QTemporaryDir dir;
    const auto path = dir.filePath(QStringLiteral("measured.pstudio"));
    ModelConfig c = zooPreset("gpt2-tiny");
    c.seq = 16;
    c.microBatch = 4;
    const auto graph = buildZooModel(c);
    writeNewProject(path.toStdString(), graph, false);
    profiler::CpuProfileOptions options { 0, 1, 0, 1 };
    const auto run = profiler::measureOnCpu(graph, options);
    const auto measured = profiler::toProfile(graph, run, run);
    ProjectStore::open(path.toStdString()).saveProfile(measured, 4, 4);

    MainWindow window;
    ASSERT_TRUE(window.openProject(path));
    auto* dock = window.clusterDock();
    dock->setDevice(QStringLiteral("cpu"));
    ASSERT_TRUE(dock->setProfileSource(QStringLiteral("measured-cpu")));
    ASSERT_TRUE(dock->apply());
    auto* plan = window.planSession();
    EXPECT_EQ(plan->profile().source, "measured-cpu");
    for (std::size_t i = 0; i < graph.nodeCount(); ++i)
        EXPECT_NEAR(plan->profile().nodes[i].forwardNs.at(4), run.nodes[i].forwardNs.median, 1.0);
    // Not measured on an A100: planning there with it is refused and the plan stays.
    dock->setDevice(QStringLiteral("a100-40gb"));
    EXPECT_FALSE(dock->apply());
    EXPECT_EQ(plan->profile().source, "measured-cpu");
    ASSERT_TRUE(dock->setProfileSource(QStringLiteral("analytical")));
    ASSERT_TRUE(dock->apply());
    EXPECT_EQ(plan->profile().source, "analytical");
}

// The Cluster dock's precision reaches every number of the plan: the profile's setting, its times
// and the model states' bytes.
TEST(PlanningStudio, PrecisionSelectorRepricesThePlan)
{
    MainWindow window;
    ModelConfig c = zooPreset("gpt2-tiny");
    c.seq = 64;
    c.microBatch = 8;
    ASSERT_TRUE(window.planSession()->setModel(std::make_shared<const Graph>(buildZooModel(c)), PlanSetup {}));
    auto* dock = window.clusterDock();
    auto* plan = window.planSession();
    ASSERT_TRUE(dock->setPrecision(QStringLiteral("fp32")));
    ASSERT_TRUE(dock->apply());
    EXPECT_EQ(plan->profile().setup.precision, Precision::Fp32);
    const double fp32 = plan->snapshot().simulation.iterationNs;
    ASSERT_TRUE(dock->setPrecision(QStringLiteral("bf16")));
    ASSERT_TRUE(dock->apply());
    EXPECT_EQ(plan->setup().precision, Precision::Bf16);
    EXPECT_EQ(plan->profile().setup.precision, Precision::Bf16);
    EXPECT_LT(plan->snapshot().simulation.iterationNs, fp32);
    EXPECT_EQ(dock->setup().precision, Precision::Bf16); // the form shows what the session plans with
    EXPECT_FALSE(dock->setPrecision(QStringLiteral("fp8")));
}

// The Cluster dock prices the applied pipeline (p = its devices, its schedule and micro-batches)
// across nodes at the tensor and data parallel sizes it is given: what `pipestudio scale` prices
// for that configuration, and a reason where the sizes, the schedule or the model do not apply.
TEST(PlanningStudio, ClusterDockPricesThePipelineAcrossNodes)
{
    MainWindow window;
    ModelConfig c = zooPreset("gpt2-small");
    c.microBatch = 2;
    const auto graph = std::make_shared<const Graph>(buildZooModel(c));
    PlanSetup setup;
    setup.schedule = parseScheduleSpec("1f1b", 4, 8);
    ASSERT_TRUE(window.planSession()->setModel(graph, setup));
    window.resize(1600, 1000);
    auto* dock = window.clusterDock();
    ASSERT_TRUE(dock->setClusterSizes({ "dgx-a100-80gb", 2, 4, Recompute::Selective }));
    const auto& priced = dock->clusterScale();
    ASSERT_TRUE(priced.estimate.valid) << priced.text;
    EXPECT_EQ(priced.config.text(), "t2 p4 d4 b2 1f1b selective");
    EXPECT_EQ(priced.config.globalBatch, 4 * 2 * 8);
    EXPECT_EQ(priced.gpus, 32);
    EXPECT_EQ(priced.nodes, 4);
    const auto direct = simulateScale(*gptShapeOf(*graph), priced.config, findNode("dgx-a100-80gb"));
    EXPECT_DOUBLE_EQ(priced.estimate.tflopsPerGpu, direct.tflopsPerGpu);
    EXPECT_DOUBLE_EQ(priced.estimate.peakBytes, direct.peakBytes);
    EXPECT_GT(priced.estimate.tensorCommSeconds, 0);
    EXPECT_GT(priced.estimate.dataCommSeconds, 0);
    EXPECT_NE(priced.text.find("32 GPUs on 4 dgx-a100-80gb nodes"), std::string::npos) << priced.text;
    EXPECT_NE(priced.text.find("TFLOP/s per GPU"), std::string::npos);
    dock->resize(460, dock->heightForWidth(460) > 0 ? dock->heightForWidth(460) : dock->sizeHint().height());
    EXPECT_TRUE(dock->grab().save(QStringLiteral(PS_SCREENSHOT_DIR "/cluster-dock-scale.png")));

    // More replicas: the global batch grows with them, the per-GPU memory does not.
    ASSERT_TRUE(dock->setClusterSizes({ "dgx-a100-80gb", 2, 8, Recompute::Selective }));
    EXPECT_EQ(dock->clusterScale().config.globalBatch, 8 * 2 * 8);
    EXPECT_DOUBLE_EQ(dock->clusterScale().estimate.peakBytes, direct.peakBytes);
    // 8-way tensor parallelism does not divide GPT-2 small's 12 heads: refused, with the reason shown.
    ASSERT_TRUE(dock->setClusterSizes({ "dgx-a100-80gb", 8, 1, Recompute::Selective }));
    EXPECT_FALSE(dock->clusterScale().estimate.valid);
    EXPECT_FALSE(dock->clusterScale().estimate.reason.empty());
    EXPECT_NE(dock->clusterScale().text.find(dock->clusterScale().estimate.reason), std::string::npos);
    EXPECT_FALSE(dock->setClusterSizes({ "dgx-z9000", 1, 1, Recompute::None }));
    // The interleaved schedule (which the studio's stage model does not plan) priced directly: p is
    // the devices, v the stages per device; a Mixed-pipe plan is refused.
    const auto interleaved = priceClusterSizes(
        gptShapeOf(*graph), { "dgx-a100-80gb", 2, 2, Recompute::Full }, parseScheduleSpec("interleaved:3", 12, 8), 2);
    EXPECT_EQ(interleaved.config.text(), "t2 p4 d2 b2 interleaved:3 full");
    EXPECT_TRUE(interleaved.estimate.valid) << interleaved.text;
    const auto mixed = priceClusterSizes(gptShapeOf(*graph), {}, parseScheduleSpec("1f1b", 4, 8), 2, true);
    EXPECT_NE(mixed.text.find("Mixed-pipe"), std::string::npos);
    // A schedule the layout does not price, and a model that is not a GPT decoder.
    setup.schedule = parseScheduleSpec("gpipe", 4, 8);
    ASSERT_TRUE(window.planSession()->configure(setup));
    EXPECT_FALSE(dock->clusterScale().estimate.valid);
    EXPECT_NE(dock->clusterScale().text.find("1F1B, interleaved, kFkB and ZB-H1"), std::string::npos);
    // kFkB and ZB-H1 plans are priced with their schedule.
    const auto zb = priceClusterSizes(
        gptShapeOf(*graph), { "dgx-a100-80gb", 2, 2, Recompute::Full }, parseScheduleSpec("zb-h1", 4, 8), 2);
    EXPECT_EQ(zb.config.text(), "t2 p4 d2 b2 zb-h1 full");
    EXPECT_TRUE(zb.estimate.valid) << zb.text;
    ASSERT_TRUE(window.planSession()->setModel(std::make_shared<const Graph>(buildZooModel(zooPreset("mlp"))), setup));
    EXPECT_NE(dock->clusterScale().text.find("GPT decoders"), std::string::npos);
}

TEST(PlanningStudio, StagesSharingADeviceAreEditedSavedAndApplied)
{
    SavedProject project;
    ASSERT_TRUE(project.planned);
    auto& session = project.session;
    const auto& path = project.path;
    PartitionEditorPlot plot(&session);
    // Four stages, non-adjacent ones sharing a device (a Mixed-pipe placement), over the graph's
    // own order written out as the plan's order.
    Placement placement { session.editor().partition(), {} };
    for (std::uint32_t n = 0; n < project.graph->nodeCount(); ++n)
        placement.partition.nodeOrder.emplace_back(n);
    for (std::uint32_t d : { 0U, 1U, 0U, 1U })
        placement.stageDevices.emplace_back(d);
    session.applyPlacement(placement, QStringLiteral("Apply mixed"));
    ASSERT_TRUE(session.editor().dataflow());
    const auto data = buildPartitionEditorData(session);
    EXPECT_TRUE(data.sharedDevices);
    EXPECT_EQ(data.stageDevices, (QVector<int> { 0, 1, 0, 1 }));
    EXPECT_EQ(session.snapshot().simulation.devices.size(), 2U); // four stages on two devices

    // A drag moves the cut along the plan's order; the devices stay; undo brings it back.
    const auto start = session.editor().partition().stageStarts[1];
    plot.dragBoundaryTo(1, static_cast<double>(start + 5) - 0.5);
    EXPECT_EQ(session.editor().partition().stageStarts[1], start + 5);
    EXPECT_EQ(session.editor().placement().stageDevices, placement.stageDevices);
    const auto edited = session.editor().placement();

    // Saved with its map and order, and applied back after another edit.
    PlansModel model;
    model.setProject(path);
    PlansPanel panel(&session, &model);
    ASSERT_TRUE(panel.saveCurrent(QStringLiteral("mixed")));
    session.moveBoundary(1, session.editor().partition().stageStarts[1] - 3);
    panel.table()->selectionModel()->select(
        model.index(0, 0), QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
    QSignalSpy messages(&panel, &PlansPanel::message);
    ASSERT_TRUE(panel.applySelected()) << (messages.isEmpty() ? std::string()
                                                              : messages.back().at(0).toString().toStdString());
    EXPECT_EQ(session.editor().placement(), edited);
    session.undoStack()->undo(); // the apply
    session.undoStack()->undo(); // the -3 move
    session.undoStack()->undo(); // the drag
    EXPECT_EQ(session.editor().partition().stageStarts[1], start);
    session.undoStack()->undo(); // the placement itself
    EXPECT_FALSE(session.editor().dataflow());

    // A map that leaves a stage without a device is refused, and nothing changes.
    QSignalSpy failed(&session, &PlanSession::operationFailed);
    placement.stageDevices.pop_back();
    session.applyPlacement(placement, QStringLiteral("broken"));
    EXPECT_EQ(failed.size(), 1);
    EXPECT_FALSE(session.editor().dataflow());
}
