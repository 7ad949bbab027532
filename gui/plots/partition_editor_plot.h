// The partition editor: per-node forward/backward bars along the graph order, the memory each
// stage accumulates, stage regions, and stage boundaries as vertical lines the user drags (mouse,
// or Left/Right on the selected boundary; while dragging, a dashed line shows where it lands).
// Edits go to the PlanSession (undoable); the plot redraws from the session's numbers.
#pragma once

#include <QWidget>

#include <optional>

class QCPItemStraightLine;
class QCustomPlot;
class QMouseEvent;

namespace ps::gui {

class PlanSession;
struct PartitionEditorData;

class PartitionEditorPlot : public QWidget
{
    Q_OBJECT
public:
    explicit PartitionEditorPlot(PlanSession* session, QWidget* parent = nullptr);

    // The same path a mouse drag takes: release boundary `boundary` at graph position `x`.
    void dragBoundaryTo(int boundary, double x);
    void selectBoundary(int boundary);
    [[nodiscard]] int selectedBoundary() const
    {
        return m_selected;
    }
    // Highlights a node (from the node table).
    void showNode(int node);
    [[nodiscard]] QCustomPlot* plot() const
    {
        return m_plot;
    }
    // Where boundary `boundary` is drawn, in the plot widget's pixels (for scripted drags).
    [[nodiscard]] double boundaryPixelX(int boundary) const;
    // The graph x of the dashed guide while a boundary is dragged; none otherwise.
    [[nodiscard]] std::optional<double> dragGuideX() const;

Q_SIGNALS:
    void nodeClicked(int node);

protected:
    void keyPressEvent(QKeyEvent* event) override;

private:
    void setupAxes();
    void rebuild();
    double drawMemory(const PartitionEditorData& d);
    void onPress(QMouseEvent* event);
    void onMove(QMouseEvent* event);
    void onRelease(QMouseEvent* event);
    [[nodiscard]] int boundaryNear(double pixelX) const;
    void showDragGuide(double gapX);

    PlanSession* m_session;
    QCustomPlot* m_plot;
    int m_selected = -1;
    int m_dragging = -1;
    int m_highlight = -1;
    QCPItemStraightLine* m_dragGuide = nullptr; // where a dragged boundary lands on release
};

} // namespace ps::gui
