#include "models/profile_runner.h"

#include "models/run_launcher.h"

#include <QFileInfo>

namespace ps::gui {

ProfileRunner::ProfileRunner(QObject* parent)
    : QObject(parent)
    , m_executable(pipestudioExecutable())
{
}

bool ProfileRunner::start(const QString& project, int sizes)
{
    if (isRunning())
        return false;
    if (m_executable.isEmpty() || !QFileInfo(m_executable).isExecutable()) {
        Q_EMIT finished(false, tr("Cannot find the pipestudio executable to profile with (set PIPESTUDIO)."));
        return false;
    }
    delete m_process;
    m_process = new QProcess(this);
    m_process->setProcessChannelMode(QProcess::MergedChannels);
    m_output.clear();
    m_total = std::max(1, sizes);
    m_started = 0;
    m_cancelled = false;
    connect(m_process, &QProcess::readyRead, this, [this] {
        while (m_process->canReadLine()) {
            const auto line = QString::fromUtf8(m_process->readLine()).trimmed();
            m_output << line;
            // "Profiling 60 nodes at micro-batch 4 (5 repeats after 2 warm-up)" starts a size.
            if (line.startsWith(QStringLiteral("Profiling ")))
                ++m_started;
            Q_EMIT progress(std::max(0, m_started - 1), m_total, line);
        }
    });
    connect(m_process, &QProcess::finished, this, &ProfileRunner::onFinished);
    connect(m_process, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
        if (e == QProcess::FailedToStart)
            Q_EMIT finished(false, tr("Cannot start %1: %2").arg(m_executable, m_process->errorString()));
    });
    m_process->start(m_executable, { QStringLiteral("profile"), project });
    Q_EMIT progress(0, m_total, tr("Starting the profiler…"));
    return true;
}

void ProfileRunner::cancel()
{
    if (!isRunning())
        return;
    m_cancelled = true;
    m_process->kill();
}

bool ProfileRunner::isRunning() const
{
    return m_process && m_process->state() != QProcess::NotRunning;
}

void ProfileRunner::onFinished(int exitCode, QProcess::ExitStatus status)
{
    while (m_process->canReadLine())
        m_output << QString::fromUtf8(m_process->readLine()).trimmed();
    if (m_cancelled) {
        Q_EMIT finished(false, tr("Profiling cancelled; the project's profiles are unchanged."));
        return;
    }
    if (status == QProcess::NormalExit && exitCode == 0) {
        Q_EMIT progress(m_total, m_total, m_output.isEmpty() ? QString() : m_output.back());
        Q_EMIT finished(true, m_output.isEmpty() ? tr("Profiled.") : m_output.back());
        return;
    }
    QString reason = m_output.isEmpty() ? tr("no output") : m_output.back();
    reason.remove(QStringLiteral("pipestudio: error: "));
    Q_EMIT finished(false,
        status == QProcess::CrashExit ? tr("The profiler crashed: %1").arg(reason)
                                      : tr("Profiling failed: %1").arg(reason));
}

} // namespace ps::gui
