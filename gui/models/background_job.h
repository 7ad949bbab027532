// One reusable background job for long GUI work (auto-search, project loading, ONNX import, CPU
// measurement): runs a function on a worker thread, turns every exception it throws into a
// readable error, honours a cooperative cancel, and delivers exactly one outcome per start on the
// GUI thread. The work computes values; the receiver applies them on the GUI thread, so session
// state is never touched from the worker. Destroying a running job cancels it and waits for the
// worker, so closing a window mid-job is safe.
#pragma once

#include <QObject>
#include <QString>

#include <any>
#include <atomic>
#include <cstdint>
#include <functional>
#include <stop_token>
#include <thread>

namespace ps::gui {

// Thrown by JobContext::throwIfCancelled: the work ends as Cancelled, with no value.
struct JobCancelled
{
};

// What the work function sees: the cancel request it polls and a progress reporter.
class JobContext
{
public:
    JobContext(std::stop_token token, std::function<void(double)> progress);
    JobContext(const JobContext&) = delete;
    JobContext& operator=(const JobContext&) = delete;

    [[nodiscard]] bool isCancelled() const
    {
        return m_token.stop_requested();
    }
    [[nodiscard]] std::stop_token stopToken() const
    {
        return m_token;
    }
    // Set when cancel is requested, for APIs that poll a flag (searchPlans).
    [[nodiscard]] const std::atomic<bool>* cancelFlag() const
    {
        return &m_flag;
    }
    void throwIfCancelled() const;
    // `fraction` in [0, 1]; arrives queued on the GUI thread as BackgroundJob::progress.
    void reportProgress(double fraction) const;

private:
    std::stop_token m_token;
    std::atomic<bool> m_flag { false };
    std::stop_callback<std::function<void()>> m_onStop;
    std::function<void(double)> m_progress;
};

struct JobOutcome
{
    enum class Status { Finished, Failed, Cancelled };
    Status status = Status::Finished;
    // What the work returned: set when Finished, and when Cancelled if the work returned early
    // with a partial result instead of throwing JobCancelled.
    std::any value;
    QString error; // Failed: the exception's message

    template <class T> [[nodiscard]] const T* valueAs() const
    {
        return std::any_cast<T>(&value);
    }
    [[nodiscard]] bool finished() const
    {
        return status == Status::Finished;
    }
};

class BackgroundJob : public QObject
{
    Q_OBJECT
public:
    // Runs on the worker thread; must not touch QObjects or widgets of the GUI thread.
    using Work = std::function<std::any(JobContext&)>;

    explicit BackgroundJob(QObject* parent = nullptr);
    ~BackgroundJob() override;

    // False (and nothing delivered) while a job runs.
    bool start(Work work);
    // Asks the work to stop; the outcome still arrives once, as Cancelled.
    void cancel();
    // True from start until the outcome has been delivered.
    [[nodiscard]] bool isRunning() const
    {
        return m_running;
    }

Q_SIGNALS:
    void progress(double fraction);
    // Exactly once per successful start, on the thread that owns the job.
    void finished(const ps::gui::JobOutcome& outcome);

private:
    void deliver(std::uint64_t generation, JobOutcome outcome);

    std::jthread m_thread;
    std::uint64_t m_generation = 0;
    bool m_running = false;
};

} // namespace ps::gui

Q_DECLARE_METATYPE(ps::gui::JobOutcome)
