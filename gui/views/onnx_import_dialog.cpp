#include "views/onnx_import_dialog.h"

#include "graph/graph_summary.h"
#include "models/background_job.h"
#include "models/project_session.h"
#include "util/error.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QTableWidget>
#include <QTimer>
#include <QVBoxLayout>

#include <algorithm>
#include <set>

namespace ps::gui {

namespace {

    QSpinBox* sizeBox(QWidget* parent, std::int64_t value)
    {
        auto* box = new QSpinBox(parent);
        box->setRange(1, 1 << 20);
        box->setValue(static_cast<int>(std::clamp<std::int64_t>(value, 1, 1 << 20)));
        return box;
    }

    std::set<std::string> names(const QLineEdit* edit)
    {
        std::set<std::string> out;
        for (const auto& n : edit->text().split(QLatin1Char(','), Qt::SkipEmptyParts)) {
            if (const auto trimmed = n.trimmed(); !trimmed.isEmpty())
                out.insert(trimmed.toStdString());
        }
        return out;
    }

    // A named dynamic dimension that is neither the batch nor named like a sequence ("past",
    // "patches"): the importer would give it the sequence size; the dialog sizes it by its name.
    bool otherNamedDim(const OnnxInputDim& d)
    {
        return d.dynamic && !d.param.empty() && d.role == DimRole::Sequence
            && QString::fromStdString(d.param).toLower().indexOf(QStringLiteral("seq")) < 0;
    }

    QString shapeText(const Shape& shape)
    {
        QStringList dims;
        for (const auto d : shape)
            dims << QString::number(d);
        return QStringLiteral("[%1]").arg(dims.join(QStringLiteral(", ")));
    }

