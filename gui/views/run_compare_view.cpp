#include "views/run_compare_view.h"

#include "graph/graph_summary.h"
#include "models/runs_model.h"
#include "plots/compare_timeline_plot.h"
#include "runtime/run_comparison.h"
#include "store/project_store.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>

#include <cmath>

namespace ps::gui {
namespace {

    QTableWidget* makeTable(const QStringList& headers, QWidget* parent)
    {
        auto* t = new QTableWidget(0, static_cast<int>(headers.size()), parent);
        t->setHorizontalHeaderLabels(headers);
        t->verticalHeader()->setVisible(false);
        t->setEditTriggers(QAbstractItemView::NoEditTriggers);
        t->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
        return t;
    }

    QString percent(double predicted, double measured)
    {
        if (measured <= 0)
            return QString();
        const double error = 100 * (predicted / measured - 1);
        return QStringLiteral("%1%").arg(std::abs(error) < 0.05 ? 0.0 : error, 0, 'f', 1); // never "-0.0%"
    }

    QString bytes(double b)
    {
        return QString::fromStdString(formatBytes(b));
    }

} // namespace

RunCompareView::RunCompareView(RunsModel* runs, QWidget* parent)
    : QWidget(parent)
    , m_runs(runs)
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    auto* row = new QHBoxLayout;
    m_run = new QComboBox(this);
    m_run->setSizeAdjustPolicy(QComboBox::AdjustToContents); // "run 12 (interrupted)" in full
    m_iteration = new QComboBox(this);
    m_iteration->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    m_summary = new QLabel(this);
    m_summary->setWordWrap(true);
    row->addWidget(new QLabel(tr("Run"), this));
    row->addWidget(m_run);
    row->addWidget(new QLabel(tr("Iteration"), this));
    row->addWidget(m_iteration);
    row->addWidget(m_summary, 1);
    layout->addLayout(row);
    auto* split = new QSplitter(Qt::Horizontal, this);
    m_plot = new CompareTimelinePlot(split);
    auto* tables = new QSplitter(Qt::Vertical, split);
    m_actions = makeTable({ tr("Action"), tr("Device"), tr("Predicted ms"), tr("Measured ms"), tr("Error") }, tables);
    m_peaks = makeTable(
        { tr("Device"), tr("Predicted peak"), tr("At simulated timing"), tr("Measured peak"), tr("Error") }, tables);
    m_peaks->horizontalHeaderItem(1)->setToolTip(
        tr("With as many boundary messages waiting as any timing of the other devices can leave"));
    m_peaks->horizontalHeaderItem(2)->setToolTip(tr("With the messages the simulated timing leaves waiting"));
    split->setStretchFactor(0, 3);
    split->setStretchFactor(1, 2);
    split->setSizes({ 700, 420 });
    layout->addWidget(split, 1);
    connect(runs, &QAbstractItemModel::modelReset, this, &RunCompareView::fillRuns);
    connect(m_run, &QComboBox::activated, this, [this] { showRun(m_run->currentData().toLongLong()); });
    connect(m_iteration, &QComboBox::activated, this,
        [this] { showRun(m_run->currentData().toLongLong(), m_iteration->currentData().toLongLong()); });
    fillRuns();
}

RunCompareView::~RunCompareView() = default;

void RunCompareView::fillRuns()
{
    const auto current = m_comparison ? m_comparison->runId : 0;
    m_run->clear();
    for (int r = 0; r < m_runs->rowCount(); ++r) {
        const auto* row = m_runs->row(r);
        const auto what = RunsModel::isImportedTrace(*row) ? tr("imported trace") : QString::fromStdString(row->status);
        m_run->addItem(tr("run %1 (%2)").arg(row->id).arg(what), QVariant::fromValue(row->id));
    }
    if (const int i = m_run->findData(QVariant::fromValue(current)); i >= 0)
        m_run->setCurrentIndex(i);
}

bool RunCompareView::showRun(std::int64_t runId, std::int64_t iteration)
{
    try {
        const auto store = ProjectStore::open(m_runs->projectPath().toStdString(), ProjectStore::Access::ReadOnly);
        m_comparison =
            std::make_unique<RunComparison>(engine::compareRun(store, runId, { iteration, {}, true, false }));
    } catch (const std::exception& e) {
        m_comparison.reset();
        m_plot->clear();
        m_actions->setRowCount(0);
        m_peaks->setRowCount(0);
        m_summary->setText(QString::fromStdString(e.what()));
        Q_EMIT failed(tr("Cannot compare run %1: %2").arg(runId).arg(QString::fromStdString(e.what())));
        return false;
    }
    const auto& c = *m_comparison;
    if (const int i = m_run->findData(QVariant::fromValue(runId)); i >= 0)
        m_run->setCurrentIndex(i);
    m_iteration->clear();
    for (auto it : c.iterations)
        m_iteration->addItem(QString::number(it), QVariant::fromValue(it));
    m_iteration->setCurrentIndex(m_iteration->findData(QVariant::fromValue(c.iteration)));
    m_summary->setText(tr("Iteration: predicted %1 ms (simulated, %2 profile), measured %3 ms (this iteration)")
                           .arg(c.predicted.iterationNs / 1e6, 0, 'f', 2)
                           .arg(QString::fromStdString(c.profileSource))
                           .arg(c.measuredIterationNs / 1e6, 0, 'f', 2));
    m_plot->setComparison(c);
    fillTables();
    return true;
}

namespace {

    QString deviceName(const RunComparison& c, int device)
    {
        return device >= 0 && device < static_cast<int>(c.deviceNames.size())
            ? QString::fromStdString(c.deviceNames[static_cast<std::size_t>(device)])
            : QStringLiteral("device %1").arg(device);
    }

} // namespace

void RunCompareView::fillTables()
{
    const auto& c = *m_comparison;
    m_actions->setRowCount(static_cast<int>(c.largestDifferences.size()));
    for (int r = 0; r < m_actions->rowCount(); ++r) {
        const auto& a = c.largestDifferences[static_cast<std::size_t>(r)];
        const QStringList cells { QString::fromStdString(a.action), deviceName(c, a.device),
            QString::number(a.predictedMs, 'f', 3), QString::number(a.measuredMs, 'f', 3),
            percent(a.predictedMs, a.measuredMs) };
        for (int k = 0; k < cells.size(); ++k)
            m_actions->setItem(r, k, new QTableWidgetItem(cells[k]));
    }
    m_peaks->setRowCount(static_cast<int>(c.peaks.size()));
    for (int r = 0; r < m_peaks->rowCount(); ++r) {
        const auto& p = c.peaks[static_cast<std::size_t>(r)];
        const bool measured = p.measuredBytes > 0; // a trace imported as a run records no memory
        const QStringList cells { deviceName(c, p.device), bytes(p.predictedBytes), bytes(p.predictedTimedBytes),
            measured ? bytes(static_cast<double>(p.measuredBytes)) : tr("not measured"),
            measured ? percent(p.predictedBytes, static_cast<double>(p.measuredBytes)) : QString() };
        for (int k = 0; k < cells.size(); ++k)
            m_peaks->setItem(r, k, new QTableWidgetItem(cells[k]));
    }
}

} // namespace ps::gui
