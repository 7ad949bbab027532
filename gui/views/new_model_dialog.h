// File > New from zoo: pick a preset and override its sequence length, micro-batch and depth, and
// (transformers) run each attention as one Attention node that keeps no probabilities.
#pragma once

#include "zoo/model_config.h"

#include <QDialog>

class QCheckBox;
class QComboBox;
class QFormLayout;
class QSpinBox;

namespace ps::gui {

class NewModelDialog : public QDialog
{
    Q_OBJECT
public:
    explicit NewModelDialog(QWidget* parent = nullptr);

    [[nodiscard]] ModelConfig config() const;
    void selectModel(const QString& name);

private:
    void loadPreset();

    QComboBox* m_model;
    QSpinBox* m_layers;
    QSpinBox* m_seq;
    QSpinBox* m_microBatch;
    QCheckBox* m_fusedAttention;
    QFormLayout* m_form = nullptr;
};

} // namespace ps::gui
