#include "models/background_job.h"

#include <QCoreApplication>
#include <QMetaObject>

#include <exception>

namespace ps::gui {
namespace {

    JobOutcome runWork(const BackgroundJob::Work& work, JobContext& context)
    {
        JobOutcome outcome;
        try {
            outcome.value = work(context);
        } catch (const JobCancelled&) {
            outcome.status = JobOutcome::Status::Cancelled;
            return outcome;
        } catch (const std::exception& e) {
            outcome.status = JobOutcome::Status::Failed;
            outcome.error = QString::fromUtf8(e.what());
            return outcome;
        } catch (...) {
            outcome.status = JobOutcome::Status::Failed;
            outcome.error = QCoreApplication::translate("ps::gui::BackgroundJob", "an unknown error was thrown");
            return outcome;
        }
        if (context.isCancelled())
            outcome.status = JobOutcome::Status::Cancelled;
        return outcome;
    }

} // namespace

JobContext::JobContext(std::stop_token token, std::function<void(double)> progress)
    : m_token(std::move(token))
    , m_onStop(m_token, [this] { m_flag.store(true); })
    , m_progress(std::move(progress))
{
}

void JobContext::throwIfCancelled() const
{
    if (isCancelled())
        throw JobCancelled {};
}

void JobContext::reportProgress(double fraction) const
{
    if (m_progress)
        m_progress(fraction);
}

BackgroundJob::BackgroundJob(QObject* parent)
    : QObject(parent)
{
    qRegisterMetaType<ps::gui::JobOutcome>();
}

BackgroundJob::~BackgroundJob()
{
    // Cancel and wait: the worker refers to this object. Its last queued delivery is dropped with
    // the object's posted events, so nothing arrives after destruction.
    if (m_thread.joinable()) {
        m_thread.request_stop();
        m_thread.join();
    }
}

bool BackgroundJob::start(Work work)
{
    if (m_running || !work)
        return false;
    if (m_thread.joinable())
        m_thread.join(); // a finished worker whose outcome was delivered
    m_running = true;
    const auto generation = ++m_generation;
    m_thread = std::jthread([this, generation, work = std::move(work)](std::stop_token token) {
        const auto report = [this, generation](double fraction) {
            QMetaObject::invokeMethod(
                this,
                [this, generation, fraction] {
                    if (m_running && generation == m_generation)
                        Q_EMIT progress(fraction);
                },
                Qt::QueuedConnection);
        };
        JobContext context(std::move(token), report);
        auto outcome = runWork(work, context);
        // The worker's last act: everything it computed travels in the event, nothing is shared.
        QMetaObject::invokeMethod(
            this,
            [this, generation, outcome = std::move(outcome)]() mutable { deliver(generation, std::move(outcome)); },
            Qt::QueuedConnection);
    });
    return true;
}

void BackgroundJob::cancel()
{
    if (m_running)
        m_thread.request_stop();
}

void BackgroundJob::deliver(std::uint64_t generation, JobOutcome outcome)
{
    if (!m_running || generation != m_generation)
        return;
    m_thread.join(); // it posted this as its last act, so the join is immediate
    m_running = false;
    Q_EMIT finished(outcome);
}

} // namespace ps::gui
