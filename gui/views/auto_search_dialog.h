// Auto-search: algorithms, stages, schedules (kFkB over a range of k), micro-batches, device,
// memory limit and whether swap/recompute are allowed. The search runs as a BackgroundJob with a
// progress bar and Cancel (an error it throws is shown, never fatal); ranked results can be
// applied to the editor.
#pragma once

#include "plan/planner.h"

#include <QDialog>

#include <atomic>
#include <functional>

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTableView;

namespace ps::gui {

class BackgroundJob;
struct JobOutcome;
class PlanSession;
class SearchResultsModel;

class AutoSearchDialog : public QDialog
{
    Q_OBJECT
public:
    explicit AutoSearchDialog(PlanSession* session, QWidget* parent = nullptr);
    ~AutoSearchDialog() override;

    // The search the dialog runs: searchPlans, replaceable so a test can make it throw.
    using SearchFunction = std::function<std::vector<Plan>(const Graph&, const Profile&, const SearchRequest&,
        const std::function<void(double)>&, const std::atomic<bool>*)>;
    void setSearchFunction(SearchFunction search)
    {
        m_search = std::move(search);
    }

    // The request the form describes.
    [[nodiscard]] SearchRequest request() const;
    void start(const SearchRequest& request);
    void cancel();
    [[nodiscard]] bool isRunning() const;
    [[nodiscard]] SearchResultsModel* results() const
    {
        return m_results;
    }
    // Applies result `row` to the editor (schedule and cuts); false if it has no feasible plan.
    bool applyResult(int row);

    // Why the last search failed (an exception thrown by the search), empty when it did not.
    [[nodiscard]] const QString& lastError() const
    {
        return m_lastError;
    }
    [[nodiscard]] BackgroundJob* job() const
    {
        return m_job;
    }

Q_SIGNALS:
    void searchFinished();
    // The search threw; the dialog shows `message` and stays usable.
    void searchFailed(const QString& message);

private:
    void setupForm();
    void onProgress(double fraction);
    void onFinished(const JobOutcome& outcome);

    PlanSession* m_session;
    SearchResultsModel* m_results;
    QComboBox* m_algorithm = nullptr;
    QComboBox* m_schedule = nullptr;
    QComboBox* m_device = nullptr;
    QSpinBox* m_stages = nullptr;
    QSpinBox* m_microBatches = nullptr;
    QSpinBox* m_kMin = nullptr;
    QSpinBox* m_kMax = nullptr;
    QDoubleSpinBox* m_microBatch = nullptr;
    QDoubleSpinBox* m_memoryGiB = nullptr;
    QCheckBox* m_swap = nullptr;
    QCheckBox* m_recompute = nullptr;
    QProgressBar* m_progress = nullptr;
    QPushButton* m_run = nullptr;
    QPushButton* m_cancel = nullptr;
    QTableView* m_table = nullptr;
    BackgroundJob* m_job;
    SearchFunction m_search = searchPlans;
    QString m_lastError;
};

} // namespace ps::gui
