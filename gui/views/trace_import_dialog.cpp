#include "views/trace_import_dialog.h"

#include "cluster/device_catalog.h"

#include <QComboBox>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QJsonArray>
#include <QJsonDocument>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>

namespace ps::gui {

TraceImportDialog::TraceImportDialog(const QString& project, const QString& executable, QWidget* parent)
    : QDialog(parent)
    , m_project(project)
    , m_executable(executable)
    , m_path(new QLineEdit(this))
    , m_device(new QComboBox(this))
    , m_coverage(new QDoubleSpinBox(this))
    , m_summary(new QLabel(tr("Choose a trace and press Preview to see how much of it maps onto the model."), this))
    , m_unmatched(new QTableWidget(0, 3, this))
    , m_preview(new QPushButton(tr("Preview"), this))
    , m_import(new QPushButton(tr("Import"), this))
{
    setWindowTitle(tr("Import profiler trace"));
    auto* layout = new QVBoxLayout(this);
    auto* form = new QFormLayout;
    auto* fileRow = new QHBoxLayout;
    auto* browse = new QPushButton(tr("Browse…"), this);
    fileRow->addWidget(m_path, 1);
    fileRow->addWidget(browse);
    form->addRow(tr("Trace"), fileRow);
    m_device->addItem(tr("From the trace (GPU kernels: its GPU; CPU operators: cpu)"), QString());
    m_device->addItem(QStringLiteral("cpu"), QStringLiteral("cpu"));
    for (const auto& d : DeviceCatalog::builtin().devices())
        m_device->addItem(QString::fromStdString(d.id + " (" + d.name + ")"), QString::fromStdString(d.id));
    form->addRow(tr("Device"), m_device);
    m_coverage->setRange(0, 100);
    m_coverage->setDecimals(0);
    m_coverage->setSuffix(tr(" %"));
    m_coverage->setValue(50);
    m_coverage->setToolTip(tr("Below this share of the forward and backward time attributed to nodes, the import "
                              "is refused (import-trace --min-coverage)"));
    form->addRow(tr("Minimum coverage"), m_coverage);
    layout->addLayout(form);
    m_summary->setWordWrap(true);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_summary);
    m_unmatched->setHorizontalHeaderLabels({ tr("Unmatched operator"), tr("Count"), tr("Time (ms)") });
    m_unmatched->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
    m_unmatched->verticalHeader()->setVisible(false);
    m_unmatched->setEditTriggers(QAbstractItemView::NoEditTriggers);
    layout->addWidget(m_unmatched, 1);
    auto* buttons = new QDialogButtonBox(this);
    buttons->addButton(m_preview, QDialogButtonBox::ActionRole);
    buttons->addButton(m_import, QDialogButtonBox::AcceptRole);
    buttons->addButton(QDialogButtonBox::Cancel);
    layout->addWidget(buttons);
    m_import->setEnabled(false);
    m_import->setDefault(false);
    m_preview->setDefault(true);
    resize(720, 460);

    connect(browse, &QPushButton::clicked, this, [this] {
        const auto path = QFileDialog::getOpenFileName(
            this, tr("Profiler trace"), QString(), tr("Traces (*.json *.json.gz *.sqlite);;All files (*)"));
        if (!path.isEmpty())
            setTracePath(path);
    });
    connect(m_path, &QLineEdit::textChanged, this, [this] { m_import->setEnabled(false); });
    connect(m_device, &QComboBox::currentIndexChanged, this, [this] { m_import->setEnabled(false); });
    connect(m_coverage, &QDoubleSpinBox::valueChanged, this, [this] {
        if (!m_report.isEmpty())
            showReport();
    });
    connect(m_preview, &QPushButton::clicked, this, &TraceImportDialog::preview);
    connect(m_import, &QPushButton::clicked, this, &TraceImportDialog::import);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
}

void TraceImportDialog::setTracePath(const QString& path)
{
    m_path->setText(path);
}

void TraceImportDialog::setDevice(const QString& device)
{
    const auto at = m_device->findData(device);
    m_device->setCurrentIndex(at >= 0 ? at : 0);
}

void TraceImportDialog::setMinimumCoverage(double fraction)
{
    m_coverage->setValue(100 * fraction);
}

QStringList TraceImportDialog::arguments(bool dryRun) const
{
    QStringList a { QStringLiteral("import-trace"), m_project, m_path->text(), QStringLiteral("--json"),
        QStringLiteral("--min-coverage"), QString::number(m_coverage->value() / 100.0) };
    if (const auto device = m_device->currentData().toString(); !device.isEmpty())
        a << QStringLiteral("--device") << device;
    if (dryRun)
        a << QStringLiteral("--dry-run");
    return a;
}

void TraceImportDialog::preview()
{
    run(true);
}

void TraceImportDialog::import()
{
    run(false);
}

