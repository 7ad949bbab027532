#include "views/launch_dialog.h"

#include "graph/graph_summary.h"
#include "local_devices.h"
#include "models/plan_session.h"
#include "models/run_launcher.h"
#include "runtime/training_run.h"
#include "store/project_store.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QTableWidget>
#include <QToolButton>
#include <QVBoxLayout>

#include <nlohmann/json.hpp>

namespace ps::gui {
namespace {

    constexpr double kMiB = 1024.0 * 1024.0;
    enum DataChoice { DefaultCorpus, RandomTokens, TextFile };

    QString bytesText(double bytes)
    {
        return QString::fromStdString(formatBytes(bytes));
    }

} // namespace

LaunchDialog::LaunchDialog(PlanSession* session, const QString& projectPath, QWidget* parent)
    : QDialog(parent)
    , m_session(session)
    , m_project(projectPath)
{
    setWindowTitle(tr("Launch training"));
    auto* layout = new QVBoxLayout(this);
    setupForm();
    setupPrediction();
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Cancel, this);
    m_launch = buttons->addButton(tr("Launch"), QDialogButtonBox::AcceptRole);
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    layout->addWidget(buttons);
    fillPlans();
    updatePrediction();
}

void LaunchDialog::setupForm()
{
    auto* box = new QGroupBox(tr("Run"), this);
    auto* form = new QFormLayout(box);
    m_plan = new QComboBox(box);
    form->addRow(tr("Plan"), m_plan);
    m_deviceKind = new QComboBox(box);
    m_deviceKind->addItem(tr("CPU virtual devices (threads sharing this machine's cores)"));
    auto* kinds = qobject_cast<QStandardItemModel*>(m_deviceKind->model());
    m_deviceKind->setItemData(0, -1);
    for (const auto& d : engine::probeLocalDevices().devices) {
        if (d.kind != "cuda")
            continue;
        const int ordinal = static_cast<int>(d.id.value) - 1; // the CPU is device 0
        const auto* spec = DeviceCatalog::builtin().matchGpu(d.name, d.memoryBytes);
        m_deviceKind->addItem(tr("GPU %1: %2 (CUDA backend; the plan's devices share it)")
                                  .arg(ordinal)
                                  .arg(QString::fromStdString(d.name)),
            ordinal);
        kinds->item(m_deviceKind->count() - 1)
            ->setData(QString::fromStdString(spec != nullptr ? spec->id : std::string("cpu")), Qt::UserRole + 1);
    }
    connect(m_deviceKind, &QComboBox::currentIndexChanged, this, [this] { updatePrediction(); });
    form->addRow(tr("Devices"), m_deviceKind);
    m_deviceCount = new QLabel(box);
    form->addRow(tr("Device count"), m_deviceCount);
    m_memoryMiB = new QDoubleSpinBox(box);
    m_memoryMiB->setRange(0, 1 << 24);
    m_memoryMiB->setDecimals(1);
    m_memoryMiB->setSuffix(tr(" MiB"));
    m_memoryMiB->setSpecialValueText(tr("no cap"));
    form->addRow(tr("Memory per device"), m_memoryMiB);
    m_steps = new QSpinBox(box);
    m_steps->setRange(1, 10'000'000);
    m_steps->setValue(100);
    form->addRow(tr("Steps"), m_steps);
    m_data = new QComboBox(box);
    m_data->addItems(
        { tr("Default corpus (/usr/share/common-licenses)"), tr("Random tokens (throughput runs)"), tr("Text file…") });
    m_dataFile = new QLineEdit(box);
    m_dataFile->setPlaceholderText(tr("text file: its bytes are the tokens"));
    m_dataFile->setEnabled(false);
    auto* browse = new QToolButton(box);
    browse->setText(QStringLiteral("…"));
    connect(browse, &QToolButton::clicked, this, [this] {
        const auto path = QFileDialog::getOpenFileName(this, tr("Training text"));
        if (!path.isEmpty()) {
            m_dataFile->setText(path);
            m_data->setCurrentIndex(TextFile);
        }
    });
    connect(m_data, &QComboBox::currentIndexChanged, this, [this](int i) { m_dataFile->setEnabled(i == TextFile); });
    auto* dataRow = new QHBoxLayout;
    dataRow->addWidget(m_data, 1);
    dataRow->addWidget(m_dataFile, 2);
    dataRow->addWidget(browse);
    form->addRow(tr("Data"), dataRow);
    m_lr = new QDoubleSpinBox(box);
    m_lr->setDecimals(6);
    m_lr->setRange(1e-6, 10);
    m_lr->setSingleStep(1e-4);
    m_lr->setValue(1e-3);
    form->addRow(tr("Learning rate"), m_lr);
    m_checkpointEvery = new QSpinBox(box);
    m_checkpointEvery->setRange(0, 1'000'000);
    m_checkpointEvery->setSpecialValueText(tr("at the end and on Stop"));
    m_checkpointEvery->setSuffix(tr(" steps"));
    form->addRow(tr("Checkpoint every"), m_checkpointEvery);
    layout()->addWidget(box);
    connect(m_plan, &QComboBox::currentIndexChanged, this, &LaunchDialog::updatePrediction);
    connect(m_memoryMiB, &QDoubleSpinBox::valueChanged, this, &LaunchDialog::updatePrediction);
}

