// Clusters past one node (issue P17): collective costs against hand-worked values, the scale
// model's invariants, and Megatron-LM's Table 1 (SC'21) through it: every row's configuration
// fits, and the search never predicts less than the paper's configuration.
#include "report/reproduction.h"
#include "scale/scale_export.h"
#include "scale/scale_model.h"
#include "scale/scale_sim.h"
#include "util/error.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

using namespace ps;

TEST(Collectives, FormulasMatchHandWorkedValues)
{
    const LinkSpec nvswitch { "nvswitch", 300e9, 5e-6 };
    // Ring all-reduce of 1 GB over 8 GPUs: 14 steps of latency, 2 x 7/8 of the bytes each way.
    EXPECT_DOUBLE_EQ(ringAllReduceSeconds(8, 1e9, nvswitch), 14 * 5e-6 + 2.0 * 7 / 8 * 1e9 / 300e9);
    EXPECT_DOUBLE_EQ(reduceScatterSeconds(8, 1e9, nvswitch), 7 * 5e-6 + 7.0 / 8 * 1e9 / 300e9);
    EXPECT_DOUBLE_EQ(allGatherSeconds(8, 1e9, nvswitch), reduceScatterSeconds(8, 1e9, nvswitch));
    EXPECT_DOUBLE_EQ(treeAllReduceSeconds(8, 1e9, nvswitch), 6 * 5e-6 + 2 * 1e9 / 300e9);
    EXPECT_DOUBLE_EQ(pointToPointSeconds(1e9, nvswitch), 5e-6 + 1e9 / 300e9);
    EXPECT_EQ(ringAllReduceSeconds(1, 1e9, nvswitch), 0.0); // alone: nothing to send
    // Across 4 DGX A100 nodes, 8 GPUs each: reduce-scatter in the node, a ring over the nodes of
    // each GPU's 1/8 shard at its eighth of the node's 8 x 25 GB/s, all-gather in the node.
    const auto& dgx = findNode("dgx-a100-80gb");
    const double shard = 1e9 / 8;
    const double crossRing = 6 * 5e-6 + 2.0 * 3 / 4 * shard / 25e9;
    EXPECT_LT(crossRing, treeAllReduceSeconds(4, shard, nicShare(dgx, 8)));
    EXPECT_NEAR(allReduceSeconds({ 8, 4 }, 1e9, dgx), 2 * (7 * 5e-6 + 7.0 / 8 * 1e9 / 300e9) + crossRing, 1e-12);
    EXPECT_DOUBLE_EQ(allReduceSeconds({ 4, 1 }, 1e9, dgx), ringAllReduceSeconds(4, 1e9, dgx.intra));
    EXPECT_THROW((void)findNode("dgx-z"), Error);
}

