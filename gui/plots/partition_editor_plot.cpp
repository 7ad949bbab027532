#include "plots/partition_editor_plot.h"

#include "graph/graph_summary.h"
#include "models/partition_editor_data.h"
#include "models/plan_session.h"
#include "plots/plot_frame.h"
#include "plots/plot_style.h"
#include "plots/plot_units.h"

#include <QToolTip>
#include <qcustomplot.h>

#include <array>

namespace ps::gui {
namespace {

    constexpr double kGrabPixels = 6;

    QColor stageShade(std::size_t stage)
    {
        return stage % 2 == 0 ? QColor(79, 163, 224, 28) : QColor(108, 192, 112, 28);
    }

    // Stages sharing a device share a shade (Mixed-pipe).
    QColor deviceShade(int device)
    {
        static const std::array<QColor, 8> kShades { QColor(79, 163, 224, 40), QColor(108, 192, 112, 40),
            QColor(240, 160, 60, 40), QColor(170, 110, 200, 40), QColor(230, 90, 90, 40), QColor(90, 190, 190, 40),
            QColor(200, 180, 60, 40), QColor(140, 140, 140, 40) };
        return kShades[static_cast<std::size_t>(device) % kShades.size()];
    }

} // namespace

PartitionEditorPlot::PartitionEditorPlot(PlanSession* session, QWidget* parent)
    : QWidget(parent)
    , m_session(session)
    , m_plot(new QCustomPlot(this))
{
    plotframe::embed(this, m_plot);
    setFocusPolicy(Qt::StrongFocus);
    setupAxes();
    connect(session, &PlanSession::planChanged, this, &PartitionEditorPlot::rebuild);
    connect(m_plot, &QCustomPlot::mousePress, this, &PartitionEditorPlot::onPress);
    connect(m_plot, &QCustomPlot::mouseMove, this, &PartitionEditorPlot::onMove);
    connect(m_plot, &QCustomPlot::mouseRelease, this, &PartitionEditorPlot::onRelease);
    rebuild();
}

void PartitionEditorPlot::setupAxes()
{
    m_plot->xAxis->setLabel(tr("node (graph order)"));
    m_plot->yAxis->setLabel(tr("time per micro-batch (ms)"));
    m_plot->yAxis2->setVisible(true);
    m_plot->legend->setVisible(true);
    m_plot->legend->setFont(plotframe::smallFont(this));
    m_plot->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignLeft);
    m_plot->setInteractions(QCP::iRangeZoom);
    m_plot->axisRect()->setRangeZoom(Qt::Horizontal);
}

// The stage-memory line and the capacity on the right axis, in the unit of the stages' memory; a
// capacity far above them stays off the axis (the legend names it). Returns the axis's top.
double PartitionEditorPlot::drawMemory(const PartitionEditorData& d)
{
    double maxBytes = 0;
    for (double v : d.stageMemoryBytes)
        maxBytes = std::max(maxBytes, v);
    const auto unit = byteAxisUnit(maxBytes);
    const double memTop = axisTop(maxBytes, d.capacityBytes, 1.15) / unit.scale;
    QVector<double> memory;
    memory.reserve(d.stageMemoryBytes.size());
    for (double v : d.stageMemoryBytes)
        memory.append(v / unit.scale);
    auto* mem = m_plot->addGraph(m_plot->xAxis, m_plot->yAxis2);
    mem->setName(d.capacityBytes / unit.scale <= memTop
            ? tr("stage memory")
            : tr("stage memory (capacity %1, off the axis)").arg(QString::fromStdString(formatBytes(d.capacityBytes))));
    mem->setData(d.nodeIndex, memory, true);
    mem->setPen(QPen(palette::stageMemory, 1.5));
    m_plot->yAxis2->setLabel(tr("stage memory (%1)").arg(unit.name));
    auto* capacity = new QCPItemStraightLine(m_plot);
    capacity->point1->setAxes(m_plot->xAxis, m_plot->yAxis2);
    capacity->point2->setAxes(m_plot->xAxis, m_plot->yAxis2);
    capacity->point1->setCoords(0, d.capacityBytes / unit.scale);
    capacity->point2->setCoords(1, d.capacityBytes / unit.scale);
    capacity->setPen(QPen(palette::capacity, 1, Qt::DashLine));
    return memTop;
}

