#include "graph/graph_summary.h"
#include "graph/validate.h"
#include "util/error.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

using namespace ps;

namespace {

// Exact parameter counts of the reference implementations (Hugging Face transformers:
// GPT2LMHeadModel, BertForPreTraining, T5ForConditionalGeneration with tied embeddings),
// next to the sizes the papers publish.
struct Reference
{
    std::int64_t exact;
    double published;
};

const std::map<std::string, Reference> kReferences = {
    { "gpt2-small", { 124'439'808, 124e6 } },
    { "gpt2-medium", { 354'823'168, 355e6 } },
    { "gpt2-large", { 774'030'080, 774e6 } },
    { "gpt2-xl", { 1'557'611'200, 1558e6 } },
    { "bert-base", { 110'106'428, 110e6 } },
    { "bert-large", { 336'226'108, 340e6 } },
    { "t5-small", { 60'506'624, 60e6 } },
    { "t5-base", { 222'903'552, 220e6 } },
    { "t5-large", { 737'668'096, 770e6 } },
    { "t5-3b", { 2'851'598'336, 2.8e9 } },
};

} // namespace

class ZooPreset : public ::testing::TestWithParam<std::string>
{
};

TEST_P(ZooPreset, ParameterCountMatchesReferenceExactly)
{
    const auto& name = GetParam();
    const auto graph = buildZooModel(zooPreset(name));
    const auto& ref = kReferences.at(name);
    EXPECT_EQ(graph.parameterCount(), ref.exact);
    // Published sizes are rounded in the papers (BERT-large's "340M" is 1.1% above its exact count).
    EXPECT_NEAR(static_cast<double>(graph.parameterCount()) / ref.published, 1.0, 0.05);
}

TEST_P(ZooPreset, GraphIsValidAndFineGrained)
{
    auto config = zooPreset(GetParam());
    config.seq = 64;
    config.decoderSeq = 32;
    const auto graph = buildZooModel(config);
    const auto issues = validateGraph(graph);
    EXPECT_TRUE(issues.empty()) << issues.front().message;
    const auto summary = summarizeGraph(graph);
    const auto blocks = config.layers + config.decoderLayers;
    EXPECT_EQ(summary.layerCount, blocks);
    const double perLayer = static_cast<double>(graph.nodeCount()) / static_cast<double>(blocks);
    EXPECT_GE(perLayer, 20.0);
    EXPECT_LE(perLayer, 45.0);
}

INSTANTIATE_TEST_SUITE_P(AllTransformers, ZooPreset,
    ::testing::Values("gpt2-small", "gpt2-medium", "gpt2-large", "gpt2-xl", "bert-base", "bert-large", "t5-small",
        "t5-base", "t5-large", "t5-3b"));

TEST(Zoo, PublishedSizesWithinOnePercentWhereThePaperIsPrecise)
{
    for (const auto& [name, target] : std::map<std::string, double> {
             { "gpt2-small", 124e6 }, { "gpt2-xl", 1558e6 }, { "bert-base", 110e6 }, { "gpt2-medium", 355e6 } }) {
        const auto n = static_cast<double>(buildZooModel(zooPreset(name)).parameterCount());
        EXPECT_LT(std::abs(n / target - 1.0), 0.01) << name;
    }
}

TEST(Zoo, ResNetsHaveTorchvisionsSizes)
{
    // torchvision.models.resnetN(): parameters (BatchNorm's gamma and beta included, its running
    // statistics not) and multiply-adds per 224-pixel image (4.09 G for ResNet-50).
    for (const auto& [depth, params, gmacs] :
        { std::tuple { 18, 11'689'512, 1.82 }, std::tuple { 50, 25'557'032, 4.09 },
            std::tuple { 101, 44'549'160, 7.80 }, std::tuple { 152, 60'192'808, 11.51 } }) {
        auto c = zooPreset("resnet50");
        c.layers = depth;
        c.microBatch = 1;
        const auto g = buildZooModel(c);
        EXPECT_EQ(g.parameterCount(), params) << depth;
        const auto summary = summarizeGraph(g);
        EXPECT_NEAR(summary.forwardFlopsPerSample / 2e9, gmacs, 0.03 * gmacs) << depth;
        EXPECT_TRUE(validateGraph(g).empty()) << depth;
    }
    const auto r50 = buildZooModel(zooPreset("resnet50"));
    EXPECT_EQ(summarizeGraph(r50).layerCount, 16); // residual blocks
    EXPECT_EQ(r50.info().family, "resnet");
    const auto& logits = r50.tensor(r50.node(r50.tensor(r50.outputs().front()).producer).inputs.front());
    EXPECT_EQ(logits.shape, (Shape { 32, 1000 }));
    auto bad = zooPreset("resnet50");
    bad.layers = 42;
    try {
        (void)buildZooModel(bad);
        FAIL() << "depth 42 built";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("got 42"), std::string::npos) << e.what();
    }
    // A configuration round-trips through the project's JSON.
    EXPECT_EQ(modelConfigFromJson(modelConfigToJson(zooPreset("resnet152"))).family, ModelFamily::ResNet);
}

TEST(Zoo, AmoebaNetsHaveGPipesSizes)
{
    // AmoebaNet-D (L, D) as torchgpipe's benchmark builds it in PyTorch (GPipe's architecture,
    // TensorFlow's normal-cell concatenation): parameters, convolutions and BatchNorms (the stem's
    // included), convolution and classifier multiply-adds per 224-pixel image, counted there.
    // GPipe's Table 1 lists (18, 208) as 82M; DawnPiper's AmoebaNet is 28M.
    for (const auto& [cells, filters, params, convs, gmacs] :
        { std::tuple { 18, 208, 81'505'540, 279, 10.02 }, std::tuple { 18, 120, 27'982'675, 279, 3.34 } }) {
        auto c = zooPreset("amoebanet-d");
        c.layers = cells;
        c.hidden = filters;
        c.microBatch = 1;
        const auto g = buildZooModel(c);
        EXPECT_EQ(g.parameterCount(), params) << cells << " x " << filters;
        int convCount = 0;
        int norms = 0;
        for (const auto& n : g.nodes()) {
            convCount += n.op == OpType::Conv;
            norms += n.op == OpType::BatchNorm;
        }
        EXPECT_EQ(convCount, convs) << cells << " x " << filters;
        EXPECT_EQ(norms, convs - 4) << "the 4 factorized reductions' two convolutions share one BatchNorm";
        EXPECT_NEAR(summarizeGraph(g).forwardFlopsPerSample / 2e9, gmacs, 0.03 * gmacs) << cells;
        EXPECT_TRUE(validateGraph(g).empty()) << cells;
        EXPECT_EQ(summarizeGraph(g).layerCount, cells + 4); // the cells: normal, 2 stem and 2 inner reductions
    }
    EXPECT_EQ(buildZooModel(zooPreset("amoebanet-tiny")).parameterCount(), 391'354); // (3, 32), 10 classes
    // The last cell's output at 224 pixels: 7 x 7 (five halvings), four states of 4D channels each.
    const auto d = buildZooModel(zooPreset("amoebanet-d"));
    const auto pooled =
        std::find_if(d.nodes().begin(), d.nodes().end(), [](const Node& n) { return n.op == OpType::GlobalAvgPool; });
    ASSERT_NE(pooled, d.nodes().end());
    EXPECT_EQ(d.tensor(pooled->inputs.front()).shape, (Shape { 32, 16 * 208, 7, 7 }));
    EXPECT_EQ(d.info().family, "amoebanet");
    EXPECT_EQ(modelConfigFromJson(modelConfigToJson(zooPreset("amoebanet-d"))).family, ModelFamily::AmoebaNet);
    // Configurations the architecture cannot take are refused with the field.
    for (const auto& [field, value, message] : { std::tuple { "layers", 4, "multiple of 3" },
             std::tuple { "hidden", 30, "multiple of 4" }, std::tuple { "seq", 48, "multiple of 32" } }) {
        auto bad = zooPreset("amoebanet-tiny");
        (std::string(field) == "layers" ? bad.layers : std::string(field) == "hidden" ? bad.hidden : bad.seq) = value;
        try {
            (void)buildZooModel(bad);
            ADD_FAILURE() << field << " " << value << " built";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
        }
    }
}

TEST(Zoo, ConfigurableSizes)
{
    auto c = zooPreset("gpt2-small");
    c.layers = 2;
    c.hidden = 64;
    c.heads = 4;
    c.seq = 64;
    c.vocab = 256;
    c.microBatch = 8;
    const auto g = buildZooModel(c);
    // wte + wpe + 2 blocks of 12*C^2 + 13*C + ln_f
    const std::int64_t expected = 256 * 64 + 1024 * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64;
    EXPECT_EQ(g.parameterCount(), expected);
    EXPECT_EQ(g.tensor(g.node(NodeId(0)).outputs[0]).shape, (Shape { 8, 64, 64 }));
    EXPECT_EQ(g.info().microBatch, 8);
}

TEST(Zoo, DropoutZeroRemovesDropoutNodes)
{
    auto c = zooPreset("gpt2-small");
    c.layers = 1;
    c.seq = 16;
    const auto with = buildZooModel(c);
    c.dropout = 0;
    const auto without = buildZooModel(c);
    EXPECT_EQ(with.nodeCount() - without.nodeCount(), 4U); // embedding + attn + 2 residual dropouts
}

TEST(Zoo, NodesCarryScopesAndLayers)
{
    auto c = zooPreset("gpt2-small");
    c.layers = 2;
    c.seq = 16;
    const auto g = buildZooModel(c);
    bool found = false;
    for (const auto& n : g.nodes()) {
        if (n.name == "h.1.attn.c_attn.matmul") {
            found = true;
            EXPECT_EQ(n.scope, "h.1.attn");
            EXPECT_EQ(n.layer, 1);
        }
    }
    EXPECT_TRUE(found);
    EXPECT_EQ(g.nodes().back().op, OpType::CrossEntropy);
}

TEST(Zoo, MlpAndT5Shapes)
{
    const auto mlp = buildZooModel(zooPreset("mlp"));
    EXPECT_EQ(mlp.parameterCount(), 8 * (1024 * 1024 + 1024) + 1024 * 10 + 10);
    auto t5 = zooPreset("t5-small");
    t5.seq = 32;
    t5.decoderSeq = 8;
    const auto g = buildZooModel(t5);
    EXPECT_EQ(g.parameterCount(), 60'506'624); // relative buckets do not depend on lengths
}

TEST(Zoo, BadConfigurationsAreRejectedWithTheField)
{
    EXPECT_THROW((void)zooPreset("gpt5"), Error);
    auto c = zooPreset("gpt2-small");
    c.heads = 7;
    try {
        (void)buildZooModel(c);
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("not divisible by heads"), std::string::npos);
    }
    c = zooPreset("bert-base");
    c.seq = 1024;
    EXPECT_THROW((void)buildZooModel(c), Error);
    c = zooPreset("mlp");
    c.microBatch = 0;
    EXPECT_THROW((void)buildZooModel(c), Error);
}

TEST(Zoo, ConfigJsonRoundTrips)
{
    auto c = zooPreset("t5-3b");
    c.microBatch = 3;
    const auto back = modelConfigFromJson(modelConfigToJson(c));
    EXPECT_EQ(back.hidden, 1024);
    EXPECT_EQ(back.effectiveHeadDim(), 128);
    EXPECT_EQ(back.microBatch, 3);
    EXPECT_EQ(back.family, ModelFamily::T5);
    EXPECT_THROW((void)modelConfigFromJson("[1,2]"), Error);
}