TEST(ScaleModel, PricesAConfigurationAndRefusesImpossibleOnes)
{
    const auto& dgx = findNode("dgx-a100-80gb");
    const GptShape gpt { 48, 8192, 64, 2048, 51200 };
    EXPECT_NEAR(gpt.parameters() / 1e9, 39.1, 0.2); // Table 1's 39.1B
    const auto e = estimateScale(gpt, { 8, 2, 32, 1, 1536, 2, Recompute::Full }, dgx);
    ASSERT_TRUE(e.valid) << e.reason;
    EXPECT_TRUE(e.fits);
    EXPECT_NEAR(e.computeSeconds + e.tensorCommSeconds + e.pipelineCommSeconds + e.bubbleSeconds + e.dataCommSeconds
            + e.optimizerSeconds,
        e.iterationSeconds, 1e-9 * e.iterationSeconds);
    EXPECT_NEAR(e.tflopsPerGpu, megatronIterationFlops(gpt, 1536) / e.iterationSeconds / 512 / 1e12, 1e-9);
    // More micro-batches in flight (1F1B: p) or no recomputation need more memory; recomputing
    // nothing runs faster.
    const auto none = estimateScale(gpt, { 8, 2, 32, 1, 1536, 2, Recompute::None }, dgx);
    EXPECT_GT(none.peakBytes, e.peakBytes);
    EXPECT_LT(none.iterationSeconds, e.iterationSeconds);
    for (const auto& [config, why] : { std::pair { ScaleConfig { 3, 2, 32, 1, 1536, 1, Recompute::Full }, "node's" },
             std::pair { ScaleConfig { 8, 5, 32, 1, 1600, 1, Recompute::Full }, "layers" },
             std::pair { ScaleConfig { 8, 2, 32, 1, 1000, 1, Recompute::Full }, "global batch" },
             std::pair { ScaleConfig { 8, 2, 32, 1, 1536, 5, Recompute::Full }, "layers" } }) {
        const auto bad = estimateScale(gpt, config, dgx);
        EXPECT_FALSE(bad.valid) << config.text();
        EXPECT_NE(bad.reason.find(why), std::string::npos) << bad.reason;
    }
    // A model too large for its GPUs does not fit, saying by how much.
    const auto big = estimateScale({ 128, 25600, 160, 2048, 51200 }, { 8, 1, 8, 1, 64, 1, Recompute::Full }, dgx);
    EXPECT_TRUE(big.valid);
    EXPECT_FALSE(big.fits);
    EXPECT_NE(big.reason.find("GiB"), std::string::npos);
}

// Sequence parallelism, ZeRO-1 and an overlapped gradient reduction change what their rules say and
// nothing else (the 39.1B row of Table 1, recomputing nothing so activations count).
TEST(ScaleModel, SequenceParallelZeroAndOverlapFollowTheirRules)
{
    const auto& dgx = findNode("dgx-a100-80gb");
    const GptShape gpt { 48, 8192, 64, 2048, 51200 };
    const ScaleConfig base { 8, 2, 32, 1, 1536, 1, Recompute::None };
    const auto plain = estimateScale(gpt, base, dgx);
    ASSERT_TRUE(plain.valid) << plain.reason;
    const double sbh = 2048.0 * 1 * 8192;
    const double p = 2;
    const double layersPerStage = 24;

    // Sequence parallelism: LayerNorm and dropout's 10 s b h per layer become 10 s b h / t (p micro-
    // batches in flight on the first stage, plus one layer's working set); the same collectives.
    auto sp = base;
    sp.sequenceParallel = true;
    const auto withSp = estimateScale(gpt, sp, dgx);
    EXPECT_NEAR(plain.peakBytes - withSp.peakBytes, (p * layersPerStage + 1) * 10 * sbh * (1 - 1.0 / 8), 1.0);
    EXPECT_DOUBLE_EQ(withSp.tensorCommSeconds, plain.tensorCommSeconds);
    EXPECT_LT(withSp.computeSeconds, plain.computeSeconds); // the sharded LayerNorms and bias-dropout-adds
    const ScaleConfig spT1 { 1, 16, 32, 1, 1536, 1, Recompute::None }; // t = 1: nothing to shard
    auto spT1On = spT1;
    spT1On.sequenceParallel = true;
    EXPECT_DOUBLE_EQ(estimateScale(gpt, spT1On, dgx).peakBytes, estimateScale(gpt, spT1, dgx).peakBytes);

    // ZeRO-1: 12 of each parameter's 18 bytes of state are 1/d per GPU; a reduce-scatter (fp32) and
    // an all-gather (bf16), each half an all-reduce; 1/d of Adam.
    auto zero = base;
    zero.zero1 = true;
    const auto withZero = estimateScale(gpt, zero, dgx);
    const double stageParams = (layersPerStage * (12 * 8192.0 * 8192 + 13 * 8192) + (51200 + 2048) * 8192.0) / 8;
    EXPECT_NEAR(plain.peakBytes - withZero.peakBytes, 12 * (1 - 1.0 / 32) * stageParams, 1.0);
    const CommGroup group { 1, 32 }; // t = 8 fills a node: one replica per node
    EXPECT_NEAR(withZero.dataCommSeconds,
        (allReduceSeconds(group, 4 * stageParams, dgx) + allReduceSeconds(group, 2 * stageParams, dgx)) / 2, 1e-12);
    EXPECT_NEAR(plain.dataCommSeconds, allReduceSeconds(group, 4 * stageParams, dgx), 1e-12);
    EXPECT_NEAR(withZero.optimizerSeconds, plain.optimizerSeconds / 32, 1e-12);

    // Overlapped: hidden behind the last micro-batch's backward on the stage, at least one layer's
    // bucket exposed; the iteration shorter by what was hidden.
    auto overlap = base;
    overlap.overlapGradientReduce = true;
    const auto withOverlap = estimateScale(gpt, overlap, dgx);
    EXPECT_LT(withOverlap.dataCommSeconds, plain.dataCommSeconds);
    EXPECT_GE(withOverlap.dataCommSeconds, plain.dataCommSeconds / layersPerStage - 1e-12);
    EXPECT_NEAR(plain.iterationSeconds - withOverlap.iterationSeconds,
        plain.dataCommSeconds - withOverlap.dataCommSeconds, 1e-9);
    EXPECT_EQ(withOverlap.config.text(), "t8 p2 d32 b1 1f1b none overlap");
    // With ZeRO-1 the all-gather of the updated weights follows the step: never hidden.
    auto both = zero;
    both.overlapGradientReduce = true;
    EXPECT_GE(estimateScale(gpt, both, dgx).dataCommSeconds, allReduceSeconds(group, 2 * stageParams, dgx) / 2);

    // The search applies them (sequence parallelism where t > 1) and finds a faster or equal best.
    const auto searched = searchScale(gpt, 512, 1536, dgx, 5, { true, true, true });
    ASSERT_FALSE(searched.ranked.empty());
    const auto& best = searched.ranked.front().config;
    EXPECT_TRUE(best.zero1 && best.overlapGradientReduce);
    EXPECT_EQ(best.sequenceParallel, best.tensor > 1);
    EXPECT_GE(
        searched.ranked.front().samplesPerSecond, searchScale(gpt, 512, 1536, dgx, 5).ranked.front().samplesPerSecond);
}

