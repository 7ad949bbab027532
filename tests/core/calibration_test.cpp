// cost/calibration.h: per-class factors over the covered nodes, the calibrated profile, and the
// nodes a trace missed filled from it.
#include "cost/calibration.h"
#include "cost/profile.h"
#include "util/error.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

using namespace ps;

namespace {

// A 2-layer GPT, its analytical profile on an A100 and each node's kernel class.
struct TinyGptOnA100
{
    Graph graph;
    Profile analytical;
    double mb;
    std::vector<KernelClass> classes;
    TinyGptOnA100()
        : graph(model())
        , analytical(estimateProfile(graph, a100(), {}))
        , mb(static_cast<double>(graph.info().microBatch))
    {
        for (const auto& k : estimateKernels(graph, a100(), {}, mb))
            classes.push_back(k.front().kind);
    }
    static const DeviceSpec& a100()
    {
        return DeviceCatalog::builtin().find("a100-40gb");
    }
    static Graph model()
    {
        auto c = zooPreset("gpt2-tiny");
        c.layers = 2;
        return buildZooModel(c);
    }
};

} // namespace

TEST(Calibration, ClassFactorsFitAndFillTheNodesATraceMissed)
{
    const TinyGptOnA100 t;
    const auto& [graph, analytical, mb, classes] = t;
    // "Measured": GEMMs twice the model, everything else half; one block's MLP missing (a trace
    // without that range), and one node of a covered scope at 0 (a zero-FLOP share of its range).
    auto measured = analytical;
    int missing = 0;
    std::size_t zeroShare = graph.nodeCount();
    for (std::size_t i = 0; i < measured.nodes.size(); ++i) {
        auto& n = measured.nodes[i];
        const auto& node = graph.nodes()[i];
        const double f = classes[i] == KernelClass::Gemm ? 2.0 : 0.5;
        const bool lost = node.scope == "h.1.mlp";
        const bool share = !lost && zeroShare == graph.nodeCount() && node.scope == "h.0.attn"
            && coversNode(analytical.nodes[i], mb) && classes[i] != KernelClass::Gemm;
        if (lost || share) {
            n.forwardNs = {};
            n.backwardNs = {};
            n.weightGradNs = {};
            missing += lost && coversNode(analytical.nodes[i], mb) ? 1 : 0;
            zeroShare = share ? i : zeroShare;
            continue;
        }
        n.forwardNs = { n.forwardNs.fixed * f, n.forwardNs.perSample * f };
        n.backwardNs = { n.backwardNs.fixed * f, n.backwardNs.perSample * f };
    }
    ASSERT_GT(missing, 0);
    ASSERT_LT(zeroShare, graph.nodeCount());
    const auto fit = calibrate(graph, measured, analytical, classes, mb);
    EXPECT_NEAR(fit.factors[static_cast<std::size_t>(KernelClass::Gemm)], 2.0, 1e-9);
    EXPECT_NEAR(fit.factors[static_cast<std::size_t>(KernelClass::Normalization)], 0.5, 1e-9);
    for (const auto& k : fit.classes) {
        EXPECT_NEAR(k.medianErrorAfter, 0, 1e-9) << toString(k.kind);
        EXPECT_GT(k.medianErrorBefore, 0.4) << toString(k.kind);
    }
    // Each covered node as the fit saw it, in node order (what `calibrate --nodes` ranks).
    ASSERT_EQ(fit.nodes.size(), static_cast<std::size_t>(fit.coveredNodes));
    for (std::size_t k = 0; k < fit.nodes.size(); ++k) {
        const auto& n = fit.nodes[k];
        EXPECT_TRUE(k == 0 || n.node > fit.nodes[k - 1].node);
        EXPECT_NEAR(n.measuredNs, measured.nodes[n.node].forwardNs.at(mb) + measured.nodes[n.node].backwardNs.at(mb),
            1e-6 * n.measuredNs);
        EXPECT_GE(n.analyticalNs,
            analytical.nodes[n.node].forwardNs.at(mb) + analytical.nodes[n.node].backwardNs.at(mb) - 1e-6);
    }
    const auto calibrated = calibratedProfile(analytical, fit);
    EXPECT_EQ(calibrated.source, "calibrated");
    int filled = 0;
    const auto blended = fillUncovered(graph, measured, calibrated, mb, &filled);
    EXPECT_EQ(filled, missing);
    for (std::size_t i = 0; i < graph.nodeCount(); ++i) {
        if (!coversNode(analytical.nodes[i], mb) || i == zeroShare)
            continue;
        const double f = classes[i] == KernelClass::Gemm ? 2.0 : 0.5;
        EXPECT_NEAR(blended.nodes[i].forwardNs.at(mb), f * analytical.nodes[i].forwardNs.at(mb),
            1e-6 * analytical.nodes[i].forwardNs.at(mb))
            << graph.nodes()[i].name;
    }
    EXPECT_FALSE(coversNode(blended.nodes[zeroShare], mb)); // matched at 0 inside its scope's range
    EXPECT_THROW((void)calibrate(graph, measured, analytical, {}, mb), Error);
}

