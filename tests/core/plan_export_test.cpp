// `pipestudio export`'s formats: the schedule CSV round trip, DeepSpeed/Megatron layer boundaries on
// a zoo GPT-2 plan, and the scope runs that map PipeStudio's cuts onto a torch.fx graph.
#include "export/plan_export.h"
#include "export/scope_mapping.h"
#include "graph/graph_builder.h"
#include "schedule/schedule_validate.h"
#include "util/error.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace ps {
namespace {

    // First node of block `layer` of a zoo model (one past the last block: the first node after the
    // blocks): where a cut "at block i" goes.
    std::size_t firstNodeOfLayer(const Graph& g, int layer)
    {
        bool pastBlocks = false;
        for (const auto& n : g.nodes()) {
            if (n.layer == layer || (pastBlocks && n.layer == kNoLayer))
                return n.id.index();
            pastBlocks = n.layer == layer - 1;
        }
        return g.nodeCount();
    }

    StoredPlan gpt2Plan(const Graph& g, const std::vector<int>& firstLayers, const std::string& schedule = "1f1b")
    {
        std::string cuts;
        for (auto l : firstLayers)
            cuts += (cuts.empty() ? "" : ",") + std::to_string(firstNodeOfLayer(g, l));
        const int stages = static_cast<int>(firstLayers.size()) + 1;
        const nlohmann::json j = { { "algorithm", "dawnpiper" }, { "schedule", schedule }, { "stages", stages },
            { "micro_batches", 8 }, { "micro_batch", 2.0 }, { "cuts", cuts } };
        return storedPlanFromJson(j.dump(), 7, g.nodeCount());
    }

    // wte (input) | h.0: ln_1 (2 ops), attn (3 ops), residual add | h.1: ln_1 ... ; plus a node that
    // only reads parameters (ONNX's Identity of a tied initializer).
    Graph scopedGraph()
    {
        GraphBuilder b(ModelInfo { "scoped", "onnx", "{}", 2 });
        const auto ids = b.input("ids", { 2, 4 }, DType::I64);
        const auto w = b.parameter("wte.weight", { 16, 8 });
        b.op(OpType::Relu, "Identity_0", { w }); // parameter-only: no run
        auto x = [&] {
            ScopeGuard s(b, "wte");
            return b.op(OpType::Embedding, "Gather", { ids, w });
        }();
        for (int layer = 0; layer < 2; ++layer) {
            b.setLayer(layer);
            ScopeGuard block(b, "h." + std::to_string(layer));
            auto h = x;
            {
                ScopeGuard s(b, "ln_1");
                h = b.op(OpType::Relu, "a", { h });
                h = b.op(OpType::Relu, "b", { h });
            }
            {
                ScopeGuard s(b, "attn");
                h = b.op(OpType::Relu, "c", { h });
                h = b.op(OpType::Relu, "d", { h });
                h = b.op(OpType::Relu, "e", { h });
            }
            x = b.op(OpType::Add, "Add", { x, h });
        }
        return b.finish({ x });
    }

    TEST(PlanExport, CanonicalScopeDropsOnnxContainerRepeats)
    {
        EXPECT_EQ(canonicalScope("h.0.mlp.mlp.0"), "h.0.mlp.0"); // ONNX: /h.0/mlp/mlp.0/MatMul
        EXPECT_EQ(canonicalScope("h.0.mlp.0"), "h.0.mlp.0"); // fx: call_module h.0.mlp.0
        EXPECT_EQ(canonicalScope("h.0.attn.c_attn"), "h.0.attn.c_attn");
        EXPECT_EQ(canonicalScope("block.block.block.0"), canonicalScope("block.block.0"));
        EXPECT_EQ(canonicalScope(""), "");
    }

    TEST(PlanExport, ParameterOnlyNodesAreNotDataDependent)
    {
        const auto g = scopedGraph();
        const auto dynamic = dataDependentNodes(g);
        EXPECT_FALSE(dynamic[0]); // Identity_0 of wte.weight
        EXPECT_TRUE(dynamic[1]); // wte.Gather reads the ids
        EXPECT_TRUE(dynamic.back());
    }

