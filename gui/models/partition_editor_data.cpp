#include "models/partition_editor_data.h"

#include "models/plan_session.h"

#include <algorithm>

namespace ps::gui {

PartitionEditorData buildPartitionEditorData(const PlanSession& session)
{
    PartitionEditorData d;
    if (!session.hasPlan())
        return d;
    const auto& editor = session.editor();
    const auto& model = editor.model();
    const auto& profile = model.profile(); // in the editor's order
    const double mb = editor.microBatch();
    const auto& starts = editor.partition().stageStarts;
    d.stageStarts = QVector<std::size_t>(starts.begin(), starts.end());
    d.capacityBytes = model.capacityBytes();
    const auto& devices = editor.placement().stageDevices;
    d.sharedDevices = editor.dataflow();
    for (std::size_t s = 0; s < starts.size(); ++s)
        d.stageDevices.append(devices.empty() ? static_cast<int>(s) : static_cast<int>(devices[s].value));
    const auto n = model.nodeCount();
    std::size_t stage = 0;
    for (std::size_t i = 0; i < n; ++i) {
        while (stage + 1 < starts.size() && i >= starts[stage + 1])
            ++stage;
        d.nodeIndex.append(static_cast<double>(i));
        d.forwardMs.append(profile.nodes[i].forwardNs.at(mb) / 1e6);
        d.backwardMs.append(profile.nodes[i].backwardNs.at(mb) / 1e6);
        d.stageMemoryBytes.append(model.approxMemoryBytes(starts[stage], i + 1, static_cast<int>(stage)));
    }
    return d;
}

std::size_t nodeAtPosition(const PlanSession& session, std::size_t position)
{
    const auto& order = session.editor().partition().nodeOrder;
    return position < order.size() ? order[position].index() : position;
}

std::size_t positionOfNode(const PlanSession& session, std::size_t node)
{
    const auto& order = session.editor().partition().nodeOrder;
    const auto at = std::find(order.begin(), order.end(), NodeId(static_cast<std::uint32_t>(node)));
    return at == order.end() ? node : static_cast<std::size_t>(at - order.begin());
}

} // namespace ps::gui
