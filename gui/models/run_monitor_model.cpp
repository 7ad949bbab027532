#include "models/run_monitor_model.h"

#include "runtime/training_run.h"
#include "store/project_store.h"
#include "util/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>

namespace ps::gui {
namespace {

    constexpr int kEtaWindow = 10; // recent steps the ETA's median uses

    double median(std::vector<double> v)
    {
        if (v.empty())
            return 0;
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    }

} // namespace

QString formatDuration(double seconds)
{
    const auto s = static_cast<qint64>(std::llround(std::max(0.0, seconds)));
    if (s < 60)
        return QStringLiteral("%1 s").arg(s);
    if (s < 3600)
        return QStringLiteral("%1 min %2 s").arg(s / 60).arg(s % 60, 2, 10, QLatin1Char('0'));
    return QStringLiteral("%1 h %2 min").arg(s / 3600).arg((s % 3600) / 60, 2, 10, QLatin1Char('0'));
}

RunMonitorModel::RunMonitorModel(QObject* parent)
    : QAbstractTableModel(parent)
{
}

void RunMonitorModel::beginRun(std::int64_t runId, int devices, std::int64_t totalSteps, std::int64_t firstStep,
    std::vector<std::string> deviceNames)
{
    beginResetModel();
    m_runId = runId;
    m_devices = devices;
    m_deviceNames = std::move(deviceNames);
    m_totalSteps = totalSteps;
    m_firstStep = firstStep;
    m_steps.clear();
    m_status = QStringLiteral("running");
    m_message.clear();
    endResetModel();
    Q_EMIT changed();
}

QString RunMonitorModel::deviceName(int device) const
{
    return device >= 0 && device < static_cast<int>(m_deviceNames.size())
        ? QString::fromStdString(m_deviceNames[static_cast<std::size_t>(device)])
        : QStringLiteral("device %1").arg(device);
}

void RunMonitorModel::setPrediction(double iterationMs, std::vector<double> peakBytes, const QString& profileSource)
{
    m_predictedMs = iterationMs;
    m_predictedPeak = std::move(peakBytes);
    m_profileSource = profileSource;
    Q_EMIT changed();
}

void RunMonitorModel::addStep(const RunStep& step)
{
    const int row = static_cast<int>(m_steps.size());
    beginInsertRows({}, row, row);
    m_steps.push_back(step);
    m_devices = std::max(m_devices, static_cast<int>(step.peakBytes.size()));
    endInsertRows();
    Q_EMIT changed();
}

void RunMonitorModel::setStatus(const QString& status, const QString& message)
{
    m_status = status;
    m_message = message;
    Q_EMIT changed();
}

void RunMonitorModel::clear()
{
    beginResetModel();
    m_runId = 0;
    m_devices = 0;
    m_totalSteps = m_firstStep = 0;
    m_steps.clear();
    m_status.clear();
    m_message.clear();
    m_predictedMs = 0;
    m_predictedPeak.clear();
    m_profileSource.clear();
    endResetModel();
    Q_EMIT changed();
}

void RunMonitorModel::loadRun(const ProjectStore& store, std::int64_t runId)
{
    const auto cfg = nlohmann::json::parse(store.runConfig(runId), nullptr, false);
    const auto status = store.runStatus(runId);
    std::map<std::int64_t, RunStep> bySteps;
    for (const auto& m : store.loadRunMetrics(runId))
        bySteps[m.step] = { m.step, m.loss, 0, m.stepNs / 1e6, m.tokensPerSecond, {}, {} };
    int devices = cfg.is_object() ? cfg.value("device_count", 0) : 0;
    for (const auto& d : store.loadRunDeviceMetrics(runId)) {
        auto& s = bySteps[d.step];
        const auto k = static_cast<std::size_t>(d.device);
        s.peakBytes.resize(std::max(s.peakBytes.size(), k + 1), 0);
        s.peakBytes[k] = d.peakBytes;
        if (d.busyNs >= 0) { // negative: a GPU step run untimed
            s.busyMs.resize(std::max(s.busyMs.size(), k + 1), 0);
            s.busyMs[k] = d.busyNs / 1e6;
        }
        devices = std::max(devices, d.device + 1);
    }
    const auto first = cfg.is_object() ? cfg.value("resumed_from_step", std::int64_t { 0 }) : 0;
    std::vector<std::string> names;
    if (cfg.is_object() && cfg.contains("devices") && cfg["devices"].is_string()) {
        try {
            names = engine::runtimeDeviceNames(cfg["devices"].get<std::string>());
        } catch (const Error&) { // a spelling this build does not read: "device N"
        }
    }
    beginRun(runId, devices, cfg.is_object() ? cfg.value("steps", std::int64_t { 0 }) : 0, first, std::move(names));
    beginResetModel();
    for (auto& [step, s] : bySteps)
        m_steps.push_back(std::move(s));
    endResetModel();
    std::string error;
    for (const auto& r : store.loadRuns()) {
        if (r.id == runId)
            error = r.error;
    }
    setStatus(QString::fromStdString(status), QString::fromStdString(error));
}

std::int64_t RunMonitorModel::stepsDone() const
{
    return m_steps.empty() ? 0 : m_steps.back().step - m_firstStep;
}

double RunMonitorModel::progress() const
{
    return m_totalSteps > 0 ? std::clamp(static_cast<double>(stepsDone()) / m_totalSteps, 0.0, 1.0) : 0.0;
}

std::vector<double> RunMonitorModel::laterStepTimes() const
{
    std::vector<double> ms;
    for (std::size_t i = 1; i < m_steps.size(); ++i)
        ms.push_back(m_steps[i].stepMs);
    return ms;
}

double RunMonitorModel::medianStepMs() const
{
    if (m_steps.size() == 1)
        return m_steps.front().stepMs;
    return median(laterStepTimes());
}

double RunMonitorModel::etaSeconds() const
{
    auto ms = laterStepTimes();
    if (ms.empty())
        return -1;
    if (ms.size() > static_cast<std::size_t>(kEtaWindow))
        ms.erase(ms.begin(), ms.end() - kEtaWindow);
    const auto remaining = std::max<std::int64_t>(0, m_totalSteps - stepsDone());
    return static_cast<double>(remaining) * median(ms) / 1e3;
}

double RunMonitorModel::busyShare(int device) const
{
    double busy = 0;
    double total = 0;
    for (std::size_t i = m_steps.size() > 1 ? 1 : 0; i < m_steps.size(); ++i) {
        const auto& s = m_steps[i];
        if (device < static_cast<int>(s.busyMs.size())) {
            busy += s.busyMs[static_cast<std::size_t>(device)];
            total += s.stepMs;
        }
    }
    return total > 0 ? std::clamp(busy / total, 0.0, 1.0) : 0.0;
}

std::int64_t RunMonitorModel::measuredPeakBytes(int device) const
{
    std::int64_t peak = 0;
    for (const auto& s : m_steps) {
        if (device < static_cast<int>(s.peakBytes.size()))
            peak = std::max(peak, s.peakBytes[static_cast<std::size_t>(device)]);
    }
    return peak;
}

int RunMonitorModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_steps.size());
}

int RunMonitorModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : FirstDeviceColumn + m_devices;
}

QVariant RunMonitorModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid() || (role != Qt::DisplayRole && role != Qt::UserRole))
        return {};
    const auto& s = m_steps[static_cast<std::size_t>(index.row())];
    const bool raw = role == Qt::UserRole;
    switch (index.column()) {
    case StepColumn:
        return QVariant::fromValue(s.step);
    case LossColumn:
        return raw ? QVariant(s.loss) : QVariant(QString::number(s.loss, 'f', 4));
    case StepMsColumn:
        return raw ? QVariant(s.stepMs) : QVariant(QString::number(s.stepMs, 'f', 1));
    case TokensColumn:
        return raw ? QVariant(s.tokensPerSecond) : QVariant(QString::number(s.tokensPerSecond, 'f', 0));
    default: {
        const auto d = static_cast<std::size_t>(index.column() - FirstDeviceColumn);
        const auto bytes = d < s.peakBytes.size() ? s.peakBytes[d] : 0;
        return raw ? QVariant::fromValue(bytes) : QVariant(QString::number(bytes / (1024.0 * 1024.0), 'f', 2));
    }
    }
}

QVariant RunMonitorModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case StepColumn:
        return tr("Step");
    case LossColumn:
        return tr("Loss");
    case StepMsColumn:
        return tr("Step (ms, measured)");
    case TokensColumn:
        return tr("Tokens/s");
    default:
        return tr("Peak %1 (MiB, measured)").arg(deviceName(section - FirstDeviceColumn));
    }
}

} // namespace ps::gui
