// Starts `pipestudio train ... --json` as a child process and follows it: one signal per JSON
// line (the run's id, each step, the summary), the child's stderr as log lines, and one outcome
// when it ends. A failing child's last JSON line ({"error": ..., "run": id}) is the readable
// error; its stderr tail is the fallback when it died before writing one. A crash or a kill of the child never takes
// the window down; when the child cannot record its own end (SIGKILL, crash) the launcher marks the run in the project
// so it is never left "running".
#pragma once

#include <QObject>
#include <QProcess>
#include <QString>
#include <QStringList>

#include <cstdint>
#include <vector>

namespace ps::gui {

struct LaunchRequest
{
    QString project; // the .pstudio file the child trains and records into
    std::int64_t planId = 0; // a stored plan: its cuts, schedule and memory actions
    int devices = 2; // pipeline devices: cpu:N, or GPU `gpu` split into that many (cuda:GxN)
    int gpu = -1; // CUDA ordinal of the GPU to train on; -1: CPU devices
    std::int64_t deviceMemoryBytes = 0; // capacity of each device; 0: no cap
    std::int64_t steps = 20;
    std::int64_t microBatch = 0; // 0: the project's
    QString dataFile; // empty: the default corpus
    bool randomTokens = false; // random tokens: throughput runs that need no data
    double learningRate = 1e-3;
    std::int64_t checkpointEvery = 0; // 0: only at the end (and on Stop)
};

// The child's command line after the executable.
[[nodiscard]] QStringList trainArguments(const LaunchRequest& request);
// `train --devices` for `devices` stage devices: CPU devices (gpu < 0), or GPU `gpu` whole or split.
[[nodiscard]] QString devicesArgument(int gpu, int devices);
// The pipestudio executable: this process when it is pipestudio, else $PIPESTUDIO, else a
// `pipestudio` next to this executable or on PATH. Empty when none is found.
[[nodiscard]] QString pipestudioExecutable();

// One optimizer step as the child reports it (measured).
struct RunStep
{
    std::int64_t step = 0;
    double loss = 0;
    double learningRate = 0;
    double stepMs = 0;
    double tokensPerSecond = 0;
    std::vector<std::int64_t> peakBytes; // per device
    std::vector<double> busyMs; // per device
};

// A line of `pipestudio train --json`.
struct TrainLine
{
    enum class Kind { Start, Step, Summary, Error, Other };
    Kind kind = Kind::Other;
    std::int64_t runId = 0; // Start, Summary, Error
    QString configJson; // Start
    RunStep step; // Step
    QString status; // Summary: finished | interrupted
    QString error; // Error: why the child fails (it exits non-zero next)
};
[[nodiscard]] TrainLine parseTrainLine(const QByteArray& line);

struct RunOutcome
{
    std::int64_t runId = 0; // 0: the child failed before it recorded a run
    QString status; // finished | interrupted | failed
    QString message; // readable: what happened, the child's error when it failed
    std::int64_t lastStep = 0;
};

class RunLauncher : public QObject
{
    Q_OBJECT
public:
    explicit RunLauncher(QObject* parent = nullptr);
    ~RunLauncher() override;

    void setExecutable(const QString& path)
    {
        m_executable = path;
    }
    [[nodiscard]] const QString& executable() const
    {
        return m_executable;
    }
    // False (and `failed` emitted) when a run is going or no executable is found.
    bool start(const LaunchRequest& request);
    // Asks the child to stop after the current step: it checkpoints and exits (SIGINT).
    void stop();
    // Ends the child at once (SIGKILL); the run is then stored as interrupted.
    void kill();
    [[nodiscard]] bool isRunning() const;
    [[nodiscard]] std::int64_t runId() const
    {
        return m_runId;
    }
    [[nodiscard]] const LaunchRequest& request() const
    {
        return m_request;
    }
    [[nodiscard]] qint64 processId() const;

Q_SIGNALS:
    void runStarted(std::int64_t runId, const QString& configJson);
    void stepReceived(const ps::gui::RunStep& step);
    void logLine(const QString& line);
    void finished(const ps::gui::RunOutcome& outcome);

private:
    void readStdout();
    void readStderr();
    void onFinished(int exitCode, QProcess::ExitStatus status);
    void onError(QProcess::ProcessError error);
    [[nodiscard]] QString childError() const;
    void finish(RunOutcome outcome);
    void refuse(const QString& message);

    QString m_executable;
    QProcess* m_process = nullptr;
    LaunchRequest m_request;
    std::int64_t m_runId = 0;
    std::int64_t m_lastStep = 0;
    QString m_summaryStatus;
    QString m_jsonError; // the child's {"error": ...} line
    QStringList m_stderr; // the child's last lines
    bool m_killRequested = false;
    bool m_stopRequested = false;
    bool m_done = true;
};

} // namespace ps::gui

Q_DECLARE_METATYPE(ps::gui::RunStep)
Q_DECLARE_METATYPE(ps::gui::RunOutcome)
