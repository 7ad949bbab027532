#include "models/run_launcher.h"

#include "store/project_store.h"

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QStandardPaths>

#include <csignal>

namespace ps::gui {
namespace {

    constexpr int kStderrLines = 40;
    const auto kErrorPrefix = QStringLiteral("pipestudio: error: ");

    std::vector<double> doubles(const QJsonValue& v)
    {
        std::vector<double> out;
        for (const auto& x : v.toArray())
            out.push_back(x.toDouble());
        return out;
    }

} // namespace

QString devicesArgument(int gpu, int devices)
{
    return gpu < 0     ? QStringLiteral("cpu:%1").arg(devices)
        : devices == 1 ? QStringLiteral("cuda:%1").arg(gpu)
                       : QStringLiteral("cuda:%1x%2").arg(gpu).arg(devices);
}

QStringList trainArguments(const LaunchRequest& r)
{
    const auto devices = devicesArgument(r.gpu, r.devices);
    QStringList a { QStringLiteral("train"), r.project, QStringLiteral("--devices"), devices, QStringLiteral("--steps"),
        QString::number(r.steps), QStringLiteral("--lr"), QString::number(r.learningRate, 'g', 10),
        QStringLiteral("--json") };
    if (r.planId > 0)
        a << QStringLiteral("--plan") << QString::number(r.planId);
    if (r.deviceMemoryBytes > 0)
        a << QStringLiteral("--device-memory") << QString::number(r.deviceMemoryBytes);
    if (r.microBatch > 0)
        a << QStringLiteral("--micro-batch") << QString::number(r.microBatch);
    if (r.randomTokens)
        a << QStringLiteral("--data-format") << QStringLiteral("random");
    else if (!r.dataFile.isEmpty())
        a << QStringLiteral("--data") << r.dataFile;
    if (r.checkpointEvery > 0)
        a << QStringLiteral("--checkpoint-every") << QString::number(r.checkpointEvery);
    return a;
}

QString pipestudioExecutable()
{
    const auto self = QCoreApplication::applicationFilePath();
    if (QFileInfo(self).fileName() == QStringLiteral("pipestudio"))
        return self;
    const auto env = qEnvironmentVariable("PIPESTUDIO");
    if (!env.isEmpty() && QFileInfo(env).isExecutable())
        return env;
    const auto sibling = QDir(QCoreApplication::applicationDirPath()).filePath(QStringLiteral("pipestudio"));
    if (QFileInfo(sibling).isExecutable())
        return sibling;
    return QStandardPaths::findExecutable(QStringLiteral("pipestudio"));
}

TrainLine parseTrainLine(const QByteArray& line)
{
    TrainLine t;
    const auto doc = QJsonDocument::fromJson(line);
    if (!doc.isObject())
        return t;
    const auto o = doc.object();
    if (o.contains(QStringLiteral("error"))) {
        t.kind = TrainLine::Kind::Error;
        t.runId = o.value(QStringLiteral("run")).toInteger();
        t.error = o.value(QStringLiteral("error")).toString();
    } else if (o.contains(QStringLiteral("summary"))) {
        t.kind = TrainLine::Kind::Summary;
        t.runId = o.value(QStringLiteral("run")).toInteger();
        t.status = o.value(QStringLiteral("status")).toString();
        t.step.step = o.value(QStringLiteral("step")).toInteger();
        t.step.loss = o.value(QStringLiteral("loss")).toDouble();
        t.step.tokensPerSecond = o.value(QStringLiteral("tokens_per_s")).toDouble();
    } else if (o.contains(QStringLiteral("config"))) {
        t.kind = TrainLine::Kind::Start;
        t.runId = o.value(QStringLiteral("run")).toInteger();
        t.configJson = QString::fromUtf8(QJsonDocument(o.value(QStringLiteral("config")).toObject()).toJson());
    } else if (o.contains(QStringLiteral("step"))) {
        t.kind = TrainLine::Kind::Step;
        auto& s = t.step;
        s.step = o.value(QStringLiteral("step")).toInteger();
        s.loss = o.value(QStringLiteral("loss")).toDouble();
        s.learningRate = o.value(QStringLiteral("lr")).toDouble();
        s.stepMs = o.value(QStringLiteral("step_ms")).toDouble();
        s.tokensPerSecond = o.value(QStringLiteral("tokens_per_s")).toDouble();
        for (double b : doubles(o.value(QStringLiteral("peak_bytes"))))
            s.peakBytes.push_back(static_cast<std::int64_t>(b));
        s.busyMs = doubles(o.value(QStringLiteral("busy_ms")));
    }
    return t;
}

RunLauncher::RunLauncher(QObject* parent)
    : QObject(parent)
    , m_executable(pipestudioExecutable())
{
    qRegisterMetaType<ps::gui::RunStep>();
    qRegisterMetaType<ps::gui::RunOutcome>();
}

RunLauncher::~RunLauncher()
{
    // Closing the window ends the training like Stop would, without waiting for it.
    if (isRunning())
        ::kill(static_cast<pid_t>(m_process->processId()), SIGINT);
    if (m_process) {
        m_process->disconnect(this);
        m_process->waitForFinished(5000);
    }
}

bool RunLauncher::start(const LaunchRequest& request)
{
    if (isRunning()) {
        refuse(tr("A run is already going; stop it first."));
        return false;
    }
    if (m_executable.isEmpty() || !QFileInfo(m_executable).isExecutable()) {
        refuse(tr("Cannot find the pipestudio executable to train with (set PIPESTUDIO to its path)."));
        return false;
    }
    delete m_process;
    m_process = new QProcess(this);
    m_request = request;
    m_runId = 0;
    m_lastStep = 0;
    m_summaryStatus.clear();
    m_jsonError.clear();
    m_stderr.clear();
    m_killRequested = m_stopRequested = false;
    m_done = false;
    connect(m_process, &QProcess::readyReadStandardOutput, this, &RunLauncher::readStdout);
    connect(m_process, &QProcess::readyReadStandardError, this, &RunLauncher::readStderr);
    connect(m_process, &QProcess::finished, this, &RunLauncher::onFinished);
    connect(m_process, &QProcess::errorOccurred, this, &RunLauncher::onError);
    const auto args = trainArguments(request);
    Q_EMIT logLine(QStringLiteral("$ pipestudio ") + args.join(QLatin1Char(' ')));
    m_process->start(m_executable, args);
    return true;
}

void RunLauncher::stop()
{
    if (!isRunning())
        return;
    m_stopRequested = true;
    Q_EMIT logLine(tr("Stop requested: the run checkpoints after the current step, then exits."));
    ::kill(static_cast<pid_t>(m_process->processId()), SIGINT);
}

void RunLauncher::kill()
{
    if (!isRunning())
        return;
    m_killRequested = true;
    Q_EMIT logLine(tr("Kill requested."));
    m_process->kill();
}

bool RunLauncher::isRunning() const
{
    return m_process && m_process->state() != QProcess::NotRunning;
}

qint64 RunLauncher::processId() const
{
    return m_process ? m_process->processId() : 0;
}

void RunLauncher::readStdout()
{
    while (m_process->canReadLine()) {
        const auto line = m_process->readLine().trimmed();
        const auto t = parseTrainLine(line);
        switch (t.kind) {
        case TrainLine::Kind::Start:
            m_runId = t.runId;
            Q_EMIT runStarted(t.runId, t.configJson);
            break;
        case TrainLine::Kind::Step:
            m_lastStep = t.step.step;
            Q_EMIT stepReceived(t.step);
            break;
        case TrainLine::Kind::Summary:
            m_summaryStatus = t.status;
            break;
        case TrainLine::Kind::Error:
            m_jsonError = t.error;
            if (m_runId == 0)
                m_runId = t.runId;
            Q_EMIT logLine(tr("Training error: %1").arg(t.error));
            break;
        case TrainLine::Kind::Other:
            if (!line.isEmpty())
                Q_EMIT logLine(QString::fromUtf8(line));
            break;
        }
    }
}

void RunLauncher::readStderr()
{
    const auto text = QString::fromUtf8(m_process->readAllStandardError());
    for (const auto& line : text.split(QLatin1Char('\n'), Qt::SkipEmptyParts)) {
        m_stderr << line;
        Q_EMIT logLine(line);
    }
    while (m_stderr.size() > kStderrLines)
        m_stderr.removeFirst();
}

QString RunLauncher::childError() const
{
    if (!m_jsonError.isEmpty())
        return m_jsonError;
    for (auto it = m_stderr.rbegin(); it != m_stderr.rend(); ++it) {
        if (it->startsWith(kErrorPrefix))
            return it->mid(kErrorPrefix.size());
    }
    return m_stderr.isEmpty() ? QString() : m_stderr.back();
}

void RunLauncher::onFinished(int exitCode, QProcess::ExitStatus status)
{
    if (m_done)
        return;
    readStdout();
    readStderr();
    RunOutcome o { m_runId, QString(), QString(), m_lastStep };
    if (!m_summaryStatus.isEmpty()) {
        o.status = m_summaryStatus;
        o.message = m_summaryStatus == QStringLiteral("finished")
            ? tr("Run %1 finished after step %2.").arg(m_runId).arg(m_lastStep)
            : tr("Run %1 stopped at step %2 with a checkpoint.").arg(m_runId).arg(m_lastStep);
    } else if (status == QProcess::CrashExit && (m_killRequested || m_stopRequested)) {
        o.status = QStringLiteral("interrupted");
        o.message = tr("Run %1 was killed at step %2; no checkpoint was written for the steps since the last one.")
                        .arg(m_runId)
                        .arg(m_lastStep);
    } else if (status == QProcess::CrashExit) {
        o.status = QStringLiteral("failed");
        o.message = tr("The training process crashed at step %1 (it ended by a signal).").arg(m_lastStep);
        if (const auto e = childError(); !e.isEmpty())
            o.message += QLatin1Char(' ') + e;
    } else {
        o.status = QStringLiteral("failed");
        const auto e = childError();
        o.message = tr("Training failed (exit code %1): %2")
                        .arg(exitCode)
                        .arg(e.isEmpty() ? tr("the process gave no reason") : e);
    }
    if (m_runId > 0 && o.status != m_summaryStatus) {
        // The child could not record its own end: never leave the run "running".
        try {
            ProjectStore::open(m_request.project.toStdString())
                .endRunIfRunning(m_runId, o.status.toStdString(), o.message.toStdString());
        } catch (const std::exception& e) {
            o.message += tr(" (the project could not be updated: %1)").arg(QString::fromStdString(e.what()));
        }
    }
    finish(o);
}

void RunLauncher::onError(QProcess::ProcessError error)
{
    if (error != QProcess::FailedToStart || m_done)
        return; // crashes and kills arrive through finished()
    finish({ 0, QStringLiteral("failed"), tr("Cannot start %1: %2").arg(m_executable, m_process->errorString()), 0 });
}

void RunLauncher::finish(RunOutcome outcome)
{
    m_done = true;
    Q_EMIT logLine(outcome.message);
    Q_EMIT finished(outcome);
}

void RunLauncher::refuse(const QString& message)
{
    // The going run (if any) is untouched; only this request fails.
    Q_EMIT logLine(message);
    Q_EMIT finished({ 0, QStringLiteral("failed"), message, 0 });
}

} // namespace ps::gui
