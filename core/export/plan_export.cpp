#include "export/plan_export.h"

#include "export/scope_mapping.h"
#include "schedule/schedule_validate.h"
#include "util/enum_names.h"
#include "util/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <set>

namespace ps {
namespace detail {
    extern const std::string_view kPipelineRunner;
} // namespace detail

namespace {

    using Json = nlohmann::ordered_json;

    std::vector<std::uint32_t> idList(const nlohmann::json& j)
    {
        std::vector<std::uint32_t> out;
        if (j.is_array()) {
            for (const auto& v : j)
                out.push_back(v.get<std::uint32_t>());
        }
        return out;
    }

    // The schedules the runner executes: one stage per device, F and full B only.
    void requireRunnableSchedule(const ScheduleSpec& spec)
    {
        const auto k = spec.kind;
        if (k != ScheduleKind::GPipe && k != ScheduleKind::OneFOneB && k != ScheduleKind::KFKB)
            throw Error("the torchrun runner executes gpipe, 1f1b and kfkb:K schedules; this plan's is '"
                + scheduleName(spec) + "' (export it with --format pipelining-csv for PyTorch's own runtime)");
    }

    Json tensorNames(const Graph& graph, const std::vector<std::uint32_t>& ids)
    {
        auto out = Json::array();
        for (auto id : ids) {
            if (id < graph.tensorCount())
                out.push_back(graph.tensor(TensorId(id)).name);
        }
        return out;
    }

    Json stageJson(const Graph& graph, const StoredPlan& plan, StageId s)
    {
        const auto begin = plan.partition.stageBegin(s);
        const auto end = plan.partition.stageEnd(s, graph.nodeCount());
        auto nodes = Json::array();
        auto scopes = Json::array();
        std::set<std::string> seenScopes;
        std::set<std::int32_t> layers;
        for (auto i = begin; i < end; ++i) {
            const auto& n = graph.node(NodeId(static_cast<std::uint32_t>(i)));
            nodes.push_back(n.name);
            if (seenScopes.insert(n.scope).second)
                scopes.push_back(n.scope);
            if (n.layer >= 0)
                layers.insert(n.layer);
        }
        const auto& first = graph.node(NodeId(static_cast<std::uint32_t>(begin)));
        const auto i = s.index();
        const bool recompute = i < plan.recomputedBytes.size() && plan.recomputedBytes[i] > 0;
        return { { "stage", s.value }, { "first_node", first.name }, { "first_scope", first.scope },
            { "node_count", end - begin }, { "layers", layers }, { "recompute", recompute },
            { "recomputed_tensors",
                tensorNames(graph,
                    i < plan.recomputedTensors.size() ? plan.recomputedTensors[i] : std::vector<std::uint32_t> {}) },
            { "swapped_bytes", i < plan.swappedBytes.size() ? plan.swappedBytes[i] : 0.0 }, { "scopes", scopes },
            { "nodes", nodes } };
    }

    Json cutJson(const Graph& graph, const StoredPlan& plan, StageId s)
    {
        const auto position = plan.partition.stageBegin(s);
        const auto& node = graph.node(NodeId(static_cast<std::uint32_t>(position)));
        auto anchors = Json::array();
        for (const auto& a : cutAnchors(graph, position))
            anchors.push_back({ { "scope", a.scope }, { "occurrence", a.occurrence }, { "snapped", a.snapped } });
        if (anchors.empty())
            throw Error("stage " + std::to_string(s.value) + " starts at node '" + node.name
                + "' and holds no node that depends on the model's inputs; the runner cannot place it");
        return { { "stage", s.value }, { "position", position }, { "node", node.name }, { "scope", node.scope },
            { "anchors", anchors } };
    }

    Json scheduleActions(const ScheduleSpec& spec)
    {
        const auto schedule = generateSchedule(spec);
        auto devices = Json::array();
        for (const auto& actions : schedule.devices) {
            auto list = Json::array();
            for (const auto& a : actions)
                list.push_back(formatAction(a));
            devices.push_back(list);
        }
        return devices;
    }

    std::string layoutString(const LayerLayout& layout)
    {
        std::string out;
        const auto stages = layout.layersPerStage.size();
        for (std::size_t s = 0; s < stages; ++s) {
            const auto n = layout.layersPerStage[s];
            std::string stage = s == 0 ? "E" : "";
            if (n == 1)
                stage += "t";
            else if (n > 1)
                stage += "t*" + std::to_string(n);
            if (s + 1 == stages)
                stage += stage.empty() ? "L" : ",L";
            out += (s == 0 ? "" : "|") + stage;
        }
        return out;
    }

    // Text from the project file (an algorithm or model name) as it may appear on one line of a
    // generated script or flags file: a project someone sent must not be able to start a new line
    // of Python or a new Megatron flag, so control characters become '?'.
    std::string oneLine(std::string text)
    {
        for (auto& c : text) {
            if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
                c = '?';
        }
        return text;
    }

