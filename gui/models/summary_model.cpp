#include "models/summary_model.h"

#include <QLocale>

namespace ps::gui {
namespace {

    QString text(const std::string& s)
    {
        return QString::fromStdString(s);
    }

    QList<std::pair<QString, QString>> rowsFor(const GraphSummary& s)
    {
        const QLocale locale;
        return {
            { SummaryModel::tr("Model"), text(s.name) + QStringLiteral(" (") + text(s.family) + QStringLiteral(")") },
            { SummaryModel::tr("Micro-batch"), QString::number(s.microBatch) },
            { SummaryModel::tr("Nodes"), locale.toString(static_cast<qulonglong>(s.nodeCount)) },
            { SummaryModel::tr("Tensors"), locale.toString(static_cast<qulonglong>(s.tensorCount)) },
            { SummaryModel::tr("Layers"), QString::number(s.layerCount) },
            { SummaryModel::tr("Parameters"),
                text(formatCount(static_cast<double>(s.parameterCount))) + QStringLiteral(" (")
                    + locale.toString(static_cast<qlonglong>(s.parameterCount)) + QStringLiteral(")") },
            { SummaryModel::tr("Parameter memory (fp32)"), text(formatBytes(static_cast<double>(s.parameterBytes))) },
            { SummaryModel::tr("Forward FLOPs / sample"), text(formatFlops(s.forwardFlopsPerSample)) },
            { SummaryModel::tr("Training FLOPs / sample"),
                text(formatFlops(s.forwardFlopsPerSample + s.backwardFlopsPerSample)) },
            { SummaryModel::tr("Saved activations / sample"),
                text(formatBytes(static_cast<double>(s.activationBytesPerSample))) },
        };
    }

} // namespace

SummaryModel::SummaryModel(QObject* parent)
    : QAbstractTableModel(parent)
{
}

void SummaryModel::setSummary(std::optional<GraphSummary> summary)
{
    beginResetModel();
    m_summary = std::move(summary);
    m_rows = m_summary ? rowsFor(*m_summary) : QList<std::pair<QString, QString>>();
    endResetModel();
}

int SummaryModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_rows.size());
}

int SummaryModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : 2;
}

QVariant SummaryModel::data(const QModelIndex& index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid) || role != Qt::DisplayRole)
        return {};
    const auto& row = m_rows[index.row()];
    return index.column() == 0 ? row.first : row.second;
}

QVariant SummaryModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    return section == 0 ? tr("Property") : tr("Value");
}

} // namespace ps::gui