TEST(ScaleModel, MegatronTable1ConfigurationsFitAndTheSearchMatchesOrBeatsThem)
{
    // Inputs: the paper's rows (resources/reproduction/papers.json). Each row's configuration ran
    // on the paper's 80 GB A100s, so the memory model must fit it; the search covers that
    // configuration, so its best is at least as fast.
    const auto all = nlohmann::json::parse(paperNumbersJson());
    const auto& paper = all.at("megatron");
    const auto& node = findNode(paper.at("node").get<std::string>());
    ASSERT_EQ(paper.at("table1").size(), 10U);
    for (const auto& row : paper.at("table1")) {
        const GptShape g { row.at("layers").get<std::int64_t>(), row.at("hidden").get<std::int64_t>(),
            row.at("heads").get<std::int64_t>(), 2048, 51200 };
        const auto label = std::to_string(row.at("params_billion").get<double>()) + "B";
        // The paper's column, rounded to 0.1B, from its own formula (1.65B prints as 1.7B).
        const double billions = row.at("params_billion").get<double>();
        EXPECT_NEAR(g.parameters() / 1e9, billions, 0.05 + 0.001 * billions) << label;
        const int t = row.at("tensor_parallel").get<int>();
        const int p = row.at("pipeline_parallel").get<int>();
        const int gpus = row.at("gpus").get<int>();
        const auto B = row.at("global_batch").get<std::int64_t>();
        const auto e = simulateScale(g, { t, p, gpus / (t * p), 1, B, 1, Recompute::Full }, node);
        ASSERT_TRUE(e.valid) << label << ": " << e.reason;
        EXPECT_TRUE(e.fits) << label << ": " << e.reason;
        const auto s = searchScale(g, gpus, B, node, 1);
        ASSERT_FALSE(s.ranked.empty()) << label;
        EXPECT_GE(s.ranked.front().samplesPerSecond, e.samplesPerSecond * (1 - 1e-12)) << label;
        EXPECT_TRUE(s.ranked.front().fits);
    }
}