    TEST(PlanExport, CutAnchorsNameScopeRuns)
    {
        const auto g = scopedGraph();
        // Node order: 0 Identity, 1 wte, 2-3 h.0.ln_1, 4-6 h.0.attn, 7 h.0 add, 8-9 h.1.ln_1, 10-12 h.1.attn, 13 add.
        const auto atBlock1 = cutAnchors(g, 8, 1);
        ASSERT_EQ(atBlock1.size(), 2U);
        EXPECT_EQ(atBlock1[0], (ScopeAnchor { "h.1.ln_1", 0, false }));
        EXPECT_EQ(atBlock1[1], (ScopeAnchor { "h.1.attn", 0, false })); // a fallback
        // The residual add is h.0's only run (its other ops sit in child scopes).
        EXPECT_EQ(cutAnchors(g, 7, 0)[0], (ScopeAnchor { "h.0", 0, false }));
        // Inside h.0.attn (3 nodes): after its first node -> its start; after its second -> the next run.
        EXPECT_EQ(cutAnchors(g, 5, 0)[0], (ScopeAnchor { "h.0.attn", 0, true }));
        EXPECT_EQ(cutAnchors(g, 6, 0)[0], (ScopeAnchor { "h.0", 0, true }));
        // A cut at the parameter-only node maps to the first data-dependent run after it.
        EXPECT_EQ(cutAnchors(g, 0, 0)[0], (ScopeAnchor { "wte", 0, false }));
    }

    TEST(PlanExport, RepeatedScopesCountOccurrences)
    {
        GraphBuilder b(ModelInfo { "rep", "onnx", "{}", 1 });
        auto x = b.input("x", { 1, 4 }, DType::F32);
        int count = 0;
        for (const bool inner : { false, true, false, true, false }) { // blk, blk.inner, blk, ...
            ScopeGuard outer(b, "blk");
            const auto name = "r" + std::to_string(count++);
            if (!inner) {
                x = b.op(OpType::Relu, name, { x });
                continue;
            }
            ScopeGuard nested(b, "inner");
            x = b.op(OpType::Relu, name, { x });
        }
        const auto g = b.finish({ x });
        EXPECT_EQ(cutAnchors(g, 2, 0)[0], (ScopeAnchor { "blk", 1, false }));
        EXPECT_EQ(cutAnchors(g, 3, 0)[0], (ScopeAnchor { "blk.inner", 1, false }));
        EXPECT_EQ(cutAnchors(g, 4, 0)[0], (ScopeAnchor { "blk", 2, false }));
    }

    TEST(PlanExport, PipeliningCsvRoundTripsTheSchedule)
    {
        const auto g = buildZooModel(zooPreset("gpt2-small"));
        for (const std::string schedule : { "1f1b", "gpipe", "kfkb:2", "zb-h1" }) {
            const auto plan = gpt2Plan(g, { 3, 6, 9 }, schedule);
            const auto csv = pipeliningCsv(plan);
            const auto back = scheduleFromCsv(csv, "schedule.csv");
            auto expected = generateSchedule(plan.schedule); // less OPT_STEP, which PyTorch's CSV lacks
            for (auto& actions : expected.devices)
                std::erase_if(actions, [](const Action& a) { return a.type == ActionType::OptimizerStep; });
            EXPECT_EQ(back.devices, expected.devices) << schedule;
            EXPECT_EQ(back.devices, pipeliningSchedule(plan.schedule).devices) << schedule;
            EXPECT_EQ(csv.find("OPT_STEP"), std::string::npos);
        }
    }

    TEST(PlanExport, DeepSpeedPartsFollowTheBlocks)
    {
        const auto g = buildZooModel(zooPreset("gpt2-small")); // 12 blocks
        const auto plan = gpt2Plan(g, { 3, 7, 10 });
        const auto j = nlohmann::json::parse(deepspeedJson(g, plan));
        EXPECT_EQ(j["num_stages"], 4);
        EXPECT_EQ(j["parts"], nlohmann::json({ 0, 4, 8, 11, 14 })); // [embedding, blocks 0-11, head]
        EXPECT_EQ(j["layers_per_stage"], nlohmann::json({ 3, 4, 3, 2 }));
        EXPECT_FALSE(j["blocks_split_by_cuts"].get<bool>());
        const auto files = exportPlan(g, plan, ExportFormat::DeepSpeed);
        ASSERT_EQ(files.size(), 2U);
        EXPECT_NE(files[1].content.find("PARTS = [0,4,8,11,14]"), std::string::npos);
    }

    TEST(PlanExport, MegatronLayoutFollowsTheBlocks)
    {
        const auto g = buildZooModel(zooPreset("gpt2-small"));
        const auto uneven = megatronArguments(g, gpt2Plan(g, { 3, 7, 10 }));
        EXPECT_NE(uneven.find("--num-layers 12\n"), std::string::npos);
        EXPECT_NE(uneven.find("--pipeline-model-parallel-size 4\n"), std::string::npos);
        EXPECT_NE(uneven.find("--pipeline-model-parallel-layout \"Et*3|t*4|t*3|t*2,L\"\n"), std::string::npos);
        EXPECT_EQ(uneven.find("--decoder-first-pipeline-num-layers"), std::string::npos); // middle 4 != 3
        EXPECT_NE(uneven.find("--global-batch-size 16\n"), std::string::npos);
        const auto emptyLast = megatronArguments(g, gpt2Plan(g, { 4, 8, 12 })); // stage 3: ln_f, head, loss
        EXPECT_NE(emptyLast.find("--pipeline-model-parallel-layout \"Et*4|t*4|t*4|L\"\n"), std::string::npos);
        EXPECT_EQ(emptyLast.find("--decoder-last-pipeline-num-layers"), std::string::npos);
        const auto evenMiddle = megatronArguments(g, gpt2Plan(g, { 2, 6, 10 }));
        EXPECT_NE(evenMiddle.find("--decoder-first-pipeline-num-layers 2\n"), std::string::npos);
        EXPECT_NE(evenMiddle.find("--decoder-last-pipeline-num-layers 2\n"), std::string::npos);
    }