// Calibrated on device time (a GPU profile): the factors scale the kernels' time, fitted without
// the host's launch cost (each kernel at its fixed device time instead), and the launch costs
// return unscaled.
TEST(Calibration, OnDeviceTimeTheLaunchCostReturnsUnscaled)
{
    auto c = zooPreset("gpt2-tiny");
    c.layers = 1;
    const auto graph = buildZooModel(c);
    const auto& h100 = DeviceCatalog::builtin().find("h100-80gb");
    CostModelOptions withLaunch;
    CostModelOptions onDevice;
    onDevice.kernelLaunchNs = onDevice.kernelDeviceNs;
    const auto full = estimateProfile(graph, h100, withLaunch);
    const auto kernels = estimateProfile(graph, h100, onDevice);
    const double mb = static_cast<double>(graph.info().microBatch);
    std::vector<KernelClass> classes;
    for (const auto& k : estimateKernels(graph, h100, onDevice, mb))
        classes.push_back(k.front().kind);
    auto measured = kernels; // every class three times the model's kernel time
    for (auto& n : measured.nodes) {
        n.forwardNs = { 3 * n.forwardNs.fixed, 3 * n.forwardNs.perSample };
        n.backwardNs = { 3 * n.backwardNs.fixed, 3 * n.backwardNs.perSample };
    }
    const auto fit = calibrate(graph, measured, kernels, classes, mb);
    ASSERT_GT(fit.coveredNodes, 0);
    for (const auto& k : fit.classes)
        EXPECT_NEAR(k.factor, 3.0, 1e-9) << toString(k.kind);
    const auto calibrated = calibratedProfile(kernels, fit, full);
    for (std::size_t i = 0; i < graph.nodeCount(); ++i) {
        const double launch = full.nodes[i].forwardNs.at(mb) - kernels.nodes[i].forwardNs.at(mb);
        EXPECT_NEAR(calibrated.nodes[i].forwardNs.at(mb), 3 * kernels.nodes[i].forwardNs.at(mb) + launch,
            1e-6 * (1 + full.nodes[i].forwardNs.at(mb)))
            << graph.nodes()[i].name;
        if (coversNode(kernels.nodes[i], mb)) {
            EXPECT_GT(launch, 0) << graph.nodes()[i].name; // the host's launch cost exceeds the device's own
        }
    }
}