void LaunchDialog::setupPrediction()
{
    auto* box = new QGroupBox(tr("Predicted before launch (simulated)"), this);
    auto* v = new QVBoxLayout(box);
    m_predicted = new QLabel(box);
    m_predicted->setWordWrap(true);
    v->addWidget(m_predicted);
    m_devicesTable = new QTableWidget(0, 3, box);
    m_devicesTable->setHorizontalHeaderLabels({ tr("Device"), tr("Predicted peak"), tr("Capacity") });
    m_devicesTable->verticalHeader()->setVisible(false);
    // Sized to their text, the capacity column filling the rest (also after every refill).
    m_devicesTable->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_devicesTable->horizontalHeader()->setSectionResizeMode(2, QHeaderView::Stretch);
    m_devicesTable->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_devicesTable->setMaximumHeight(150);
    v->addWidget(m_devicesTable);
    m_refusalLabel = new QLabel(box);
    m_refusalLabel->setWordWrap(true);
    m_refusalLabel->setStyleSheet(QStringLiteral("color: #b01e1e; font-weight: bold"));
    v->addWidget(m_refusalLabel);
    m_override = new QCheckBox(tr("Launch anyway (the run is expected to fail with out of memory)"), box);
    v->addWidget(m_override);
    v->addStretch();
    connect(m_override, &QCheckBox::toggled, this, &LaunchDialog::updatePrediction);
    layout()->addWidget(box);
}

void LaunchDialog::fillPlans()
{
    m_plan->blockSignals(true);
    if (m_session->hasPlan()) {
        const auto& s = m_session->snapshot().plan.schedule;
        m_plan->addItem(tr("Current edit: %1 stages, %2 (stored as a new plan at launch)")
                            .arg(s.stages)
                            .arg(QString::fromStdString(scheduleName(s))));
    }
    try {
        for (const auto& p : ProjectStore::open(m_project.toStdString(), ProjectStore::Access::ReadOnly).loadPlans()) {
            const auto j = nlohmann::json::parse(p.json, nullptr, false);
            const auto schedule = j.is_object() ? j.value("schedule", std::string()) : std::string();
            const int stages = j.is_object() ? j.value("stages", 1) : 1;
            m_plan->addItem(tr("Plan %1 \"%2\": %3 stages, %4%5")
                                .arg(p.id)
                                .arg(QString::fromStdString(p.name))
                                .arg(stages)
                                .arg(QString::fromStdString(schedule))
                                .arg(p.feasible ? QString() : tr(" (infeasible when planned)")));
            m_plans.emplace_back(p.id, p.json);
        }
    } catch (const std::exception&) {
        // No stored plans to offer (e.g. an unsaved project); the current edit remains.
    }
    m_plan->blockSignals(false);
}

int LaunchDialog::planCount() const
{
    return m_plan->count();
}

bool LaunchDialog::usesCurrentEdit() const
{
    return m_session->hasPlan() && m_plan->currentIndex() == 0;
}

std::optional<RunShape> LaunchDialog::chosenShape() const
{
    if (m_plan->currentIndex() < 0 || !m_session->graph())
        return std::nullopt;
    RunShape shape;
    if (usesCurrentEdit()) {
        const auto& plan = m_session->snapshot().plan;
        shape = { plan.partition, plan.schedule, plan.memoryPlans(), {},
            static_cast<std::int64_t>(std::llround(plan.microBatch)), 0, {} };
    } else {
        const auto k = static_cast<std::size_t>(m_plan->currentIndex() - (m_session->hasPlan() ? 1 : 0));
        shape = shapeFromPlanJson(m_plans.at(k).second, m_session->graph()->nodeCount());
    }
    shape.deviceMemoryBytes = static_cast<std::int64_t>(m_memoryMiB->value() * kMiB);
    return shape;
}

int LaunchDialog::gpu() const
{
    const auto ordinal = m_deviceKind->currentData();
    return ordinal.isValid() ? ordinal.toInt() : -1;
}

int LaunchDialog::deviceCountOf(const RunShape& shape) const
{
    int devices = shape.schedule.devices();
    for (const auto& d : shape.stageDevices)
        devices = std::max(devices, static_cast<int>(d.value) + 1);
    return std::max(1, devices);
}