void PartitionEditorPlot::rebuild()
{
    m_plot->clearPlottables();
    m_plot->clearItems();
    m_dragGuide = nullptr;
    const auto d = buildPartitionEditorData(*m_session);
    if (d.nodeIndex.isEmpty()) {
        m_plot->replot(QCustomPlot::rpQueuedReplot);
        return;
    }
    auto* fwd = new QCPBars(m_plot->xAxis, m_plot->yAxis);
    fwd->setName(tr("forward"));
    fwd->setData(d.nodeIndex, d.forwardMs, true);
    fwd->setBrush(palette::forward);
    fwd->setPen(Qt::NoPen);
    fwd->setWidth(1.0);
    auto* bwd = new QCPBars(m_plot->xAxis, m_plot->yAxis);
    bwd->setName(tr("backward"));
    bwd->setData(d.nodeIndex, d.backwardMs, true);
    bwd->setBrush(palette::backward);
    bwd->setPen(Qt::NoPen);
    bwd->setWidth(1.0);
    bwd->moveAbove(fwd);
    const double memTop = drawMemory(d);
    const double n = static_cast<double>(d.nodeIndex.size());
    double maxMs = 0;
    for (int i = 0; i < d.nodeIndex.size(); ++i)
        maxMs = std::max(maxMs, d.forwardMs[i] + d.backwardMs[i]);
    for (int s = 0; s < d.stageStarts.size(); ++s) {
        const double begin = static_cast<double>(d.stageStarts[s]) - 0.5;
        const double end = (s + 1 < d.stageStarts.size() ? static_cast<double>(d.stageStarts[s + 1]) : n) - 0.5;
        auto* region = new QCPItemRect(m_plot);
        region->setLayer(QStringLiteral("background"));
        region->topLeft->setCoords(begin, maxMs * 1.15);
        region->bottomRight->setCoords(end, 0);
        region->setBrush(d.sharedDevices ? deviceShade(d.stageDevices[s]) : stageShade(static_cast<std::size_t>(s)));
        region->setPen(Qt::NoPen);
        auto* label = new QCPItemText(m_plot);
        label->position->setCoords((begin + end) / 2, maxMs * 1.1);
        if (!d.sharedDevices)
            label->setText(tr("stage %1").arg(s));
        else if (d.stageStarts.size() <= 8)
            label->setText(tr("stage %1\ndevice %2").arg(s).arg(d.stageDevices[s]));
        else // many narrow stages: the device alone (the shade repeats it)
            label->setText(tr("d%1").arg(d.stageDevices[s]));
        if (s == 0)
            continue;
        auto* line = new QCPItemStraightLine(m_plot);
        line->point1->setCoords(begin, 0);
        line->point2->setCoords(begin, 1);
        line->setPen(QPen(s == m_selected ? QColor(220, 120, 0) : QColor(40, 40, 40), s == m_selected ? 3 : 2));
    }
    if (m_highlight >= 0) {
        auto* marker = new QCPItemStraightLine(m_plot);
        marker->point1->setCoords(m_highlight, 0);
        marker->point2->setCoords(m_highlight, 1);
        marker->setPen(QPen(QColor(30, 160, 60), 1, Qt::DotLine));
    }
    m_plot->xAxis->setLabel(
        d.sharedDevices ? tr("node (the plan's order; stages on one device share a shade)") : tr("node (graph order)"));
    m_plot->xAxis->setRange(-0.5, n - 0.5);
    m_plot->yAxis->setRange(0, maxMs * 1.15);
    m_plot->yAxis2->setRange(0, memTop);
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

double PartitionEditorPlot::boundaryPixelX(int boundary) const
{
    const auto& starts = m_session->editor().partition().stageStarts;
    return m_plot->xAxis->coordToPixel(static_cast<double>(starts.at(static_cast<std::size_t>(boundary))) - 0.5);
}

std::optional<double> PartitionEditorPlot::dragGuideX() const
{
    return m_dragGuide ? std::optional(m_dragGuide->point1->coords().x()) : std::nullopt;
}

int PartitionEditorPlot::boundaryNear(double pixelX) const
{
    if (!m_session->hasPlan())
        return -1;
    const auto& starts = m_session->editor().partition().stageStarts;
    for (std::size_t s = 1; s < starts.size(); ++s) {
        const double px = m_plot->xAxis->coordToPixel(static_cast<double>(starts[s]) - 0.5);
        if (std::abs(px - pixelX) <= kGrabPixels)
            return static_cast<int>(s);
    }
    return -1;
}

void PartitionEditorPlot::onPress(QMouseEvent* event)
{
    m_dragging = boundaryNear(event->position().x());
    if (m_dragging > 0) {
        selectBoundary(m_dragging);
        return;
    }
    const int node = static_cast<int>(std::lround(m_plot->xAxis->pixelToCoord(event->position().x())));
    if (m_session->hasPlan() && node >= 0 && node < static_cast<int>(m_session->graph()->nodeCount()))
        Q_EMIT nodeClicked(static_cast<int>(nodeAtPosition(*m_session, static_cast<std::size_t>(node))));
}

void PartitionEditorPlot::onMove(QMouseEvent* event)
{
    if (!m_session->hasPlan())
        return;
    const double x = m_plot->xAxis->pixelToCoord(event->position().x());
    const auto node = static_cast<std::size_t>(
        std::clamp(std::lround(x + 0.5), 0L, static_cast<long>(m_session->graph()->nodeCount()) - 1));
    const double bytes = m_session->editor().model().cutBytes(node);
    const auto& name = m_session->editor().model().graph().nodes()[node].name; // in the editor's order
    QToolTip::showText(event->globalPosition().toPoint(),
        tr("cut before %1 (node %2): sends %3 per micro-batch")
            .arg(QString::fromStdString(name))
            .arg(node)
            .arg(QString::fromStdString(formatBytes(bytes))),
        m_plot);
    setCursor(m_dragging > 0 || boundaryNear(event->position().x()) > 0 ? Qt::SplitHCursor : Qt::ArrowCursor);
    if (m_dragging > 0)
        showDragGuide(static_cast<double>(node) - 0.5);
}

void PartitionEditorPlot::showDragGuide(double gapX)
{
    if (!m_dragGuide) {
        m_dragGuide = new QCPItemStraightLine(m_plot);
        m_dragGuide->setPen(QPen(QColor(220, 120, 0), 2, Qt::DashLine));
    }
    m_dragGuide->point1->setCoords(gapX, 0);
    m_dragGuide->point2->setCoords(gapX, 1);
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void PartitionEditorPlot::onRelease(QMouseEvent* event)
{
    if (m_dragGuide) { // the session redraws the boundary where it landed
        m_plot->removeItem(m_dragGuide);
        m_dragGuide = nullptr;
        m_plot->replot(QCustomPlot::rpQueuedReplot);
    }
    if (m_dragging > 0)
        dragBoundaryTo(m_dragging, m_plot->xAxis->pixelToCoord(event->position().x()));
    m_dragging = -1;
}

void PartitionEditorPlot::dragBoundaryTo(int boundary, double x)
{
    // A boundary sits between nodes: x is the gap left of the first node of the stage.
    const long node = std::max(0L, std::lround(x + 0.5));
    m_selected = boundary;
    m_session->moveBoundary(boundary, static_cast<std::size_t>(node));
}

void PartitionEditorPlot::selectBoundary(int boundary)
{
    m_selected = boundary;
    rebuild();
}

void PartitionEditorPlot::showNode(int node)
{
    m_highlight = node < 0 || !m_session->hasPlan()
        ? node
        : static_cast<int>(positionOfNode(*m_session, static_cast<std::size_t>(node)));
    rebuild();
}

void PartitionEditorPlot::keyPressEvent(QKeyEvent* event)
{
    if (m_selected > 0 && m_session->hasPlan() && (event->key() == Qt::Key_Left || event->key() == Qt::Key_Right)) {
        const long step = (event->modifiers() & Qt::ShiftModifier) != 0 ? 10 : 1;
        const long current =
            static_cast<long>(m_session->editor().partition().stageStarts[static_cast<std::size_t>(m_selected)]);
        const long target = std::max(0L, current + (event->key() == Qt::Key_Left ? -step : step));
        m_session->moveBoundary(m_selected, static_cast<std::size_t>(target));
        return;
    }
    QWidget::keyPressEvent(event);
}

} // namespace ps::gui