void TraceImportDialog::run(bool dryRun)
{
    if (m_process && m_process->state() != QProcess::NotRunning)
        return;
    if (m_path->text().isEmpty()) {
        Q_EMIT failed(tr("Choose a trace file first."));
        return;
    }
    delete m_process;
    m_process = new QProcess(this);
    m_dryRun = dryRun;
    m_preview->setEnabled(false);
    m_import->setEnabled(false);
    m_summary->setText(
        dryRun ? tr("Reading the trace and aligning its operators to the model's nodes…") : tr("Importing…"));
    connect(m_process, &QProcess::finished, this, &TraceImportDialog::onFinished);
    connect(m_process, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
        if (e != QProcess::FailedToStart)
            return;
        m_preview->setEnabled(true);
        const auto message = tr("Cannot start %1: %2").arg(m_executable, m_process->errorString());
        m_summary->setText(message);
        Q_EMIT failed(message);
    });
    m_process->start(m_executable, arguments(dryRun));
}

void TraceImportDialog::onFinished(int exitCode, QProcess::ExitStatus status)
{
    m_preview->setEnabled(true);
    const auto out = m_process->readAllStandardOutput();
    QString error = QString::fromUtf8(m_process->readAllStandardError()).trimmed();
    error.remove(QStringLiteral("pipestudio: error: "));
    if (status != QProcess::NormalExit || exitCode != 0) {
        const auto message = error.isEmpty() ? tr("import-trace failed (exit %1)").arg(exitCode) : error;
        m_summary->setText(message);
        Q_EMIT failed(message);
        return;
    }
    const auto doc = QJsonDocument::fromJson(out);
    if (!doc.isObject()) {
        const auto message = tr("import-trace printed no report");
        m_summary->setText(message);
        Q_EMIT failed(message);
        return;
    }
    m_report = doc.object();
    showReport();
    if (m_dryRun) {
        Q_EMIT previewed();
        return;
    }
    const auto message = tr("Imported %1: %2 of %3 nodes, stored as the %4 profile and run %5")
                             .arg(m_path->text())
                             .arg(m_report.value(QStringLiteral("nodes_matched")).toInt())
                             .arg(m_report.value(QStringLiteral("nodes_total")).toInt())
                             .arg(m_report.value(QStringLiteral("device")).toString())
                             .arg(m_report.value(QStringLiteral("run")).toInt());
    Q_EMIT imported(message);
    accept();
}

QString TraceImportDialog::summaryText() const
{
    return m_summary->text();
}

void TraceImportDialog::showReport()
{
    const auto& r = m_report;
    const double coverage = r.value(QStringLiteral("coverage")).toDouble();
    const bool enough = coverage >= m_coverage->value() / 100.0;
    QString how = r.value(QStringLiteral("aligned_by_operator_order")).toBool()
        ? tr("operators aligned to nodes by order, kind and shape")
        : tr("ranges named after nodes");
    if (const int modules = r.value(QStringLiteral("modules")).toInt(); modules > 0)
        how += tr(", within %1 module calls named after %2 modules")
                   .arg(r.value(QStringLiteral("module_ranges")).toInt())
                   .arg(modules);
    m_summary->setText(
        tr("<b>%1%</b> of the forward and backward time on nodes (%2); <b>%3 of %4 nodes</b> matched.<br>"
           "%5 trace (%6), device %7, micro-batch %8: %9 ms attributed, %10 ms unmatched, %11 ms in the "
           "optimizer, %14 ms set-up and input copies, of %12 ms.<br>%13")
            .arg(100 * coverage, 0, 'f', 1)
            .arg(how)
            .arg(r.value(QStringLiteral("nodes_matched")).toInt())
            .arg(r.value(QStringLiteral("nodes_total")).toInt())
            .arg(r.value(QStringLiteral("format")).toString(),
                r.value(QStringLiteral("activity")).toString() == QStringLiteral("kernels") ? tr("GPU kernels")
                                                                                            : tr("CPU operators"),
                r.value(QStringLiteral("device")).toString())
            .arg(r.value(QStringLiteral("micro_batch")).toInt())
            .arg(r.value(QStringLiteral("matched_ms")).toDouble(), 0, 'f', 3)
            .arg(r.value(QStringLiteral("unmatched_ms")).toDouble(), 0, 'f', 3)
            .arg(r.value(QStringLiteral("optimizer_ms")).toDouble(), 0, 'f', 3)
            .arg(r.value(QStringLiteral("total_ms")).toDouble(), 0, 'f', 3)
            .arg(enough ? tr("Import stores it as the imported profile and a measured run.")
                        : tr("<b>Below the minimum coverage: Import would be refused.</b>"))
            .arg(r.value(QStringLiteral("setup_ms")).toDouble() + r.value(QStringLiteral("input_copies_ms")).toDouble(),
                0, 'f', 3));
    const auto names = r.value(QStringLiteral("unmatched_names")).toArray();
    m_unmatched->setRowCount(static_cast<int>(names.size()));
    for (int i = 0; i < names.size(); ++i) {
        const auto u = names.at(i).toObject();
        auto* name = new QTableWidgetItem(u.value(QStringLiteral("short_name")).toString());
        name->setToolTip(u.value(QStringLiteral("name")).toString());
        m_unmatched->setItem(i, 0, name);
        m_unmatched->setItem(i, 1, new QTableWidgetItem(QString::number(u.value(QStringLiteral("count")).toInt())));
        m_unmatched->setItem(
            i, 2, new QTableWidgetItem(QString::number(u.value(QStringLiteral("ms")).toDouble(), 'f', 3)));
    }
    m_import->setEnabled(m_dryRun && enough);
}

} // namespace ps::gui
