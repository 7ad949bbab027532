#include "models/scale_out.h"

#include "zoo/model_config.h"

namespace ps::gui {

std::optional<GptShape> gptShapeOf(const Graph& graph)
{
    if (graph.info().family != "gpt2")
        return std::nullopt;
    const auto c = modelConfigFromJson(graph.info().configJson);
    return GptShape { c.layers, c.hidden, c.heads, c.seq, c.vocab };
}

ScaleOut scaleOut(const GptShape& model, const NodeSpec& node, int gpus, std::int64_t globalBatch, std::size_t keep,
    ScaleFeatures features)
{
    ScaleOut out;
    out.search = searchScale(model, gpus, globalBatch, node, keep, features);
    std::vector<int> counts;
    for (int n = node.gpus; n < gpus; n *= 2)
        counts.push_back(n);
    counts.push_back(gpus);
    for (int n : counts) {
        const auto s = n == gpus ? out.search : searchScale(model, n, globalBatch, node, 1, features);
        if (!s.ranked.empty())
            out.curve.push_back({ n, s.ranked.front() });
    }
    return out;
}

} // namespace ps::gui
