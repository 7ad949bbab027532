// Auto-search: algorithms, stages, schedules (kFkB over a range of k), micro-batches, device,
// memory limit and whether swap/recompute are allowed. The search runs on a worker thread with a
// progress bar and Cancel; ranked results can be applied to the editor.
#pragma once

#include "plan/planner.h"

#include <QDialog>

#include <atomic>
#include <memory>

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTableView;
class QThread;

namespace ps::gui {

class PlanSession;
class SearchResultsModel;

class AutoSearchDialog : public QDialog
{
    Q_OBJECT
public:
    explicit AutoSearchDialog(PlanSession* session, QWidget* parent = nullptr);
    ~AutoSearchDialog() override;

    // The request the form describes.
    [[nodiscard]] SearchRequest request() const;
    void start(const SearchRequest& request);
    void cancel();
    [[nodiscard]] bool isRunning() const
    {
        return m_worker != nullptr;
    }
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

Q_SIGNALS:
    void searchFinished();
    // The search threw; the dialog shows `message` and stays usable.
    void searchFailed(const QString& message);

private:
    void setupForm();
    void onProgress(double fraction);
    void onFinished(std::vector<Plan> plans, const QString& error);

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
    QThread* m_worker = nullptr;
    std::shared_ptr<std::atomic<bool>> m_cancelFlag;
    QString m_lastError;
};

} // namespace ps::gui
