#include "views/onnx_import_dialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QFileInfo>
#include <QFormLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSpinBox>
#include <QTableWidget>
#include <QVBoxLayout>

#include <algorithm>

namespace ps::gui {

OnnxImportDialog::OnnxImportDialog(const QString& path, QWidget* parent)
    : QDialog(parent)
    , m_dims(describeOnnxInputs(path.toStdString()))
{
    setWindowTitle(tr("Import ONNX: %1").arg(QFileInfo(path).fileName()));
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(new QLabel(tr("Inputs of the model, as written in the file:"), this));
    m_table = new QTableWidget(static_cast<int>(m_dims.size()), 5, this);
    m_table->setHorizontalHeaderLabels({ tr("Input"), tr("Dim"), tr("Role"), tr("In the file"), tr("Imported as") });
    m_table->verticalHeader()->setVisible(false);
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_table->horizontalHeader()->setStretchLastSection(true);
    layout->addWidget(m_table, 1);

    std::int64_t batch = 1;
    std::int64_t sequence = 0;
    for (const auto& d : m_dims) {
        if (d.role == DimRole::Batch && !d.dynamic)
            batch = d.exported;
        if (d.role == DimRole::Sequence)
            sequence = sequence > 0 ? sequence : d.dynamic ? 128 : d.exported;
    }
    auto* form = new QFormLayout;
    m_batch = new QSpinBox(this);
    m_batch->setRange(1, 1 << 20);
    m_batch->setValue(static_cast<int>(batch));
    m_sequence = new QSpinBox(this);
    m_sequence->setRange(1, 1 << 20);
    m_sequence->setValue(static_cast<int>(std::max<std::int64_t>(1, sequence)));
    m_sequence->setEnabled(sequence > 0);
    m_loss = new QComboBox(this);
    m_loss->addItem(tr("none (plan only)"), QString());
    m_loss->addItem(tr("cross-entropy (class labels over the last dimension)"), QStringLiteral("cross-entropy"));
    m_loss->addItem(tr("mse (float targets of the output's shape)"), QStringLiteral("mse"));
    form->addRow(tr("Batch size"), m_batch);
    form->addRow(tr("Sequence length"), m_sequence);
    form->addRow(tr("Loss on the first output"), m_loss);
    m_noWeights = new QCheckBox(tr("Without weights: plan from shapes only, the weights file is not read"), this);
    const auto missing = missingWeightFiles(path.toStdString());
    if (!missing.empty()) { // torch 2.x writes m.onnx.data beside m.onnx; without it only a plan is possible
        m_noWeights->setChecked(true);
        m_noWeights->setToolTip(
            tr("The model's weights file '%1' is not beside it.").arg(QString::fromStdString(missing.front())));
    }
    form->addRow(tr("Weights"), m_noWeights);
    layout->addLayout(form);
    m_note = new QLabel(this);
    m_note->setWordWrap(true);
    layout->addWidget(m_note);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
    buttons->button(QDialogButtonBox::Ok)->setText(tr("Import"));
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    layout->addWidget(buttons);
    connect(m_batch, &QSpinBox::valueChanged, this, &OnnxImportDialog::refresh);
    connect(m_sequence, &QSpinBox::valueChanged, this, &OnnxImportDialog::refresh);
    connect(m_noWeights, &QCheckBox::toggled, this, &OnnxImportDialog::refresh);
    refresh();
    resize(640, 420);
}

std::int64_t OnnxImportDialog::batch() const
{
    return m_batch->value();
}

std::int64_t OnnxImportDialog::sequence() const
{
    return m_sequence->isEnabled() ? m_sequence->value() : 0;
}

QString OnnxImportDialog::loss() const
{
    return m_loss->currentData().toString();
}

bool OnnxImportDialog::keepWeights() const
{
    return !m_noWeights->isChecked();
}

void OnnxImportDialog::setKeepWeights(bool keep)
{
    m_noWeights->setChecked(!keep);
}

void OnnxImportDialog::setBatch(int batch)
{
    m_batch->setValue(batch);
}

void OnnxImportDialog::setSequence(int sequence)
{
    m_sequence->setValue(sequence);
}

// What each dimension becomes at the sizes chosen, and whether the graph is re-specialised.
void OnnxImportDialog::refresh()
{
    bool respecialised = false;
    for (int row = 0; row < static_cast<int>(m_dims.size()); ++row) {
        const auto& d = m_dims[static_cast<std::size_t>(row)];
        auto size = d.size;
        if (d.role == DimRole::Batch)
            size = batch();
        else if (d.role == DimRole::Sequence && sequence() > 0)
            size = sequence();
        const bool resized = !d.dynamic && size != d.exported;
        respecialised = respecialised || resized;
        const QString file = d.dynamic
            ? (d.param.empty() ? tr("dynamic") : tr("dynamic '%1'").arg(QString::fromStdString(d.param)))
            : tr("fixed at %1").arg(d.exported);
        const QString imported = resized ? tr("%1 (re-specialised)").arg(size) : QString::number(size);
        const QStringList cells { QString::fromStdString(d.input), QString::number(d.axis),
            d.role == DimRole::Other ? QString() : QString::fromUtf8(toString(d.role)), file, imported };
        for (int c = 0; c < cells.size(); ++c)
            m_table->setItem(row, c, new QTableWidgetItem(cells[c]));
    }
    auto note = respecialised
        ? tr("The model was exported with fixed shapes: its input sizes and every shape constant that carries "
             "them are rewritten for the sizes asked for. Where a constant of the file fixes the size (a folded "
             "position table, say), the import stops and names the node; export with dynamic_axes then.")
        : tr("Imported at these sizes; nothing in the graph is rewritten.");
    if (m_noWeights->isChecked())
        note += tr(" Without weights the project plans, searches and simulates from shapes and costs; training "
                   "starts from fresh initial values, not the model's.");
    m_note->setText(note);
}

} // namespace ps::gui