    // A project someone sent names its plan's algorithm and its model; neither may start a line of
    // the generated Python or a flag of its own.
    TEST(PlanExport, NamesFromTheProjectCannotInjectLines)
    {
        auto c = zooPreset("gpt2-small");
        c.name = "gpt\n--save /etc";
        const auto g = buildZooModel(c);
        auto plan = gpt2Plan(g, { 3, 7, 10 });
        plan.algorithm = "x\nimport os; os.system('true')\r";
        for (auto format : { ExportFormat::DeepSpeed, ExportFormat::Megatron }) {
            for (const auto& f : exportPlan(g, plan, format)) {
                EXPECT_EQ(f.content.find("\nimport os"), std::string::npos) << f.name;
                EXPECT_EQ(f.content.find("\n--save"), std::string::npos) << f.name;
                EXPECT_EQ(f.content.find('\r'), std::string::npos) << f.name;
            }
        }
    }

    TEST(PlanExport, SplitBlockGoesToTheStageWithMostOfIt)
    {
        const auto g = buildZooModel(zooPreset("gpt2-small"));
        // Cut two nodes into block 4: block 4 stays on stage 1 (most of its nodes).
        const nlohmann::json j = { { "schedule", "1f1b" }, { "stages", 2 }, { "micro_batches", 4 },
            { "cuts", std::to_string(firstNodeOfLayer(g, 4) + 2) } };
        const auto layout = layerLayout(g, storedPlanFromJson(j.dump(), 1, g.nodeCount()).partition);
        EXPECT_EQ(layout.layersPerStage, (std::vector<int> { 4, 8 }));
        EXPECT_TRUE(layout.snapped);
    }

    TEST(PlanExport, TorchrunPlanNamesStagesAndEmbedsTheSchedule)
    {
        const auto g = buildZooModel(zooPreset("gpt2-small"));
        auto plan = gpt2Plan(g, { 6 });
        plan.recomputedBytes = { 1024.0, 0.0 };
        const auto j = nlohmann::json::parse(torchrunPlanJson(g, plan));
        EXPECT_EQ(j["plan_id"], 7);
        EXPECT_EQ(j["schedule"], "1f1b");
        ASSERT_EQ(j["cuts"].size(), 1U);
        EXPECT_EQ(j["cuts"][0]["node"], g.node(NodeId(static_cast<std::uint32_t>(firstNodeOfLayer(g, 6)))).name);
        EXPECT_EQ(j["cuts"][0]["anchors"][0]["scope"], "h.6"); // the zoo names ln_1's nodes in the block's scope
        EXPECT_EQ(j["cuts"][0]["anchors"][0]["occurrence"], 0);
        EXPECT_EQ(j["stage_details"][0]["recompute"], true);
        EXPECT_EQ(j["stage_details"][1]["recompute"], false);
        EXPECT_EQ(j["stage_details"][1]["first_node"], j["cuts"][0]["node"]);
        ASSERT_EQ(j["schedule_actions"].size(), 2U);
        EXPECT_EQ(j["schedule_actions"][1][0], "1F0");
        EXPECT_EQ(j["schedule_actions"][0].back(), "0OPT_STEP");
    }

    TEST(PlanExport, RefusesWhatItCannotExpress)
    {
        const auto g = buildZooModel(zooPreset("gpt2-small"));
        EXPECT_THROW((void)torchrunPlanJson(g, gpt2Plan(g, { 6 }, "zb-h1")), Error);
        const nlohmann::json mixed = { { "schedule", "1f1b" }, { "stages", 2 }, { "micro_batches", 4 }, { "cuts", "5" },
            { "node_order", { 0, 1 } } };
        EXPECT_THROW((void)storedPlanFromJson(mixed.dump(), 3, g.nodeCount()), Error);
        EXPECT_THROW((void)storedPlanFromJson("not json", 3, g.nodeCount()), Error);
        EXPECT_THROW((void)parseExportFormat("onnx"), Error);
        EXPECT_EQ(parseExportFormat("pipelining-csv"), ExportFormat::PipeliningCsv);
    }

} // namespace
} // namespace ps
