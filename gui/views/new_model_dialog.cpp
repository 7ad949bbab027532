#include "views/new_model_dialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QFormLayout>
#include <QLabel>
#include <QSpinBox>

namespace ps::gui {

NewModelDialog::NewModelDialog(QWidget* parent)
    : QDialog(parent)
    , m_model(new QComboBox(this))
    , m_layers(new QSpinBox(this))
    , m_seq(new QSpinBox(this))
    , m_microBatch(new QSpinBox(this))
    , m_fusedAttention(new QCheckBox(tr("Fused attention (no probabilities kept for backward)"), this))
{
    setWindowTitle(tr("New project from the model zoo"));
    for (const auto& name : zooModelNames())
        m_model->addItem(QString::fromStdString(name));
    m_layers->setObjectName(QStringLiteral("layers"));
    m_seq->setObjectName(QStringLiteral("seq"));
    m_layers->setRange(1, 512);
    m_seq->setRange(1, 65536);
    m_microBatch->setRange(1, 4096);
    auto* form = new QFormLayout(this);
    m_form = form;
    form->addRow(tr("Model"), m_model);
    form->addRow(tr("Layers"), m_layers);
    form->addRow(tr("Sequence length"), m_seq);
    form->addRow(tr("Micro-batch size"), m_microBatch);
    m_fusedAttention->setObjectName(QStringLiteral("fusedAttention"));
    m_fusedAttention->setToolTip(tr("Each attention as one Attention node, as scaled_dot_product_attention runs it: "
                                    "the backward recomputes the scores and softmax instead of keeping them"));
    form->addRow(QString(), m_fusedAttention);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
    form->addRow(buttons);
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    connect(m_model, &QComboBox::currentTextChanged, this, &NewModelDialog::loadPreset);
    loadPreset();
}

void NewModelDialog::selectModel(const QString& name)
{
    m_model->setCurrentText(name);
}

void NewModelDialog::loadPreset()
{
    const auto preset = zooPreset(m_model->currentText().toStdString());
    // A CNN's "layers" are a ResNet's depth or AmoebaNet's normal cells, its "sequence" the image
    // side (model_config.h).
    const bool resnet = preset.family == ModelFamily::ResNet;
    const bool amoeba = preset.family == ModelFamily::AmoebaNet;
    const bool cnn = resnet || amoeba;
    if (auto* label = qobject_cast<QLabel*>(m_form->labelForField(m_layers)))
        label->setText(resnet ? tr("Depth (18, 34, 50, 101, 152)")
                : amoeba      ? tr("Normal cells (3, 6, 9, ...)")
                              : tr("Layers"));
    if (auto* label = qobject_cast<QLabel*>(m_form->labelForField(m_seq)))
        label->setText(cnn ? tr("Image side (pixels)") : tr("Sequence length"));
    m_layers->setValue(static_cast<int>(preset.layers));
    m_seq->setValue(static_cast<int>(preset.seq));
    m_microBatch->setValue(static_cast<int>(preset.microBatch));
    const bool attention = !cnn && preset.family != ModelFamily::Mlp;
    m_fusedAttention->setEnabled(attention);
    if (!attention)
        m_fusedAttention->setChecked(false);
}

ModelConfig NewModelDialog::config() const
{
    auto c = zooPreset(m_model->currentText().toStdString());
    if (c.decoderLayers == c.layers)
        c.decoderLayers = m_layers->value();
    c.layers = m_layers->value();
    c.seq = m_seq->value();
    if (c.maxPositions > 0 && c.seq > c.maxPositions)
        c.maxPositions = c.seq;
    c.microBatch = m_microBatch->value();
    c.fusedAttention = m_fusedAttention->isEnabled() && m_fusedAttention->isChecked();
    return c;
}

} // namespace ps::gui