void LaunchDialog::updatePrediction()
{
    m_prediction.reset();
    m_refusal.clear();
    m_devicesTable->setRowCount(0);
    try {
        const auto shape = chosenShape();
        if (!shape) {
            m_refusal = tr("Open a model and plan it first.");
        } else {
            m_devices = deviceCountOf(*shape);
            m_microBatch = shape->microBatch;
            m_deviceCount->setText(tr("%1 (the plan's pipeline devices)").arg(m_devices));
            // A GPU is predicted on its catalog entry (this CPU when none matches), with that
            // device's measured profile when the project has one.
            auto onDevice = *shape;
            if (gpu() >= 0)
                onDevice.deviceKind = m_deviceKind->currentData(Qt::UserRole + 1).toString().toStdString();
            onDevice.deviceNames = engine::runtimeDeviceNames(devicesArgument(gpu(), m_devices).toStdString());
            // CPU devices share the cores: the profile of their thread count (or fitted to it).
            const bool cpu = onDevice.deviceKind == "cpu";
            std::vector<Profile> candidates;
            for (const auto& p : m_session->storedProfiles()) {
                if (p.source == (cpu ? "measured-cpu" : "measured-cuda") && p.deviceKind == onDevice.deviceKind)
                    candidates.push_back(p);
            }
            const auto measured = matchProfileThreads(
                candidates, cpu ? engine::threadsPerDevice(static_cast<std::size_t>(m_devices)) : 0);
            m_prediction = predictRun(*m_session->graph(), measured ? &measured->profile : nullptr, onDevice);
            if (measured)
                m_prediction->profileNote = measured->note;
        }
    } catch (const std::exception& e) {
        m_refusal = tr("This plan cannot run: %1").arg(QString::fromStdString(e.what()));
    }
    if (m_prediction) {
        const auto& sim = m_prediction->simulation;
        m_predicted->setText(tr("Iteration %1 ms, %2 samples/s (profile: %3, schedule %4)")
                                 .arg(sim.iterationNs / 1e6, 0, 'f', 2)
                                 .arg(sim.samplesPerSecond, 0, 'f', 1)
                                 .arg(QString::fromStdString(profileDescription(*m_prediction)))
                                 .arg(QString::fromStdString(sim.scheduleName)));
        m_devicesTable->setRowCount(static_cast<int>(sim.devices.size()));
        for (std::size_t d = 0; d < sim.devices.size(); ++d) {
            const auto& dev = sim.devices[d];
            const int row = static_cast<int>(d);
            m_devicesTable->setItem(
                row, 0, new QTableWidgetItem(QString::fromStdString(deviceLabel(*m_prediction, d))));
            auto* peak = new QTableWidgetItem(
                bytesText(dev.peakBytes) + (dev.outOfMemory ? tr("  (out of memory)") : QString()));
            if (dev.outOfMemory)
                peak->setForeground(QColor(176, 30, 30));
            m_devicesTable->setItem(row, 1, peak);
            m_devicesTable->setItem(
                row, 2, new QTableWidgetItem(m_memoryMiB->value() > 0 ? bytesText(dev.capacityBytes) : tr("no cap")));
        }
        if (!m_prediction->overflows.empty())
            m_refusal = tr("Refused: %1.").arg(QString::fromStdString(overflowMessage(*m_prediction)));
    } else {
        m_predicted->setText(tr("No prediction."));
    }
    m_refusalLabel->setText(m_refusal);
    m_refusalLabel->setVisible(!m_refusal.isEmpty());
    m_override->setVisible(m_prediction && !m_prediction->overflows.empty());
    m_launch->setEnabled(canLaunch());
}

bool LaunchDialog::canLaunch() const
{
    if (!m_prediction)
        return false;
    return m_prediction->overflows.empty() || m_override->isChecked();
}

LaunchRequest LaunchDialog::request() const
{
    LaunchRequest r;
    r.project = m_project;
    if (!usesCurrentEdit() && m_plan->currentIndex() >= 0) {
        const auto k = static_cast<std::size_t>(m_plan->currentIndex() - (m_session->hasPlan() ? 1 : 0));
        if (k < m_plans.size())
            r.planId = m_plans[k].first;
    }
    r.devices = m_devices;
    r.gpu = gpu();
    r.deviceMemoryBytes = static_cast<std::int64_t>(m_memoryMiB->value() * kMiB);
    r.steps = m_steps->value();
    const auto graph = m_session->graph();
    if (graph && m_microBatch > 0 && m_microBatch != graph->info().microBatch)
        r.microBatch = m_microBatch;
    r.randomTokens = m_data->currentIndex() == RandomTokens;
    if (m_data->currentIndex() == TextFile)
        r.dataFile = m_dataFile->text();
    r.learningRate = m_lr->value();
    r.checkpointEvery = m_checkpointEvery->value();
    return r;
}

void LaunchDialog::selectPlan(int index)
{
    m_plan->setCurrentIndex(index);
    updatePrediction();
}

void LaunchDialog::setDeviceMemoryBytes(std::int64_t bytes)
{
    m_memoryMiB->setValue(static_cast<double>(bytes) / kMiB);
    updatePrediction();
}

void LaunchDialog::setSteps(int steps)
{
    m_steps->setValue(steps);
}

void LaunchDialog::setRandomTokens(bool on)
{
    m_data->setCurrentIndex(on ? RandomTokens : DefaultCorpus);
}

void LaunchDialog::setOverride(bool on)
{
    m_override->setChecked(on);
    updatePrediction();
}

} // namespace ps::gui