TEST(ScaleExport, MegatronAndDeepSpeedGetTheSizes)
{
    const auto& dgx = findNode("dgx-a100-80gb");
    const GptShape g { 128, 25600, 160, 2048, 51200 };
    const ScaleConfig c { 8, 64, 6, 1, 3072, 2, Recompute::Full };
    const auto launch = megatronLaunch(g, c, dgx);
    for (const auto* flag : { "torchrun --nnodes 384 --nproc-per-node 8", "--num-layers 128 ", "--hidden-size 25600",
             "--num-attention-heads 160", "--seq-length 2048", "--tensor-model-parallel-size 8",
             "--pipeline-model-parallel-size 64", "--num-layers-per-virtual-pipeline-stage 1", "--micro-batch-size 1",
             "--global-batch-size 3072", "--recompute-granularity full", "--bf16" })
        EXPECT_NE(launch.find(flag), std::string::npos) << flag << "\n" << launch;
    // 1F1B has no virtual stages; selective recomputation names its granularity only.
    const auto plain = megatronLaunch(g, { 8, 64, 6, 1, 3072, 1, Recompute::Selective }, dgx);
    EXPECT_EQ(plain.find("virtual"), std::string::npos);
    EXPECT_NE(plain.find("--recompute-granularity selective"), std::string::npos);
    EXPECT_EQ(plain.find("--recompute-method"), std::string::npos);
    const auto ds = nlohmann::json::parse(deepspeedConfig(c));
    EXPECT_EQ(ds["train_batch_size"].get<int>(), 3072);
    EXPECT_EQ(ds["train_micro_batch_size_per_gpu"].get<int>(), 1);
    // DeepSpeed's check: batch = micro-batch x accumulation x data-parallel size.
    EXPECT_EQ(ds["gradient_accumulation_steps"].get<int>() * 1 * c.data, 3072);
    EXPECT_TRUE(ds["bf16"]["enabled"].get<bool>());
    EXPECT_FALSE(ds.contains("zero_optimization"));
    EXPECT_EQ(launch.find("--sequence-parallel"), std::string::npos);
    // Sequence parallelism, ZeRO-1 (Megatron's distributed optimizer) and the overlapped reduction.
    auto more = c;
    more.sequenceParallel = more.zero1 = more.overlapGradientReduce = true;
    const auto flags = megatronLaunch(g, more, dgx);
    for (const auto* flag : { "--sequence-parallel", "--use-distributed-optimizer", "--overlap-grad-reduce" })
        EXPECT_NE(flags.find(flag), std::string::npos) << flag << "\n" << flags;
    const auto zero = nlohmann::json::parse(deepspeedConfig(more));
    EXPECT_EQ(zero["zero_optimization"]["stage"].get<int>(), 1);
    EXPECT_TRUE(zero["zero_optimization"]["overlap_comm"].get<bool>());
}

TEST(ScaleModel, Table1RowsWithinFifteenPercentStayThere)
{
    // Megatron-LM's Table 1, each row at its artifact script's configuration (the report's): every
    // row within 15% of the measured TFLOP/s per GPU (the 1.7B row is the catalog's calibration of
    // the A100's tensor-core efficiency; the other nine are checks), held so a change that loses it
    // fails here.
    ReproduceOptions options;
    const auto r = reproducePaper("megatron", options);
    int within = 0;
    for (const auto* label : { "| 1.7B |", "| 3.6B |", "| 7.5B |", "| 18.4B |", "| 39.1B |", "| 76.1B |", "| 145.6B |",
             "| 310.1B |", "| 529.6B |", "| 1008.0B |" }) {
        const auto at = r.markdown.find(label);
        ASSERT_NE(at, std::string::npos) << label;
        const auto line = r.markdown.substr(at, r.markdown.find('\n', at) - at);
        const auto percent = line.find('%');
        ASSERT_NE(percent, std::string::npos) << line;
        const auto start = line.rfind("| ", percent) + 2;
        const double error = std::stod(line.substr(start, percent - start));
        within += std::abs(error) <= 15 ? 1 : 0;
    }
    EXPECT_EQ(within, 10) << r.markdown;
}

