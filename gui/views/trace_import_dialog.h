// Profile > Import profiler trace: a PyTorch profiler (Kineto JSON, gzipped or not) or Nsight
// Systems SQLite trace of the user's own run becomes the project's imported profile and a measured
// run. Preview runs `pipestudio import-trace --dry-run --json` as a child and shows its coverage
// report: the share of the forward and backward time attributed to nodes, nodes matched, the time
// attributed and left over, the optimizer's, and the unmatched operators with their time. Import
// stores it (the same child without --dry-run), refused below the minimum coverage the user sets,
// with that report, so a half profile is never stored.
#pragma once

#include <QDialog>
#include <QJsonObject>
#include <QProcess>

class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QTableWidget;

namespace ps::gui {

class TraceImportDialog : public QDialog
{
    Q_OBJECT
public:
    // `project`: the saved project file the trace is imported into; `executable`: pipestudio.
    TraceImportDialog(const QString& project, const QString& executable, QWidget* parent = nullptr);

    void setTracePath(const QString& path);
    void setDevice(const QString& device); // "" (from the trace), "cpu" or a catalog GPU id
    void setMinimumCoverage(double fraction);
    // Runs the dry run; `previewed` or `failed` follows.
    void preview();
    // Stores the profile and run; `imported` or `failed` follows (accept() on success).
    void import();

    [[nodiscard]] const QJsonObject& report() const
    {
        return m_report;
    }
    [[nodiscard]] QTableWidget* unmatchedTable() const
    {
        return m_unmatched;
    }
    [[nodiscard]] QPushButton* importButton() const
    {
        return m_import;
    }
    [[nodiscard]] QString summaryText() const;

Q_SIGNALS:
    void previewed();
    void imported(const QString& message);
    void failed(const QString& message);

private:
    void run(bool dryRun);
    void onFinished(int exitCode, QProcess::ExitStatus status);
    void showReport();
    [[nodiscard]] QStringList arguments(bool dryRun) const;

    QString m_project;
    QString m_executable;
    QLineEdit* m_path;
    QComboBox* m_device;
    QDoubleSpinBox* m_coverage;
    QLabel* m_summary;
    QTableWidget* m_unmatched;
    QPushButton* m_preview;
    QPushButton* m_import;
    QProcess* m_process = nullptr;
    bool m_dryRun = true;
    QJsonObject m_report;
};

} // namespace ps::gui
