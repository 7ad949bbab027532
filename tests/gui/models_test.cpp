#include "models/node_table_model.h"
#include "models/project_session.h"
#include "models/summary_model.h"
#include "store/project_store.h"
#include "zoo/model_config.h"

#include <QAbstractItemModelTester>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QTemporaryDir>

#include <gtest/gtest.h>

#include <fstream>

using namespace ps;
using namespace ps::gui;

namespace {

std::shared_ptr<const Graph> smallGpt2(int layers = 2)
{
    auto c = zooPreset("gpt2-small");
    c.layers = layers;
    c.seq = 32;
    return std::make_shared<const Graph>(buildZooModel(c));
}

QString cell(const QAbstractItemModel& m, int row, int column, int role = Qt::DisplayRole)
{
    return m.data(m.index(row, column), role).toString();
}

} // namespace

TEST(NodeTableModel, PassesModelTesterAcrossResets)
{
    NodeTableModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
    EXPECT_EQ(model.rowCount(), 0);
    const auto graph = smallGpt2();
    model.setGraph(graph);
    EXPECT_EQ(model.rowCount(), static_cast<int>(graph->nodeCount()));
    EXPECT_EQ(model.columnCount(), NodeTableModel::ColumnCount);
    model.setGraph(smallGpt2(1));
    model.setGraph(nullptr);
    EXPECT_EQ(model.rowCount(), 0);
}

TEST(NodeTableModel, ShowsNodeFacts)
{
    NodeTableModel model;
    const auto graph = smallGpt2();
    model.setGraph(graph);
    int row = -1;
    for (int r = 0; r < model.rowCount(); ++r) {
        if (cell(model, r, NodeTableModel::NameColumn) == QStringLiteral("h.1.attn.c_attn.matmul"))
            row = r;
    }
    ASSERT_GE(row, 0);
    EXPECT_EQ(cell(model, row, NodeTableModel::OpColumn), QStringLiteral("MatMul"));
    EXPECT_EQ(cell(model, row, NodeTableModel::ScopeColumn), QStringLiteral("h.1.attn"));
    EXPECT_EQ(cell(model, row, NodeTableModel::LayerColumn), QStringLiteral("1"));
    EXPECT_EQ(cell(model, row, NodeTableModel::ShapeColumn), QStringLiteral("(1, 32, 2304)"));
    EXPECT_EQ(
        model.data(model.index(row, NodeTableModel::ParamsColumn), NodeTableModel::SortRole).toLongLong(), 768 * 2304);
    EXPECT_DOUBLE_EQ(model.data(model.index(row, NodeTableModel::FlopsColumn), NodeTableModel::SortRole).toDouble(),
        2.0 * 32 * 768 * 2304);
}

TEST(NodeTableModel, ProxyFiltersAndSortsNumerically)
{
    NodeTableModel model;
    model.setGraph(smallGpt2());
    QSortFilterProxyModel proxy;
    QAbstractItemModelTester tester(&proxy, QAbstractItemModelTester::FailureReportingMode::Fatal);
    proxy.setSourceModel(&model);
    proxy.setFilterKeyColumn(-1);
    proxy.setFilterCaseSensitivity(Qt::CaseInsensitive);
    proxy.setFilterFixedString(QStringLiteral("softmax"));
    EXPECT_EQ(proxy.rowCount(), 2); // one per layer
    proxy.setFilterFixedString(QString());
    proxy.setSortRole(NodeTableModel::SortRole);
    proxy.sort(NodeTableModel::FlopsColumn, Qt::DescendingOrder);
    EXPECT_EQ(cell(proxy, 0, NodeTableModel::NameColumn), QStringLiteral("lm_head")); // 2*T*C*V dominates
}

TEST(SummaryModel, PassesModelTesterAndShowsParameters)
{
    SummaryModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
    const auto graph = smallGpt2();
    model.setSummary(summarizeGraph(*graph));
    ASSERT_GT(model.rowCount(), 5);
    bool found = false;
    for (int r = 0; r < model.rowCount(); ++r) {
        if (cell(model, r, 0) == QStringLiteral("Parameters")) {
            found = true;
            EXPECT_TRUE(cell(model, r, 1).contains(QStringLiteral("M (")));
        }
    }
    EXPECT_TRUE(found);
    model.setSummary(std::nullopt);
    EXPECT_EQ(model.rowCount(), 0);
}

TEST(ProjectSession, FailedOpenKeepsTheCurrentProjectAndSaysWhy)
{
    QTemporaryDir dir;
    ProjectSession session;
    ASSERT_TRUE(session.newFromZoo(zooPreset("mlp")));
    const auto path = dir.filePath(QStringLiteral("junk.pstudio"));
    std::ofstream(path.toStdString()) << "definitely not sqlite";
    QSignalSpy failed(&session, &ProjectSession::operationFailed);
    QSignalSpy changed(&session, &ProjectSession::projectChanged);
    EXPECT_FALSE(session.open(path));
    ASSERT_EQ(failed.count(), 1);
    EXPECT_TRUE(failed.at(0).at(0).toString().contains(QStringLiteral("junk.pstudio' is not a PipeStudio project")));
    EXPECT_EQ(changed.count(), 0);
    EXPECT_EQ(session.graph()->info().name, "mlp");
}

TEST(ProjectSession, SaveAsThenOpenRoundTrips)
{
    QTemporaryDir dir;
    ProjectSession session;
    ASSERT_TRUE(session.newFromZoo(zooPreset("mlp")));
    EXPECT_TRUE(session.isModified());
    EXPECT_FALSE(session.save()); // no file yet
    const auto path = dir.filePath(QStringLiteral("p.pstudio"));
    ASSERT_TRUE(session.saveAs(path));
    EXPECT_FALSE(session.isModified());
    ProjectSession other;
    ASSERT_TRUE(other.open(path));
    EXPECT_EQ(*other.graph(), *session.graph());
}

// Save and Save As of an opened project keep what the file holds besides the graph (runs here).
TEST(ProjectSession, SavingAnOpenedProjectKeepsItsRuns)
{
    QTemporaryDir dir;
    const auto path = dir.filePath(QStringLiteral("p.pstudio"));
    {
        ProjectSession session;
        ASSERT_TRUE(session.newFromZoo(zooPreset("mlp")));
        ASSERT_TRUE(session.saveAs(path));
    }
    std::int64_t runId = 0;
    {
        auto store = ProjectStore::open(path.toStdString());
        runId = store.beginRun(R"({"steps": 1})");
        store.endRun(runId, "finished");
    }
    ProjectSession session;
    ASSERT_TRUE(session.open(path));
    ASSERT_TRUE(session.save());
    EXPECT_EQ(ProjectStore::open(path.toStdString(), ProjectStore::Access::ReadOnly).runStatus(runId), "finished");
    const auto copy = dir.filePath(QStringLiteral("copy.pstudio"));
    ASSERT_TRUE(session.saveAs(copy));
    EXPECT_EQ(session.filePath(), copy);
    const auto copied = ProjectStore::open(copy.toStdString(), ProjectStore::Access::ReadOnly);
    EXPECT_EQ(copied.runStatus(runId), "finished");
    EXPECT_EQ(copied.loadGraph(), *session.graph());
}