// The search by (t, p, d) split: one entry per split searched, in t then p order, the fastest
// fitting configuration of each; where none fits, the one with the least memory.
TEST(ScaleModel, TheBestOfEachSplitFitsWhereAnyDoesElseHasTheLeastMemory)
{
    const auto& dgx = findNode("dgx-a100-80gb");
    const GptShape gpt { 48, 8192, 64, 2048, 51200 }; // 39.1B: t = 1 cannot hold it on 16 GPUs
    const auto search = searchScale(gpt, 16, 128, dgx);
    ASSERT_FALSE(search.bestPerShape.empty());
    bool someFit = false;
    bool someDoNot = false;
    for (std::size_t i = 0; i < search.bestPerShape.size(); ++i) {
        const auto& best = search.bestPerShape[i];
        const auto& c = best.config;
        EXPECT_EQ(c.tensor * c.pipeline * c.data, 16);
        if (i > 0) {
            const auto& before = search.bestPerShape[i - 1].config;
            EXPECT_TRUE(before.tensor < c.tensor || (before.tensor == c.tensor && before.pipeline < c.pipeline));
        }
        // Against every configuration of the split the search could have taken.
        for (std::int64_t b = 1; b <= 16; b *= 2) {
            for (auto r : { Recompute::None, Recompute::Selective, Recompute::Full }) {
                const auto e = estimateScale(gpt, { c.tensor, c.pipeline, c.data, b, 128, 1, r }, dgx);
                if (!e.valid)
                    continue;
                // The split's best is chosen by the closed form, then simulated: its simulated
                // throughput and memory stay within 1% of the closed form's choice.
                if (best.fits && e.fits) {
                    EXPECT_GE(best.samplesPerSecond, e.samplesPerSecond * 0.99) << c.text();
                }
                if (!best.fits) {
                    EXPECT_FALSE(e.fits) << c.text();
                    EXPECT_LE(best.peakBytes, e.peakBytes * 1.01) << c.text();
                }
            }
        }
        someFit = someFit || best.fits;
        someDoNot = someDoNot || !best.fits;
    }
    EXPECT_TRUE(someFit);
    EXPECT_TRUE(someDoNot);
}

// Memory per pipeline stage: the first holds the embeddings and, in 1F1B, the most micro-batches
// in flight (p - i on stage i); the last adds its copy of the tied word embedding and the logits;
// the peak is the fullest stage's; with one stage, that stage.
TEST(ScaleModel, EachStageHoldsItsStatesAndTheMicroBatchesItHasInFlight)
{
    const auto& dgx = findNode("dgx-a100-80gb");
    const GptShape gpt { 32, 4096, 32, 2048, 51200 };
    ScaleConfig c;
    c.tensor = 4;
    c.pipeline = 8;
    c.data = 2;
    c.microBatch = 1;
    c.globalBatch = 64;
    const auto e = estimateScale(gpt, c, dgx);
    ASSERT_TRUE(e.valid) << e.reason;
    ASSERT_EQ(e.stagePeakBytes.size(), 8U);
    EXPECT_DOUBLE_EQ(e.peakBytes, e.stagePeakBytes.front());
    for (std::size_t i = 2; i + 2 < e.stagePeakBytes.size(); ++i) // one micro-batch's layers fewer a stage
        EXPECT_NEAR(e.stagePeakBytes[i - 1] - e.stagePeakBytes[i], e.stagePeakBytes[i] - e.stagePeakBytes[i + 1],
            1e-6 * e.peakBytes);
    // The last stage: one micro-batch in flight, plus 18 bytes per parameter of V h / t (the tied
    // embedding's copy) and the fp32 logits of its micro-batch.
    const double wordEmbedding = 51200.0 * 4096 / 4;
    const double logits = 4.0 * 2048 * 51200 / 4;
    const double middleStep = e.stagePeakBytes[5] - e.stagePeakBytes[6];
    EXPECT_NEAR(
        e.stagePeakBytes[7] - (e.stagePeakBytes[6] - middleStep), 18 * wordEmbedding + logits, 1e-6 * e.peakBytes);
    c.pipeline = 1;
    c.data = 16;
    const auto one = estimateScale(gpt, c, dgx);
    ASSERT_EQ(one.stagePeakBytes.size(), 1U);
    EXPECT_DOUBLE_EQ(one.peakBytes, one.stagePeakBytes.front());
}