    // What Import would give (the same options, weights included: the mask rules read values).
    ImportPreview computeImportPreview(const QString& path, const OnnxImportOptions& options, const QString& loss)
    {
        ImportPreview preview;
        try {
            const auto loaded = loadOnnxModel(path, options, loss);
            const auto summary = summarizeGraph(*loaded.graph);
            preview.nodes = summary.nodeCount;
            preview.parameters = summary.parameterCount;
            preview.parameterBytes = summary.parameterBytes;
            std::map<std::string, int> opaque;
            for (const auto& node : loaded.graph->nodes()) {
                if (node.op == OpType::Opaque)
                    ++opaque[node.opaqueType.empty() ? "Opaque" : node.opaqueType];
            }
            for (const auto& [op, count] : opaque)
                preview.opaque << QStringLiteral("%1 x%2").arg(QString::fromStdString(op)).arg(count);
            for (const auto& t : loaded.graph->tensors()) {
                if (t.kind == TensorKind::Input)
                    preview.inputs << QStringLiteral("%1 %2 %3")
                                          .arg(QString::fromStdString(t.name), shapeText(t.shape),
                                              QString::fromUtf8(toString(t.dtype).data()));
            }
        } catch (const std::exception& e) {
            preview.error = QString::fromStdString(e.what());
        }
        return preview;
    }

} // namespace

OnnxImportDialog::OnnxImportDialog(const QString& path, QWidget* parent)
    : QDialog(parent)
    , m_path(path)
    , m_dims(describeOnnxInputs(path.toStdString()))
{
    setWindowTitle(tr("Import ONNX: %1").arg(QFileInfo(path).fileName()));
    auto* layout = new QVBoxLayout(this);
    const auto [batch, sequence] = addInputTable(layout);
    addChoices(layout, batch, sequence);
    addPreviewAndButtons(layout);
    connectEdits();
    refresh();
    // As tall as its rows (a model has a few inputs), not the window: the rest goes below the preview.
    m_table->setMaximumHeight(std::max(96,
        m_table->horizontalHeader()->sizeHint().height() + m_table->verticalHeader()->length()
            + 2 * m_table->frameWidth() + 4));
    resize(680, 620);
}

std::pair<std::int64_t, std::int64_t> OnnxImportDialog::addInputTable(QVBoxLayout* layout)
{
    layout->addWidget(new QLabel(tr("Inputs of the model, as written in the file:"), this));
    m_table = new QTableWidget(static_cast<int>(m_dims.size()), 5, this);
    m_table->setHorizontalHeaderLabels({ tr("Input"), tr("Dim"), tr("Role"), tr("In the file"), tr("Imported as") });
    m_table->verticalHeader()->setVisible(false);
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_table->horizontalHeader()->setStretchLastSection(true);
    layout->addWidget(m_table);

    std::int64_t batch = 1;
    std::int64_t sequence = 0;
    for (int row = 0; row < static_cast<int>(m_dims.size()); ++row) {
        const auto& d = m_dims[static_cast<std::size_t>(row)];
        if (d.role == DimRole::Batch && !d.dynamic)
            batch = d.exported;
        if (d.role == DimRole::Sequence)
            sequence = sequence > 0 ? sequence : d.dynamic ? 128 : d.exported;
        // Another named dynamic dimension gets its own size, edited in its row (once per name).
        if (otherNamedDim(d) && !m_named.contains(d.param)) {
            auto* box = sizeBox(m_table, d.size);
            box->setToolTip(tr("Size of the dimension '%1'").arg(QString::fromStdString(d.param)));
            m_table->setCellWidget(row, 4, box);
            m_named.emplace(d.param, box);
            connect(box, &QSpinBox::valueChanged, this, &OnnxImportDialog::refresh);
        }
    }
    return { batch, sequence };
}

void OnnxImportDialog::addChoices(QVBoxLayout* layout, std::int64_t batch, std::int64_t sequence)
{
    auto* form = new QFormLayout;
    m_batch = sizeBox(this, batch);
    m_sequence = sizeBox(this, std::max<std::int64_t>(1, sequence));
    m_sequence->setEnabled(sequence > 0);
    m_loss = new QComboBox(this);
    m_loss->addItem(tr("none (plan only)"), QString());
    m_loss->addItem(tr("cross-entropy (class labels over the last dimension)"), QStringLiteral("cross-entropy"));
    m_loss->addItem(tr("mse (float targets of the output's shape)"), QStringLiteral("mse"));
    form->addRow(tr("Batch size"), m_batch);
    form->addRow(tr("Sequence length"), m_sequence);
    form->addRow(tr("Loss on the first output"), m_loss);
    m_noWeights = new QCheckBox(tr("Without weights: plan from shapes only, the weights file is not read"), this);
    const auto missing = missingWeightFiles(m_path.toStdString());
    if (!missing.empty()) { // torch 2.x writes m.onnx.data beside m.onnx; without it only a plan is possible
        m_noWeights->setChecked(true);
        m_noWeights->setToolTip(
            tr("The model's weights file '%1' is not beside it.").arg(QString::fromStdString(missing.front())));
    }
    form->addRow(tr("Weights"), m_noWeights);
    m_parameters = new QLineEdit(this);
    m_parameters->setPlaceholderText(tr("initializer names, comma-separated (default: the importer's rules)"));
    m_parameters->setToolTip(tr("Trained whatever the rules decide (floating-point initializers only)"));
    m_constants = new QLineEdit(this);
    m_constants->setPlaceholderText(tr("initializer names, comma-separated: buffers the rules took for weights"));
    m_constants->setToolTip(tr("Never trained: no gradient, no optimizer state"));
    form->addRow(tr("Train as parameters"), m_parameters);
    form->addRow(tr("Keep as constants"), m_constants);
    layout->addLayout(form);
    m_note = new QLabel(this);
    m_note->setWordWrap(true);
    layout->addWidget(m_note);
}

void OnnxImportDialog::addPreviewAndButtons(QVBoxLayout* layout)
{
    auto* previewBox = new QGroupBox(tr("Preview (what Import gives at these choices)"), this);
    auto* previewLayout = new QVBoxLayout(previewBox);
    m_previewLabel = new QLabel(previewBox);
    m_previewLabel->setWordWrap(true);
    m_previewLabel->setTextInteractionFlags(Qt::TextSelectableByMouse);
    previewLayout->addWidget(m_previewLabel);
    layout->addWidget(previewBox);

    layout->addStretch(1);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
    m_import = buttons->button(QDialogButtonBox::Ok);
    m_import->setText(tr("Import"));
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    layout->addWidget(buttons);
}

// The preview imports the model (without weights): it follows edits after a pause, not per key.
void OnnxImportDialog::connectEdits()
{
    m_previewTimer = new QTimer(this);
    m_previewTimer->setSingleShot(true);
    m_previewTimer->setInterval(250);
    connect(m_previewTimer, &QTimer::timeout, this, &OnnxImportDialog::startPreview);
    m_job = new BackgroundJob(this);
    connect(m_job, &BackgroundJob::finished, this, &OnnxImportDialog::previewArrived);
    connect(m_batch, &QSpinBox::valueChanged, this, &OnnxImportDialog::refresh);
    connect(m_sequence, &QSpinBox::valueChanged, this, &OnnxImportDialog::refresh);
    connect(m_noWeights, &QCheckBox::toggled, this, &OnnxImportDialog::refresh);
    connect(m_loss, &QComboBox::currentIndexChanged, this, &OnnxImportDialog::refresh);
    connect(m_parameters, &QLineEdit::textChanged, this, &OnnxImportDialog::refresh);
    connect(m_constants, &QLineEdit::textChanged, this, &OnnxImportDialog::refresh);
}

std::int64_t OnnxImportDialog::batch() const
{
    return m_batch->value();
}

std::int64_t OnnxImportDialog::sequence() const
{
    return m_sequence->isEnabled() ? m_sequence->value() : 0;
}

std::map<std::string, std::int64_t> OnnxImportDialog::dims() const
{
    std::map<std::string, std::int64_t> out;
    for (const auto& [name, box] : m_named)
        out.emplace(name, box->value());
    return out;
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

void OnnxImportDialog::setLoss(const QString& loss)
{
    const int index = m_loss->findData(loss);
    if (index < 0)
        throw Error("unknown loss '" + loss.toStdString() + "' (cross-entropy, mse or none)");
    m_loss->setCurrentIndex(index);
}

void OnnxImportDialog::setDim(const std::string& name, int size)
{
    const auto it = m_named.find(name);
    if (it == m_named.end())
        throw Error("the model has no other dynamic dimension named '" + name + "'");
    it->second->setValue(size);
}

void OnnxImportDialog::setOverrides(const QString& parameters, const QString& constants)
{
    m_parameters->setText(parameters);
    m_constants->setText(constants);
}

OnnxImportOptions OnnxImportDialog::options() const
{
    OnnxImportOptions o;
    o.batch = batch();
    if (sequence() > 0)
        o.sequence = sequence();
    o.dims = dims();
    o.keepWeights = keepWeights();
    o.parameters = names(m_parameters);
    o.constants = names(m_constants);
    return o;
}

const ImportPreview& OnnxImportDialog::preview()
{
    if (m_previewStale) {
        m_previewTimer->stop();
        m_preview = computeImportPreview(m_path, options(), loss());
        m_previewStale = false;
        showPreview();
    }
    return m_preview;
}

// What each dimension becomes at the sizes chosen, and whether the graph is re-specialised.
void OnnxImportDialog::refresh()
{
    bool respecialised = false;
    for (int row = 0; row < static_cast<int>(m_dims.size()); ++row) {
        const auto& d = m_dims[static_cast<std::size_t>(row)];
        auto size = d.size;
        if (const auto named = m_named.find(d.param); d.dynamic && named != m_named.end())
            size = named->second->value();
        else if (d.role == DimRole::Batch)
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
    ++m_generation;
    m_previewStale = true;
    m_import->setEnabled(false); // until the preview of these choices says the import works
    m_previewLabel->setText(tr("Updating…"));
    m_previewTimer->start();
}

// Starts the preview of the current choices on a worker (an import reads and infers the whole
// model); while one runs, it waits for it and tries again. Results of older choices are dropped.
void OnnxImportDialog::startPreview()
{
    if (m_job->isRunning()) {
        m_previewTimer->start();
        return;
    }
    m_job->start([generation = m_generation, path = m_path, options = options(), loss = loss()](JobContext&) {
        return std::any(std::pair { generation, computeImportPreview(path, options, loss) });
    });
}

void OnnxImportDialog::previewArrived(const JobOutcome& outcome)
{
    const auto* result = outcome.valueAs<std::pair<std::uint64_t, ImportPreview>>();
    if (result == nullptr || result->first != m_generation)
        return; // the choices changed since (their preview is on its way)
    m_preview = result->second;
    m_previewStale = false;
    showPreview();
}

void OnnxImportDialog::showPreview()
{
    m_import->setEnabled(m_preview.error.isEmpty());
    if (!m_preview.error.isEmpty()) {
        m_previewLabel->setText(tr("<span style='color:#b00020'>Cannot import at these choices: %1</span>")
                                    .arg(m_preview.error.toHtmlEscaped()));
        return;
    }
    m_previewLabel->setText(
        tr("<b>%1 nodes</b>, <b>%2 parameters</b> (%3)<br>Not trainable by the engine (costed from shapes): %4"
           "<br>Graph inputs: %5")
            .arg(m_preview.nodes)
            .arg(QString::fromStdString(formatCount(static_cast<double>(m_preview.parameters))))
            .arg(QString::fromStdString(formatBytes(static_cast<double>(m_preview.parameterBytes))))
            .arg(m_preview.opaque.isEmpty() ? tr("none") : m_preview.opaque.join(QStringLiteral(", ")).toHtmlEscaped())
            .arg(m_preview.inputs.join(QStringLiteral("; ")).toHtmlEscaped()));
}

} // namespace ps::gui
