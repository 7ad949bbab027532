#include "views/scale_dialog.h"

#include "cluster/device_catalog.h"
#include "plots/scale_out_plot.h"
#include "plots/scale_shape_plot.h"

#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSpinBox>
#include <QTabWidget>
#include <QTableWidget>
#include <QVBoxLayout>

namespace ps::gui {

ScaleDialog::ScaleDialog(const GptShape& model, QWidget* parent)
    : QDialog(parent)
    , m_model(model)
    , m_node(new QComboBox(this))
    , m_gpus(new QSpinBox(this))
    , m_batch(new QSpinBox(this))
    , m_sequenceParallel(new QCheckBox(tr("Sequence parallelism (LayerNorm and dropout sharded where t > 1)"), this))
    , m_zero1(new QCheckBox(tr("ZeRO-1 (optimizer states sharded over the data-parallel group)"), this))
    , m_overlap(new QCheckBox(tr("Overlap the gradient reduction with the last backward"), this))
    , m_summary(new QLabel(this))
    , m_table(new QTableWidget(this))
    , m_plot(new ScaleOutPlot(this))
    , m_shapes(new ScaleShapePlot(this))
    , m_plots(new QTabWidget(this))
{
    setWindowTitle(tr("Scale out"));
    for (const auto& n : builtinNodes())
        m_node->addItem(QString::fromStdString(n.name), QString::fromStdString(n.id));
    m_gpus->setRange(1, 1 << 20);
    m_gpus->setValue(64);
    m_batch->setRange(1, 1 << 24);
    m_batch->setValue(512);
    auto* form = new QFormLayout;
    form->addRow(tr("Node"), m_node);
    form->addRow(tr("GPUs"), m_gpus);
    form->addRow(tr("Global batch"), m_batch);
    form->addRow(tr("Options"), m_sequenceParallel);
    form->addRow(QString(), m_zero1);
    form->addRow(QString(), m_overlap);
    auto* run = new QPushButton(tr("Search"), this);
    form->addRow(run);
    m_summary->setWordWrap(true);
    const QStringList header { tr("t"), tr("p"), tr("d"), tr("micro-batch"), tr("schedule"), tr("recompute"),
        tr("options"), tr("TFLOP/s per GPU"), tr("samples/s"), tr("GiB per GPU") };
    m_table->setColumnCount(static_cast<int>(header.size()));
    m_table->setHorizontalHeaderLabels(header);
    m_table->verticalHeader()->setVisible(false);
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(form);
    layout->addWidget(m_summary);
    layout->addWidget(m_table, 2);
    m_plots->addTab(m_plot, tr("Against the GPU count"));
    m_plots->addTab(m_shapes, tr("Against (t, p, d)"));
    layout->addWidget(m_plots, 3);
    connect(run, &QPushButton::clicked, this, &ScaleDialog::search);
    resize(900, 700);
}

void ScaleDialog::setCluster(const QString& node, int gpus, int globalBatch)
{
    m_node->setCurrentIndex(std::max(0, m_node->findData(node)));
    m_gpus->setValue(gpus);
    m_batch->setValue(globalBatch);
}

void ScaleDialog::setFeatures(const ScaleFeatures& features)
{
    m_sequenceParallel->setChecked(features.sequenceParallel);
    m_zero1->setChecked(features.zero1);
    m_overlap->setChecked(features.overlapGradientReduce);
}

void ScaleDialog::search()
{
    const auto& node = findNode(m_node->currentData().toString().toStdString());
    const ScaleFeatures features { m_sequenceParallel->isChecked(), m_zero1->isChecked(), m_overlap->isChecked() };
    // Several searches (each GPU count of the curve), each simulating its leaders: a second or more
    // for the largest models, on this thread; the cursor says so.
    QApplication::setOverrideCursor(Qt::WaitCursor);
    m_result = scaleOut(m_model, node, m_gpus->value(), m_batch->value(), 20, features);
    QApplication::restoreOverrideCursor();
    const auto& ranked = m_result.search.ranked;
    m_summary->setText(
        tr("%1 layers x %2 wide, %3 heads, seq %4 (%5B parameters) on %6 GPUs of %7: %8 "
           "configurations priced, the leaders simulated; %9.")
            .arg(m_model.layers)
            .arg(m_model.hidden)
            .arg(m_model.heads)
            .arg(m_model.seq)
            .arg(m_model.parameters() / 1e9, 0, 'f', 1)
            .arg(m_gpus->value())
            .arg(QString::fromStdString(node.id))
            .arg(m_result.search.evaluated)
            .arg(ranked.size() < 20 ? tr("%1 fit").arg(ranked.size()) : tr("the 20 fastest that fit are shown")));
    m_table->setRowCount(static_cast<int>(ranked.size()));
    for (int r = 0; r < static_cast<int>(ranked.size()); ++r) {
        const auto& e = ranked[static_cast<std::size_t>(r)];
        const auto& c = e.config;
        const QStringList cells { QString::number(c.tensor), QString::number(c.pipeline), QString::number(c.data),
            QString::number(c.microBatch), QString::fromStdString(c.scheduleText()),
            QString::fromStdString(std::string(toString(c.recompute))),
            QStringList { c.sequenceParallel ? QStringLiteral("sp") : QString(),
                c.zero1 ? QStringLiteral("zero1") : QString(),
                c.overlapGradientReduce ? QStringLiteral("overlap") : QString() }
                .join(QLatin1Char(' '))
                .simplified(),
            QString::number(e.tflopsPerGpu, 'f', 1), QString::number(e.samplesPerSecond, 'f', 2),
            QString::number(e.peakBytes / (1 << 30), 'f', 1) };
        for (int col = 0; col < cells.size(); ++col)
            m_table->setItem(r, col, new QTableWidgetItem(cells[col]));
    }
    m_plot->setCurve(m_result.curve);
    m_shapes->setShapes(
        m_result.search.bestPerShape, static_cast<double>(DeviceCatalog::builtin().find(node.deviceId).memoryBytes));
}

void ScaleDialog::showPlot(int index)
{
    m_plots->setCurrentIndex(index);
}

} // namespace ps::gui
