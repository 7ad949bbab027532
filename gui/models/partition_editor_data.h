// What the partition editor draws, computed from the plan session: per-node forward/backward
// time, the memory a stage accumulates up to each node, stage ranges, the device of every stage
// and the device capacity. Positions follow the editor's order: the graph's, or a Mixed-pipe
// plan's own order, in which each stage is contiguous and several stages share a device.
#pragma once

#include <QVector>

#include <cstddef>

namespace ps::gui {

class PlanSession;

struct PartitionEditorData
{
    QVector<double> nodeIndex; // 0..N-1 (x positions)
    QVector<double> forwardMs; // per node, one micro-batch
    QVector<double> backwardMs;
    QVector<double> stageMemoryBytes; // memory of the node's stage if it ended at this node
    QVector<std::size_t> stageStarts;
    QVector<int> stageDevices; // per stage
    bool sharedDevices = false; // a dataflow plan: positions are its order, not node ids
    double capacityBytes = 0;
};

[[nodiscard]] PartitionEditorData buildPartitionEditorData(const PlanSession& session);
// The node at a position of the editor's order, and the position of a node (ids and positions
// differ only for a dataflow plan).
[[nodiscard]] std::size_t nodeAtPosition(const PlanSession& session, std::size_t position);
[[nodiscard]] std::size_t positionOfNode(const PlanSession& session, std::size_t node);

} // namespace ps::gui