// The node kinds live in the device catalog's JSON: the built-in ones as the datasheets give them,
// and a file's checked (its device in the catalog, links with a bandwidth, at least a GPU and a NIC).
TEST(Collectives, NodeKindsComeFromTheCatalogAndBadOnesAreNamed)
{
    const auto& nodes = builtinNodes();
    ASSERT_EQ(nodes.size(), 3U);
    const auto& dgx = findNode("dgx-a100-80gb");
    EXPECT_EQ(dgx.deviceId, "a100-80gb");
    EXPECT_EQ(dgx.gpus, 8);
    EXPECT_EQ(dgx.nics, 8);
    EXPECT_DOUBLE_EQ(dgx.intra.bandwidth, 300e9);
    EXPECT_DOUBLE_EQ(dgx.nic.bandwidth, 25e9);
    EXPECT_EQ(findNode("pcie-workstation").nics, 1);
    const auto& catalog = DeviceCatalog::builtin();
    const auto mine = nodesFromJson(R"({"nodes": [{"id": "two-l4", "device": "l4", "gpus": 2,
        "intra": {"kind": "pcie4x16", "bandwidth": 31.5e9}, "nics": 2, "nic": {"kind": "eth", "bandwidth": 3e9}}]})",
        "mine.json", catalog);
    ASSERT_EQ(mine.size(), 1U);
    EXPECT_EQ(mine[0].name, "two-l4");
    EXPECT_DOUBLE_EQ(mine[0].intra.latencySeconds, 0);
    const auto errorOf = [&](const std::string& json) {
        try {
            (void)nodesFromJson(json, "bad.json", catalog);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    const std::string link = R"("intra": {"kind": "x", "bandwidth": 1e9}, "nic": {"kind": "y", "bandwidth": 1e9})";
    EXPECT_NE(errorOf(R"({"nodes": [{"id": "n", "device": "tpu9", "gpus": 2, "nics": 1, )" + link + "}]}").find("tpu9"),
        std::string::npos);
    EXPECT_NE(errorOf(R"({"nodes": [{"id": "n", "device": "l4", "gpus": 0, "nics": 1, )" + link + "}]}")
                  .find("bad.json: node 'n': gpus must be a whole number"),
        std::string::npos);
    EXPECT_NE(errorOf(R"({"nodes": [{"id": "n", "device": "l4", "gpus": 2, "nics": 1,
        "intra": {"kind": "x", "bandwidth": 0}, "nic": {"kind": "y", "bandwidth": 1e9}}]})")
                  .find("a positive, finite bandwidth"),
        std::string::npos);
    EXPECT_NE(errorOf(R"({"nodes": [{"id": "n", "device": "l4", "gpus": 2}]})").find("bad.json: node 'n'"),
        std::string::npos); // no links: the node is named
    EXPECT_NE(errorOf(R"({"nodes": [{"id": "n", "device": "l4", "gpus": 1e300, "nics": 1, )" + link + "}]}")
                  .find("gpus must be a whole number"),
        std::string::npos);
    EXPECT_NE(errorOf(R"({"devices": []})").find("no node kinds"), std::string::npos);
}
