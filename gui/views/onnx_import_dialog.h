// File > Import ONNX: the preview of a model's inputs (every dimension dynamic, or fixed at the size
// it was exported with, and its role), the batch and sequence sizes to import at (defaults: the
// exported ones; another fixed size re-specialises the graph), the loss that makes it trainable,
// and whether to read the weights (off: a plan-only import that never reads the weights file;
// checked for the user when a weights file the model names is missing).
#pragma once

#include "onnx/onnx_import.h"

#include <QDialog>

#include <vector>

class QCheckBox;
class QComboBox;
class QLabel;
class QSpinBox;
class QTableWidget;

namespace ps::gui {

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
    // Empty: no loss (plan only).
    [[nodiscard]] QString loss() const;
    // False: import without reading the weights (external data files, large initializers).
    [[nodiscard]] bool keepWeights() const;
    void setKeepWeights(bool keep);
    void setBatch(int batch);
    void setSequence(int sequence);
    [[nodiscard]] QTableWidget* table() const
    {
        return m_table;
    }

private:
    void refresh();

    std::vector<OnnxInputDim> m_dims;
    QTableWidget* m_table = nullptr;
    QSpinBox* m_batch = nullptr;
    QSpinBox* m_sequence = nullptr;
    QComboBox* m_loss = nullptr;
    QCheckBox* m_noWeights = nullptr;
    QLabel* m_note = nullptr;
};

} // namespace ps::gui