    std::string planLabel(const StoredPlan& plan)
    {
        return "PipeStudio plan " + std::to_string(plan.id) + " (" + oneLine(plan.algorithm) + ", "
            + scheduleName(plan.schedule) + ", " + std::to_string(plan.schedule.stages) + " stages)";
    }

} // namespace

ExportFormat parseExportFormat(std::string_view text)
{
    return parseByName("export format", text,
        { ExportFormat::Torchrun, ExportFormat::PipeliningCsv, ExportFormat::DeepSpeed, ExportFormat::Megatron });
}

std::string_view toString(ExportFormat format)
{
    switch (format) {
    case ExportFormat::Torchrun:
        return "torchrun";
    case ExportFormat::PipeliningCsv:
        return "pipelining-csv";
    case ExportFormat::DeepSpeed:
        return "deepspeed";
    case ExportFormat::Megatron:
        return "megatron";
    }
    return "?";
}

StoredPlan storedPlanFromJson(std::string_view json, std::int64_t id, std::size_t nodeCount)
{
    const auto j = nlohmann::json::parse(json, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("cuts") || !j.contains("schedule"))
        throw Error("plan " + std::to_string(id) + " is not a PipeStudio plan (its stored JSON has no cuts)");
    if (j.contains("node_order"))
        throw Error("plan " + std::to_string(id)
            + " is a Mixed-pipe plan (stages cut in their own node order, "
              "several stages per device, sends between non-adjacent stages), which the export formats cannot express; "
              "plan with --algo dawnpiper, pipedream, gpipe, ... for an export");
    StoredPlan p;
    p.id = id;
    p.algorithm = j.value("algorithm", std::string());
    const int stages = j.value("stages", 1);
    p.schedule = parseScheduleSpec(j.value("schedule", std::string("1f1b")), stages, j.value("micro_batches", 1));
    p.partition = partitionFromCuts(j.value("cuts", std::string()), nodeCount, stages);
    p.microBatch = j.value("micro_batch", 1.0);
    for (const auto& st : j.value("stage_details", nlohmann::json::array())) {
        p.recomputedTensors.push_back(idList(st.value("recomputed_tensors", nlohmann::json())));
        p.swappedTensors.push_back(idList(st.value("swapped_tensors", nlohmann::json())));
        p.recomputedBytes.push_back(st.value("recomputed_bytes", 0.0));
        p.swappedBytes.push_back(st.value("swapped_bytes", 0.0));
    }
    return p;
}

std::string torchrunPlanJson(const Graph& graph, const StoredPlan& plan)
{
    requireRunnableSchedule(plan.schedule);
    auto stages = Json::array();
    auto cuts = Json::array();
    for (int s = 0; s < plan.partition.stageCount(); ++s) {
        const StageId stage(static_cast<std::uint32_t>(s));
        stages.push_back(stageJson(graph, plan, stage));
        if (s > 0)
            cuts.push_back(cutJson(graph, plan, stage));
    }
    const Json j = { { "format", "pipestudio-torchrun-plan" }, { "version", 1 }, { "plan_id", plan.id },
        { "model", graph.info().name }, { "algorithm", plan.algorithm }, { "schedule", scheduleName(plan.schedule) },
        { "stages", plan.schedule.stages }, { "micro_batches", plan.schedule.microBatches },
        { "micro_batch", plan.microBatch }, { "cuts", cuts }, { "stage_details", stages },
        { "schedule_actions", scheduleActions(plan.schedule) } };
    return j.dump(2) + "\n";
}

std::string pipeliningCsv(const StoredPlan& plan)
{
    return scheduleToCsv(pipeliningSchedule(plan.schedule));
}

Schedule pipeliningSchedule(const ScheduleSpec& spec)
{
    // Compute actions only: PyTorch's runtime adds the sends and receives (format "compute_only"),
    // and its action grammar has no OPT_STEP (the caller steps the optimizer after schedule.step()).
    auto schedule = generateSchedule(spec);
    for (auto& actions : schedule.devices)
        std::erase_if(actions, [](const Action& a) { return a.type == ActionType::OptimizerStep; });
    return schedule;
}

std::string deepspeedJson(const Graph& graph, const StoredPlan& plan)
{
    const auto layout = layerLayout(graph, plan.partition);
    // PipelineModule's layer list as [embedding, block 0 .. block L-1, final norm + head]:
    // stage s holds layers[parts[s]:parts[s+1]].
    std::vector<int> parts { 0 };
    for (std::size_t s = 1; s < layout.firstLayer.size(); ++s)
        parts.push_back(1 + layout.firstLayer[s]);
    parts.push_back(layout.layerCount + 2);
    const Json j = { { "plan", planLabel(plan) }, { "num_stages", plan.schedule.stages },
        { "partition_method", "pipestudio" }, { "parts", parts }, { "layers_per_stage", layout.layersPerStage },
        { "layer_list",
            "layers[0] = embedding, layers[1.." + std::to_string(layout.layerCount) + "] = transformer blocks 0.."
                + std::to_string(layout.layerCount - 1) + ", layers[" + std::to_string(layout.layerCount + 1)
                + "] = final norm + head" },
        { "blocks_split_by_cuts", layout.snapped }, { "micro_batches", plan.schedule.microBatches },
        { "micro_batch", plan.microBatch } };
    return j.dump(2) + "\n";
}

std::string megatronArguments(const Graph& graph, const StoredPlan& plan)
{
    const auto layout = layerLayout(graph, plan.partition);
    const auto stages = layout.layersPerStage.size();
    std::string perStage;
    for (auto n : layout.layersPerStage)
        perStage += (perStage.empty() ? "" : " ") + std::to_string(n);
    std::string out =
        "# Megatron-LM pipeline layout of " + planLabel(plan) + ", model " + oneLine(graph.info().name) + ".\n";
    out += "# Transformer layers per stage: " + perStage + " (stage 0 also holds the embedding, the last stage the "
        + "final norm, output layer and loss).\n";
    if (layout.snapped)
        out += "# Some blocks were split by the plan's cuts; each went to the stage holding most of its ops.\n";
    out +=
        "# --pipeline-model-parallel-layout is Megatron-Core's custom layout (E embedding, t decoder layer, L loss,\n"
        "# '|' between stages); older Megatron-LM takes the --decoder-first/last-pipeline-num-layers pair when "
        "given.\n";
    const auto globalBatch = std::llround(plan.microBatch * plan.schedule.microBatches);
    out += "--num-layers " + std::to_string(layout.layerCount) + "\n";
    out += "--pipeline-model-parallel-size " + std::to_string(stages) + "\n";
    out += "--micro-batch-size " + std::to_string(std::llround(plan.microBatch)) + "\n";
    out += "--global-batch-size " + std::to_string(globalBatch) + "\n";
    out += "--pipeline-model-parallel-layout \"" + layoutString(layout) + "\"\n";
    // The first/last pair: Megatron splits the other layers evenly over the middle stages.
    const auto& n = layout.layersPerStage;
    const bool endsHaveLayers = n.front() > 0 && n.back() > 0;
    const bool evenMiddle =
        stages < 3 || std::all_of(n.begin() + 1, n.end() - 1, [&](int c) { return c == n[1] && c > 0; });
    const bool uneven = n.front() != n.back() || (stages >= 3 && n.front() != n[1]);
    if (stages >= 2 && uneven && evenMiddle && endsHaveLayers) {
        out += "--decoder-first-pipeline-num-layers " + std::to_string(n.front()) + "\n";
        out += "--decoder-last-pipeline-num-layers " + std::to_string(n.back()) + "\n";
    } else if (!evenMiddle || !endsHaveLayers) {
        out += "# (a stage without transformer layers, or unequal middle stages: only the layout flag expresses this "
               "plan)\n";
    }
    return out;
}

std::string_view pipelineRunnerScript()
{
    return detail::kPipelineRunner;
}

std::vector<ExportFile> exportPlan(const Graph& graph, const StoredPlan& plan, ExportFormat format)
{
    switch (format) {
    case ExportFormat::Torchrun:
        return { { "plan.json", torchrunPlanJson(graph, plan) },
            { "run_pipeline.py", std::string(pipelineRunnerScript()) } };
    case ExportFormat::PipeliningCsv:
        return { { "schedule.csv", pipeliningCsv(plan) } };
    case ExportFormat::DeepSpeed: {
        auto json = deepspeedJson(graph, plan);
        const auto parts = nlohmann::json::parse(json)["parts"].dump();
        std::string py = "# DeepSpeed PipelineModule cut where " + planLabel(plan)
            + " cuts.\n"
              "# Build PipeStudioPipelineModule(layers, num_stages="
            + std::to_string(plan.schedule.stages)
            + ", partition_method=\"pipestudio\") with layers = [embedding, block 0, ..., block L-1, final norm + "
              "head].\n"
              "from deepspeed.pipe import PipelineModule\n\n"
              "PARTS = "
            + parts
            + "  # stage s holds layers[PARTS[s]:PARTS[s + 1]]\n\n\n"
              "class PipeStudioPipelineModule(PipelineModule):\n"
              "    def _partition_layers(self, method=\"uniform\"):\n"
              "        if str(method).lower() != \"pipestudio\":\n"
              "            return super()._partition_layers(method)\n"
              "        if self.num_stages != len(PARTS) - 1 or PARTS[-1] != len(self._layer_specs):\n"
              "            raise ValueError(\"the PipeStudio plan has %d stages over %d layer specs; this module has "
              "%d over %d\"\n"
              "                             % (len(PARTS) - 1, PARTS[-1], self.num_stages, len(self._layer_specs)))\n"
              "        self.parts = list(PARTS)\n"
              "        stage_id = self._topo.get_coord(self.global_rank).pipe\n"
              "        self._set_bounds(start=self.parts[stage_id], stop=self.parts[stage_id + 1])\n";
        return { { "deepspeed_pipeline.json", std::move(json) }, { "deepspeed_pipeline.py", std::move(py) } };
    }
    case ExportFormat::Megatron:
        return { { "megatron_args.txt", megatronArguments(graph, plan) } };
    }
    return {};
}

} // namespace ps
