#include "views/summary_panel.h"

#include "models/summary_model.h"
#include "plots/op_histogram_plot.h"

#include <QHeaderView>
#include <QLabel>
#include <QTableView>
#include <QVBoxLayout>

namespace ps::gui {

SummaryPanel::SummaryPanel(SummaryModel* model, QWidget* parent)
    : QWidget(parent)
    , m_model(model)
    , m_table(new QTableView(this))
    , m_histogram(new OpHistogramPlot(this))
{
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(new QLabel(tr("<b>Model summary</b>"), this));
    layout->addWidget(m_table);
    layout->addWidget(new QLabel(tr("<b>Nodes per op type</b>"), this));
    layout->addWidget(m_histogram, 1);
    m_table->setModel(model);
    m_table->verticalHeader()->setVisible(false);
    m_table->horizontalHeader()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
    m_table->horizontalHeader()->setStretchLastSection(true);
    m_table->setSelectionMode(QAbstractItemView::NoSelection);
    m_table->verticalHeader()->setDefaultSectionSize(24);
    m_table->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    m_table->setFixedHeight(24 * 11 + 4); // ten summary rows and the header, no scrolling
    connect(model, &QAbstractItemModel::modelReset, this, &SummaryPanel::refreshHistogram);
}

void SummaryPanel::refreshHistogram()
{
    const auto& summary = m_model->summary();
    m_histogram->setHistogram(summary ? summary->opHistogram : decltype(summary->opHistogram) {});
}

} // namespace ps::gui
