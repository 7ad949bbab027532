// File > Import ONNX, one dialog: the model's inputs (every dimension dynamic, or fixed at the size
// it was exported with, and its role), the sizes to import at (batch and sequence, and every other
// named dynamic dimension, one not named like a sequence, by its own name; defaults: the exported
// ones; another fixed size re-specialises the graph), the loss that makes it trainable, whether to
// read the weights (off: a plan-only import that never reads the weights file; checked for the
// user when a weights file the model names is missing), the user's word over the importer's
// parameter rules (initializers to train or to keep constant, by name), and a live preview of what
// Import will give: nodes, parameters, ops the engine cannot train and every graph input's shape,
// from the same import run on a worker after each pause in the edits (Import waits for it).
#pragma once

#include "onnx/onnx_import.h"

#include <QDialog>
#include <QStringList>

#include <map>
#include <string>
#include <utility>
#include <vector>

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QVBoxLayout;
class QPushButton;
class QSpinBox;
class QTableWidget;
class QTimer;

namespace ps::gui {

class BackgroundJob;
struct JobOutcome;

// What Import would give at the dialog's choices (counted as `pipestudio info` counts them).
struct ImportPreview
{
    std::size_t nodes = 0;
    std::int64_t parameters = 0;
    std::int64_t parameterBytes = 0;
    QStringList opaque; // "Op xN": costed from shapes, not trainable by the engine
    QStringList inputs; // "name [2, 16] i64"
    QString error; // non-empty: the import fails at these choices (Import is disabled)
};

class OnnxImportDialog : public QDialog
{
    Q_OBJECT
public:
    // Reads the file's inputs (describeOnnxInputs); throws ps::Error naming the file when it is not a
    // model PipeStudio can import.
    explicit OnnxImportDialog(const QString& path, QWidget* parent = nullptr);

    [[nodiscard]] std::int64_t batch() const;
    // 0 when no input has a sequence dimension.
    [[nodiscard]] std::int64_t sequence() const;
    // Sizes of the other named dynamic dimensions (dim_param -> size).
    [[nodiscard]] std::map<std::string, std::int64_t> dims() const;
    // Empty: no loss (plan only).
    [[nodiscard]] QString loss() const;
    // False: import without reading the weights (external data files, large initializers).
    [[nodiscard]] bool keepWeights() const;
    void setKeepWeights(bool keep);
    void setBatch(int batch);
    void setSequence(int sequence);
    // "cross-entropy", "mse" or empty (none); throws ps::Error for another name.
    void setLoss(const QString& loss);
    // Sets a named dynamic dimension's size; throws ps::Error when the model has no such dimension.
    void setDim(const std::string& name, int size);
    // Initializers to train whatever the rules say / never to train, comma-separated names.
    void setOverrides(const QString& parameters, const QString& constants);
    // Everything above as the importer takes it (the loss apart).
    [[nodiscard]] OnnxImportOptions options() const;

    // The preview at the current choices, brought up to date first (it follows edits after a short
    // pause; this computes it now).
    [[nodiscard]] const ImportPreview& preview();
    // True while the preview shown is not that of the current choices (Import is disabled then).
    [[nodiscard]] bool previewPending() const
    {
        return m_previewStale;
    }
    [[nodiscard]] QTableWidget* table() const
    {
        return m_table;
    }
    [[nodiscard]] QPushButton* importButton() const
    {
        return m_import;
    }

private:
    // The constructor's parts: the inputs' table (returns the batch and sequence it suggests), the
    // choices below it, the preview and buttons, and the edits that refresh the preview.
    std::pair<std::int64_t, std::int64_t> addInputTable(QVBoxLayout* layout);
    void addChoices(QVBoxLayout* layout, std::int64_t batch, std::int64_t sequence);
    void addPreviewAndButtons(QVBoxLayout* layout);
    void connectEdits();
    void refresh();
    void startPreview();
    void previewArrived(const JobOutcome& outcome);
    void showPreview();

    QString m_path;
    std::vector<OnnxInputDim> m_dims;
    std::map<std::string, QSpinBox*> m_named; // a spin box per named dynamic dimension of role Other
    QTableWidget* m_table = nullptr;
    QSpinBox* m_batch = nullptr;
    QSpinBox* m_sequence = nullptr;
    QComboBox* m_loss = nullptr;
    QCheckBox* m_noWeights = nullptr;
    QLineEdit* m_parameters = nullptr;
    QLineEdit* m_constants = nullptr;
    QLabel* m_note = nullptr;
    QLabel* m_previewLabel = nullptr;
    QPushButton* m_import = nullptr;
    QTimer* m_previewTimer = nullptr;
    BackgroundJob* m_job = nullptr;
    std::uint64_t m_generation = 0; // of the choices; a preview of older ones is dropped
    ImportPreview m_preview;
    bool m_previewStale = true;
};

} // namespace ps::gui
