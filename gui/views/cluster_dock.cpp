#include "views/cluster_dock.h"

#include "graph/graph_summary.h"
#include "local_devices.h"
#include "models/plan_session.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QLabel>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSpinBox>

#include <cmath>

namespace ps::gui {

ClusterDock::ClusterDock(PlanSession* session, QWidget* parent)
    : QWidget(parent)
    , m_session(session)
{
    setupForm();
    loadFromSession();
    connect(session, &PlanSession::planChanged, this, &ClusterDock::loadFromSession);
    connect(session, &PlanSession::planChanged, this, &ClusterDock::updateScale);
}

void ClusterDock::setupForm()
{
    auto* form = new QFormLayout(this);
    m_device = new QComboBox(this);
    for (const auto& d : DeviceCatalog::builtin().devices()) {
        if (!d.measured)
            m_device->addItem(QString::fromStdString(d.name), QString::fromStdString(d.id));
    }
    m_device->addItem(tr("This machine's CPU (measured)"), QStringLiteral("cpu"));
    m_stages = new QSpinBox(this);
    m_stages->setRange(1, 64);
    m_perNode = new QSpinBox(this);
    m_perNode->setRange(1, 64);
    m_intra = new QDoubleSpinBox(this);
    m_intra->setRange(0, 10000);
    m_intra->setSpecialValueText(tr("device's peer link"));
    m_inter = new QDoubleSpinBox(this);
    m_inter->setRange(0.01, 10000);
    m_nics = new QSpinBox(this);
    m_nics->setRange(1, 64);
    m_nics->setToolTip(tr("NICs per node, each at the inter-node rate: a device sends to another node over NIC "
                          "(its place in the node) mod this count"));
    m_schedule = new QComboBox(this);
    m_schedule->setEditable(true);
    m_schedule->addItems(
        { QStringLiteral("1f1b"), QStringLiteral("gpipe"), QStringLiteral("kfkb:2"), QStringLiteral("kfkb:4"),
            QStringLiteral("zb-h1"), QStringLiteral("pipedream"), QStringLiteral("ftpipe-async") });
    m_microBatches = new QSpinBox(this);
    m_microBatches->setRange(1, 4096);
    m_microBatch = new QDoubleSpinBox(this);
    m_microBatch->setRange(1, 65536);
    m_microBatch->setDecimals(0);
    m_memoryGiB = new QDoubleSpinBox(this);
    m_memoryGiB->setRange(0, 4096);
    m_memoryGiB->setSpecialValueText(tr("device capacity"));
    m_swap = new QCheckBox(tr("swap"), this);
    m_recompute = new QCheckBox(tr("recompute"), this);
    m_profile = new QComboBox(this);
    m_profile->addItem(tr("analytical estimate for the device"), QStringLiteral("analytical"));
    // What every op class of the estimate is priced in (cost/training_setup.h).
    m_precision = new QComboBox(this);
    m_precision->addItem(tr("fp32 (PyTorch default: TF32 convolutions)"), QStringLiteral("fp32"));
    m_precision->addItem(tr("tf32 (matmuls on TF32 too)"), QStringLiteral("tf32"));
    m_precision->addItem(tr("bf16 mixed precision"), QStringLiteral("bf16"));
    m_precision->addItem(tr("fp16 mixed precision"), QStringLiteral("fp16"));
    m_precision->setToolTip(tr("Precision of the analytical estimate: the math pipe of matmuls and convolutions, "
                               "activation and weight bytes; every estimate is priced in it"));
    const auto local = engine::probeLocalDevices();
    m_local = new QLabel(tr("This machine: %1 CPU thread(s); CUDA: %2")
                             .arg(local.devices.front().computeUnits)
                             .arg(QString::fromStdString(local.cudaStatus)),
        this);
    m_local->setWordWrap(true);
    auto* apply = new QPushButton(tr("Apply"), this);
    connect(apply, &QPushButton::clicked, this, &ClusterDock::apply);
    form->addRow(tr("Device"), m_device);
    form->addRow(tr("Stages (devices)"), m_stages);
    form->addRow(tr("Devices per node"), m_perNode);
    form->addRow(tr("Intra-node link (GB/s)"), m_intra);
    form->addRow(tr("Inter-node network (GB/s per NIC)"), m_inter);
    form->addRow(tr("NICs per node"), m_nics);
    form->addRow(tr("Schedule"), m_schedule);
    form->addRow(tr("Micro-batches"), m_microBatches);
    form->addRow(tr("Micro-batch size"), m_microBatch);
    form->addRow(tr("Memory limit (GiB)"), m_memoryGiB);
    form->addRow(tr("Memory optimization"), m_swap);
    form->addRow(QString(), m_recompute);
    form->addRow(tr("Profile"), m_profile);
    form->addRow(tr("Precision"), m_precision);
    form->addRow(m_local);
    form->addRow(apply);
    form->addRow(scaleForm());
    updateScale();
}

// Across nodes: node kind, tensor and data parallel sizes, recomputation; the estimate below them.
QWidget* ClusterDock::scaleForm()
{
    auto* box = new QGroupBox(tr("Across nodes (GPT, Megatron-LM layout)"), this);
    auto* form = new QFormLayout(box);
    m_nodeKind = new QComboBox(box);
    for (const auto& n : builtinNodes())
        m_nodeKind->addItem(QString::fromStdString(n.name), QString::fromStdString(n.id));
    m_tensor = new QSpinBox(box);
    m_tensor->setRange(1, 64);
    m_tensor->setToolTip(tr("GPUs of one node each stage's attention and MLP matrices are split over"));
    m_data = new QSpinBox(box);
    m_data->setRange(1, 65536);
    m_data->setToolTip(tr("Replicas of the pipeline; their gradients are all-reduced after each iteration"));
    m_scaleRecompute = new QComboBox(box);
    for (const auto r : { Recompute::None, Recompute::Selective, Recompute::Full })
        m_scaleRecompute->addItem(
            QString::fromUtf8(toString(r).data(), static_cast<qsizetype>(toString(r).size())), static_cast<int>(r));
    m_scaleRecompute->setCurrentIndex(1);
    m_scaleText = new QLabel(box);
    m_scaleText->setWordWrap(true);
    m_scaleText->setTextInteractionFlags(Qt::TextSelectableByMouse);
    form->addRow(tr("Node"), m_nodeKind);
    form->addRow(tr("Tensor parallel (t)"), m_tensor);
    form->addRow(tr("Data parallel (d)"), m_data);
    form->addRow(tr("Recompute"), m_scaleRecompute);
    form->addRow(m_scaleText);
    const auto changed = [this] { updateScale(); };
    connect(m_nodeKind, &QComboBox::currentIndexChanged, this, changed);
    connect(m_tensor, &QSpinBox::valueChanged, this, changed);
    connect(m_data, &QSpinBox::valueChanged, this, changed);
    connect(m_scaleRecompute, &QComboBox::currentIndexChanged, this, changed);
    return box;
}

ClusterSizes ClusterDock::clusterSizes() const
{
    ClusterSizes sizes;
    sizes.node = m_nodeKind->currentData().toString().toStdString();
    sizes.tensor = m_tensor->value();
    sizes.data = m_data->value();
    sizes.recompute = static_cast<Recompute>(m_scaleRecompute->currentData().toInt());
    return sizes;
}

bool ClusterDock::setClusterSizes(const ClusterSizes& sizes)
{
    const int node = m_nodeKind->findData(QString::fromStdString(sizes.node));
    if (node < 0)
        return false;
    const QSignalBlocker blockNode(m_nodeKind);
    const QSignalBlocker blockTensor(m_tensor);
    const QSignalBlocker blockData(m_data);
    const QSignalBlocker blockRecompute(m_scaleRecompute);
    m_nodeKind->setCurrentIndex(node);
    m_tensor->setValue(sizes.tensor);
    m_data->setValue(sizes.data);
    m_scaleRecompute->setCurrentIndex(std::max(0, m_scaleRecompute->findData(static_cast<int>(sizes.recompute))));
    updateScale();
    return true;
}

void ClusterDock::updateScale()
{
    if (m_scaleText == nullptr)
        return;
    const auto graph = m_session->graph();
    if (!graph || !m_session->hasPlan()) {
        m_scale = {};
        m_scaleText->setText(tr("Open a model to price its pipeline across nodes."));
        return;
    }
    const auto& editor = m_session->editor();
    m_scale = priceClusterSizes(gptShapeOf(*graph), clusterSizes(), editor.schedule(),
        static_cast<std::int64_t>(std::llround(editor.microBatch())), editor.dataflow());
    m_scaleText->setText(QString::fromStdString(m_scale.text));
}

void ClusterDock::loadFromSession()
{
    const auto& s = m_session->setup();
    m_device->setCurrentIndex(m_device->findData(QString::fromStdString(s.deviceId)));
    m_stages->setValue(m_session->hasPlan() ? m_session->editor().partition().stageCount() : s.schedule.stages);
    m_perNode->setValue(s.devicesPerNode);
    m_intra->setValue(s.intraNodeGBps);
    m_inter->setValue(s.interNodeGBps);
    m_nics->setValue(s.nicsPerNode);
    m_schedule->setCurrentText(QString::fromStdString(scheduleName(s.schedule)));
    m_microBatches->setValue(s.schedule.microBatches);
    m_microBatch->setValue(m_session->hasPlan() ? m_session->editor().microBatch() : std::max(1.0, s.microBatch));
    m_memoryGiB->setValue(s.limits.memoryLimitBytes / (1024.0 * 1024 * 1024));
    m_swap->setChecked(s.limits.allowSwap);
    m_recompute->setChecked(s.limits.allowRecompute);
    // Stored measured profiles of the project, offered next to the estimate.
    m_profile->clear();
    m_profile->addItem(tr("analytical estimate for the device"), QStringLiteral("analytical"));
    for (const auto& p : m_session->storedProfiles()) {
        if (m_profile->findData(QString::fromStdString(p.source)) >= 0)
            continue; // one entry per source: several CPU thread counts plan as one (matched per plan)
        m_profile->addItem(tr("%1 on %2 (pipestudio profile)")
                               .arg(QString::fromStdString(p.source), QString::fromStdString(p.deviceKind)),
            QString::fromStdString(p.source));
    }
    m_profile->setCurrentIndex(std::max(0, m_profile->findData(QString::fromStdString(s.profileSource))));
    const auto precision = toString(s.precision);
    m_precision->setCurrentIndex(std::max(
        0, m_precision->findData(QString::fromUtf8(precision.data(), static_cast<qsizetype>(precision.size())))));
}

PlanSetup ClusterDock::setup() const
{
    PlanSetup s;
    s.deviceId = m_device->currentData().toString().toStdString();
    s.devicesPerNode = m_perNode->value();
    s.intraNodeGBps = m_intra->value();
    s.interNodeGBps = m_inter->value();
    s.nicsPerNode = m_nics->value();
    s.schedule = parseScheduleSpec(m_schedule->currentText().toStdString(), m_stages->value(), m_microBatches->value());
    s.microBatch = m_microBatch->value();
    s.limits = { m_memoryGiB->value() * 1024.0 * 1024 * 1024, m_swap->isChecked(), m_recompute->isChecked() };
    s.profileSource = m_profile->currentData().toString().toStdString();
    s.precision = parsePrecision(m_precision->currentData().toString().toStdString());
    return s;
}

bool ClusterDock::apply()
{
    try {
        return m_session->configure(setup());
    } catch (const std::exception& e) {
        Q_EMIT m_session->operationFailed(QString::fromStdString(e.what()));
        return false;
    }
}

void ClusterDock::setDevice(const QString& id)
{
    m_device->setCurrentIndex(m_device->findData(id));
}

bool ClusterDock::setProfileSource(const QString& source)
{
    const int index = m_profile->findData(source);
    if (index >= 0)
        m_profile->setCurrentIndex(index);
    return index >= 0;
}

bool ClusterDock::setPrecision(const QString& precision)
{
    const int index = m_precision->findData(precision);
    if (index >= 0)
        m_precision->setCurrentIndex(index);
    return index >= 0;
}

void ClusterDock::setStages(int stages)
{
    m_stages->setValue(stages);
}

} // namespace ps::gui
