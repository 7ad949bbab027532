// Plan > Scale out: the project's GPT on a cluster (issue P17): node kind, GPUs and global batch in;
// the searched tensor x pipeline x data configurations out (fastest first, those that fit), the
// scale-out curve over 1, 2, 4, ... nodes, and the best of each (t, p, d) split of the GPUs
// (TFLOP/s and memory per GPU). The same search as `pipestudio scale`.
#pragma once

#include "models/scale_out.h"

#include <QDialog>

class QCheckBox;
class QComboBox;
class QLabel;
class QSpinBox;
class QTableWidget;
class QTabWidget;

namespace ps::gui {

class ScaleOutPlot;
class ScaleShapePlot;

class ScaleDialog : public QDialog
{
    Q_OBJECT
public:
    ScaleDialog(const GptShape& model, QWidget* parent = nullptr);
    void setCluster(const QString& node, int gpus, int globalBatch);
    void setFeatures(const ScaleFeatures& features);
    // Runs the search (fast: a few milliseconds) and fills the table and the curve.
    void search();
    [[nodiscard]] const ScaleOut& result() const
    {
        return m_result;
    }
    [[nodiscard]] QTableWidget* table() const
    {
        return m_table;
    }
    [[nodiscard]] ScaleShapePlot* shapePlot() const
    {
        return m_shapes;
    }
    // Shows the plot against the GPU count (0) or against (t, p, d) (1).
    void showPlot(int index);

private:
    GptShape m_model;
    QComboBox* m_node;
    QSpinBox* m_gpus;
    QSpinBox* m_batch;
    QCheckBox* m_sequenceParallel;
    QCheckBox* m_zero1;
    QCheckBox* m_overlap;
    QLabel* m_summary;
    QTableWidget* m_table;
    ScaleOutPlot* m_plot;
    ScaleShapePlot* m_shapes;
    QTabWidget* m_plots;
    ScaleOut m_result;
};

} // namespace ps::gui
