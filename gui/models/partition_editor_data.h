// What the partition editor draws, computed from the plan session: per-node forward/backward
// time, the memory a stage accumulates up to each node, stage ranges and the device capacity.
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
    QVector<double> stageMemoryGiB; // memory of the node's stage if it ended at this node
    QVector<std::size_t> stageStarts;
    double capacityGiB = 0;
};

[[nodiscard]] PartitionEditorData buildPartitionEditorData(const PlanSession& session);

} // namespace ps::gui
