// Property/value rows of the model summary (core's GraphSummary) for the summary panel.
#pragma once

#include "graph/graph_summary.h"

#include <QAbstractTableModel>

#include <optional>

namespace ps::gui {

class SummaryModel : public QAbstractTableModel
{
    Q_OBJECT
public:
    explicit SummaryModel(QObject* parent = nullptr);

    void setSummary(std::optional<GraphSummary> summary);
    [[nodiscard]] const std::optional<GraphSummary>& summary() const
    {
        return m_summary;
    }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    std::optional<GraphSummary> m_summary;
    QList<std::pair<QString, QString>> m_rows;
};

} // namespace ps::gui