// A measured profile of the engine times each fused Scale -> Mask -> Softmax on its Softmax node
// (engine/fusion.h) and the other two at zero: the chain is compared whole, so every class keeps
// the factor its nodes show (here 2) instead of the Softmax's class taking the chain's time.
TEST(Calibration, AFusedChainIsComparedWhole)
{
    const TinyGptOnA100 t;
    const auto& [graph, analytical, mb, classes] = t;
    auto measured = analytical;
    measured.source = "measured-cuda";
    const auto twice = [](const LinearModel& m, double extra) {
        return LinearModel { 2 * (m.fixed + extra), 2 * m.perSample };
    };
    int chains = 0;
    for (std::size_t i = 0; i < graph.nodeCount(); ++i) {
        auto& n = measured.nodes[i];
        const auto& node = graph.nodes()[i];
        double carried = 0; // the fused inner nodes' time, on the Softmax
        if (node.op == OpType::Softmax && i >= 2 && graph.nodes()[i - 1].op == OpType::Mask
            && graph.nodes()[i - 2].op == OpType::Scale) {
            for (const auto k : { i - 1, i - 2 })
                carried += analytical.nodes[k].forwardNs.at(mb) + analytical.nodes[k].backwardNs.at(mb);
            ++chains;
        }
        const bool inner =
            (node.op == OpType::Scale && i + 2 < graph.nodeCount() && graph.nodes()[i + 2].op == OpType::Softmax)
            || (node.op == OpType::Mask && i + 1 < graph.nodeCount() && graph.nodes()[i + 1].op == OpType::Softmax);
        if (inner) {
            n.forwardNs = {};
            n.backwardNs = {};
            continue;
        }
        n.forwardNs = twice(n.forwardNs, carried);
        n.backwardNs = twice(n.backwardNs, 0);
    }
    ASSERT_EQ(chains, 2);
    const auto fit = calibrate(graph, measured, analytical, classes, mb);
    for (const auto& k : fit.classes)
        EXPECT_NEAR(fit.factors[static_cast<std::size_t>(k.kind)], 2.0, 1e-9) << toString(k.kind);
    measured.source = "imported"; // a trace's zeros are missed nodes: nothing lent
    const auto traced = calibrate(graph, measured, analytical, classes, mb);
    bool above = false;
    for (const auto& k : traced.classes)
        above = above || traced.factors[static_cast<std::size_t>(k.kind)] > 2.0 + 1e-6;
    EXPECT_TRUE(above);
}

// A forward-only profile (an inference or forward-benchmark trace: no backward anywhere) is fitted on
// forward time alone; before, the model's backward counted against a measurement that had none and
// every factor came out near a third.
TEST(Calibration, AForwardOnlyProfileIsComparedOnForwardTime)
{
    const TinyGptOnA100 t;
    const auto& [graph, analytical, mb, classes] = t;
    auto measured = analytical;
    for (std::size_t i = 0; i < measured.nodes.size(); ++i) {
        auto& n = measured.nodes[i];
        const double f = classes[i] == KernelClass::Gemm ? 1.5 : 0.8;
        n.forwardNs = { n.forwardNs.fixed * f, n.forwardNs.perSample * f };
        n.backwardNs = {};
        n.weightGradNs = {};
    }
    const auto fit = calibrate(graph, measured, analytical, classes, mb);
    EXPECT_TRUE(fit.forwardOnly);
    EXPECT_NEAR(fit.factors[static_cast<std::size_t>(KernelClass::Gemm)], 1.5, 1e-9);
    EXPECT_NEAR(fit.factors[static_cast<std::size_t>(KernelClass::Normalization)], 0.8, 1e-9);
    for (const auto& n : fit.nodes)
        EXPECT_NEAR(n.analyticalNs, analytical.nodes[n.node].forwardNs.at(mb), 1e-6 * n.analyticalNs);
    // The factors scale the model's backward as its forward.
    const auto calibrated = calibratedProfile(analytical, fit);
    for (std::size_t i = 0; i < graph.nodeCount(); ++i) {
        if (classes[i] != KernelClass::Gemm)
            continue;
        EXPECT_NEAR(calibrated.nodes[i].backwardNs.at(mb), 1.5 * analytical.nodes[i].backwardNs.at(mb),
            1e-6 * analytical.nodes[i].backwardNs.at(mb));
    }
    EXPECT_FALSE(calibrate(graph, analytical, analytical, classes, mb).forwardOnly);
}
