// Profile > On this machine: runs `pipestudio profile <project>` as a child process (a crash in a
// kernel never takes the window down), reports which micro-batch size it is measuring, and can be
// cancelled (the child stores the profile in one transaction at the end, so a cancelled run leaves
// the project as it was).
#pragma once

#include <QObject>
#include <QProcess>
#include <QStringList>

namespace ps::gui {

class ProfileRunner : public QObject
{
    Q_OBJECT
public:
    explicit ProfileRunner(QObject* parent = nullptr);

    void setExecutable(const QString& path)
    {
        m_executable = path;
    }
    // `sizes`: how many micro-batch sizes the child measures (its progress steps).
    bool start(const QString& project, int sizes);
    void cancel();
    [[nodiscard]] bool isRunning() const;

Q_SIGNALS:
    // `done` of `total` sizes measured; `line` is what the child printed.
    void progress(int done, int total, const QString& line);
    void finished(bool ok, const QString& message);

private:
    void onFinished(int exitCode, QProcess::ExitStatus status);

    QString m_executable;
    QProcess* m_process = nullptr;
    QStringList m_output;
    int m_total = 1;
    int m_started = 0;
    bool m_cancelled = false;
};

} // namespace ps::gui
