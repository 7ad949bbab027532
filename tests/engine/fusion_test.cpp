// Fused chains (engine/fusion.h): which Scale -> Mask -> Softmax chains are fused, and that fusing
// changes no bit on the CPU (forward, gradients, pipeline losses with swap and recompute) and
// reports each chain's work on its Softmax node.
#include "executor.h"
#include "fusion.h"
#include "graph/attention_fusion.h"
#include "graph/graph_builder.h"
#include "kernel_test_support.h"
#include "pipeline_support.h"
#include "runtime/training_run.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

using namespace ps;
using namespace ps::engine;

namespace {

Graph gpt(int layers, double dropout = 0.0)
{
    auto c = zooPreset("gpt2-tiny");
    c.layers = layers;
    c.seq = 16;
    c.microBatch = 2;
    c.dropout = dropout;
    return buildZooModel(c);
}

Graph bert(double dropout = -1) // below 0: the preset's
{
    auto c = zooPreset("bert-base");
    if (dropout >= 0)
        c.dropout = dropout;
    c.layers = 2;
    c.hidden = 64;
    c.heads = 4;
    c.vocab = 128;
    c.seq = 16;
    c.microBatch = 2;
    return buildZooModel(c);
}

// Inputs with every key visible to some query: ids and labels from a fixed pattern, an attention
// mask hiding the last 3 keys of the second sequence.
void feed(GraphExecutor& ex)
{
    for (const auto& t : ex.graph().tensors()) {
        if (t.kind != TensorKind::Input)
            continue;
        const auto n = static_cast<std::size_t>(numElements(t.shape));
        if (t.dtype == DType::F32) {
            std::vector<float> v(n, 1.0F);
            for (std::size_t i = n - 3; i < n; ++i)
                v[i] = 0.0F;
            ex.setInput(t.name, NdArray::fromBytes(ex.allocator(), t.shape, DType::F32, std::as_bytes(std::span(v))));
        } else {
            std::vector<std::int64_t> v(n);
            for (std::size_t i = 0; i < n; ++i)
                v[i] = static_cast<std::int64_t>((i * 7 + 3) % 2);
            ex.setInput(t.name, NdArray::fromBytes(ex.allocator(), t.shape, DType::I64, std::as_bytes(std::span(v))));
        }
    }
}

struct Pass
{
    float loss = 0;
    std::vector<std::vector<std::byte>> grads;
};

Pass runOnce(const Graph& graph, bool fuse)
{
    GraphExecutor ex(graph, ExecutorOptions { 3, 0, true, GemmPrecision::Fp32, fuse });
    feed(ex);
    Pass p;
    p.loss = ex.forward();
    ex.backward();
    for (auto id : ex.parameterIds())
        p.grads.push_back(ex.backend().toHost(ex.gradient(id)));
    return p;
}

class FusionObserver final : public NodeObserver
{
public:
    void nodeBegin(NodeId node, bool backward) override
    {
        spans.emplace_back(node.index(), backward);
    }
    void nodeEnd() override { }
    std::vector<std::pair<std::size_t, bool>> spans;
};

} // namespace

TEST(Fusion, OneScaleMaskSoftmaxChainPerAttentionLayer)
{
    const auto graph = gpt(3);
    const FusionPlan plan(graph, 0, graph.nodeCount(), cpuBackend());
    ASSERT_EQ(plan.chains().size(), 3U);
    for (const auto& c : plan.chains()) {
        ASSERT_GE(c.scale, 0);
        ASSERT_GE(c.mask, 0);
        EXPECT_EQ(graph.nodes()[c.head].op, OpType::Scale);
        EXPECT_EQ(graph.nodes()[static_cast<std::size_t>(c.mask)].op, OpType::Mask);
        EXPECT_EQ(graph.nodes()[c.softmax].op, OpType::Softmax);
        EXPECT_EQ(plan.chainOf(static_cast<std::size_t>(c.mask)), &c);
        EXPECT_FALSE(FusionPlan::paddingOf(graph, c).valid()); // causal only
    }
    const auto& first = plan.chains().front();
    // A stage boundary inside the chain: the part on each side fuses only if it is a chain itself.
    const FusionPlan endsBefore(graph, 0, first.softmax, cpuBackend());
    EXPECT_EQ(endsBefore.chainOf(first.head), nullptr);
    const FusionPlan startsAtMask(graph, static_cast<std::size_t>(first.mask), graph.nodeCount(), cpuBackend());
    const auto* tail = startsAtMask.chainOf(first.softmax);
    ASSERT_NE(tail, nullptr); // Mask -> Softmax, the Scale on the stage before
    EXPECT_EQ(tail->head, static_cast<std::size_t>(first.mask));
    EXPECT_EQ(tail->scale, -1);
    EXPECT_EQ(startsAtMask.chainOf(first.head), nullptr);
    // A recomputed probability, fusion switched off: not fused.
    const auto probs = graph.nodes()[first.softmax].outputs[0];
    const FusionPlan recomputed(graph, 0, graph.nodeCount(), cpuBackend(), std::vector<TensorId> { probs });
    EXPECT_EQ(recomputed.chains().size(), 2U);
    EXPECT_EQ(recomputed.chainOf(first.softmax), nullptr);
    EXPECT_TRUE(FusionPlan(graph, 0, graph.nodeCount(), cpuBackend(), {}, false).chains().empty());
    const auto bertGraph = bert();
    const FusionPlan padded(bertGraph, 0, bertGraph.nodeCount(), cpuBackend());
    ASSERT_EQ(padded.chains().size(), 2U);
    EXPECT_TRUE(FusionPlan::paddingOf(bertGraph, padded.chains().front()).valid());
    // Scores that are a parameter (a learned bias table scaled and normalised): apart, so its
    // chunk access and weight-gradient pass stay its Scale node's.
    GraphBuilder b(ModelInfo { "param-softmax", "test", "{}", 1 });
    const auto w = b.parameter("w", { 4, 8 });
    const auto table = b.op(OpType::Softmax, "softmax", { b.op(OpType::Scale, "scale", { w }, { { "scale", 0.5 } }) });
    const auto tableGraph = b.finish({ table });
    EXPECT_TRUE(FusionPlan(tableGraph, 0, tableGraph.nodeCount(), cpuBackend()).chains().empty());
}

TEST(Fusion, FusedChainsGiveTheSeparateKernelsBits)
{
    ASSERT_TRUE(fusionEnabled()) << "PS_FUSION=0 is set";
    for (const auto& [name, graph] : { std::pair { "gpt, dropout 0.1", gpt(2, 0.1) }, std::pair { "bert", bert() } }) {
        ASSERT_EQ(FusionPlan(graph, 0, graph.nodeCount(), cpuBackend()).chains().size(), 2U) << name;
        const auto fused = runOnce(graph, true);
        const auto apart = runOnce(graph, false);
        EXPECT_TRUE(std::isfinite(fused.loss)) << name;
        EXPECT_EQ(std::memcmp(&fused.loss, &apart.loss, sizeof(float)), 0) << name;
        ASSERT_EQ(fused.grads.size(), apart.grads.size());
        for (std::size_t i = 0; i < fused.grads.size(); ++i)
            EXPECT_EQ(fused.grads[i], apart.grads[i]) << name << ": parameter " << i;
    }
}

TEST(Fusion, AChainIsObservedOnItsSoftmaxNode)
{
    const auto graph = gpt(1);
    const FusionPlan plan(graph, 0, graph.nodeCount(), cpuBackend());
    ASSERT_EQ(plan.chains().size(), 1U);
    const auto chain = plan.chains().front();
    GraphExecutor ex(graph);
    feed(ex);
    FusionObserver observer;
    ex.setObserver(&observer);
    (void)ex.forward();
    ex.backward();
    const auto count = [&](std::size_t node, bool backward) {
        return std::count(observer.spans.begin(), observer.spans.end(), std::pair { node, backward });
    };
    EXPECT_EQ(count(chain.softmax, false), 1);
    EXPECT_EQ(count(chain.softmax, true), 1);
    for (const auto inner : { chain.head, static_cast<std::size_t>(chain.mask) }) {
        EXPECT_EQ(count(inner, false), 0);
        EXPECT_EQ(count(inner, true), 0);
    }
    // A GEMM + bias chain's forward is observed on its MatMul, its add's backward on the add, and
    // a Gelu's in the chain likewise.
    ASSERT_FALSE(plan.gemmChains().empty());
    std::ptrdiff_t gelus = 0;
    for (const auto& g : plan.gemmChains()) {
        EXPECT_EQ(count(g.matmul, false), 1);
        EXPECT_EQ(count(g.add, false), 0);
        EXPECT_EQ(count(g.add, true), 1);
        if (g.gelu >= 0) {
            ++gelus;
            EXPECT_EQ(count(static_cast<std::size_t>(g.gelu), false), 0);
            EXPECT_EQ(count(static_cast<std::size_t>(g.gelu), true), 1);
        }
    }
    EXPECT_EQ(gelus, 1) << "the MLP's first Linear";
    // Every other node's forward as before.
    EXPECT_EQ(std::count_if(observer.spans.begin(), observer.spans.end(), [](const auto& s) { return !s.second; }),
        static_cast<std::ptrdiff_t>(graph.nodeCount() - 2 - plan.gemmChains().size()) - gelus);
}

// The pipeline runtime with the chains fused and with PS_FUSION=0, in 1F1B and in ZB-H1 (B and
// W apart) on two CPU devices whose plans swap half of each stage's saved storages (swapped
// probabilities stay fused: the same array) and recompute the rest (those chains stay apart):
// the same losses.
TEST(Fusion, PipelineLossesEqualWithFusionOff)
{
    ASSERT_TRUE(fusionEnabled()) << "PS_FUSION=0 is set";
    const auto graph = gpt(2, 0.1);
    RunConfig config;
    config.partition = ps::engine::testing::evenCuts(graph, 2);
    config.memory = ps::engine::testing::swapAndRecompute(graph, config.partition);
    // The first stage's attention probabilities swapped rather than recomputed: one chain fuses
    // across a swap; the second stage's recomputed ones keep theirs apart.
    const auto isProbability = [&](TensorId t) {
        const auto producer = graph.tensor(t).producer;
        return producer.valid() && graph.node(producer).op == OpType::Softmax;
    };
    auto& first = config.memory.front();
    for (auto t : first.recomputedTensors) {
        if (isProbability(t))
            first.swappedTensors.push_back(t);
    }
    std::erase_if(first.recomputedTensors, isProbability);
    config.optimizer.kind = "adamw";
    config.seed = 5;
    std::size_t fusedChains = 0;
    std::size_t swappedProbabilities = 0;
    for (std::size_t k = 0; k < config.memory.size(); ++k) { // what each stage executor fuses
        const auto& starts = config.partition.stageStarts;
        const auto end = k + 1 < starts.size() ? starts[k + 1] : graph.nodeCount();
        const FusionPlan plan(graph, starts[k], end, cpuBackend(), config.memory[k].recomputedTensors);
        fusedChains += plan.chains().size();
        const auto& swapped = config.memory[k].swappedTensors;
        for (const auto& c : plan.chains())
            swappedProbabilities += std::count(swapped.begin(), swapped.end(), graph.nodes()[c.softmax].outputs[0]);
    }
    EXPECT_EQ(fusedChains, 1U);
    EXPECT_EQ(swappedProbabilities, 1U);
    EXPECT_FALSE(config.memory.back().recomputedTensors.empty());
    for (const auto* schedule : { "1f1b", "zb-h1" }) {
        config.schedule = parseScheduleSpec(schedule, 2, 4);
        const auto losses = [&](bool fuse) {
            if (!fuse)
                ::setenv("PS_FUSION", "0", 1);
            TrainingRun run(graph, TokenData::random(256, 1 << 14, 11), makeDevices("cpu:2", 0), config);
            ::unsetenv("PS_FUSION");
            std::vector<double> out;
            for (int s = 0; s < 4; ++s)
                out.push_back(run.step().loss);
            return out;
        };
        const auto fused = losses(true);
        const auto apart = losses(false);
        ASSERT_EQ(fused.size(), apart.size());
        for (std::size_t i = 0; i < fused.size(); ++i)
            EXPECT_EQ(fused[i], apart[i]) << schedule << " step " << i + 1;
    }
}

// GEMM + bias chains: every Linear with a bias in the zoo's GPT (MatMul -> BiasAdd), an imported
// Add with the bias first, and where the chain stays apart.
TEST(Fusion, OneGemmBiasChainPerLinearWithABias)
{
    const auto graph = gpt(2);
    const FusionPlan plan(graph, 0, graph.nodeCount(), cpuBackend());
    std::size_t linears = 0;
    for (const auto& node : graph.nodes()) {
        const auto producer = graph.tensor(node.inputs[0]).producer;
        linears += node.op == OpType::BiasAdd && producer.valid() && graph.node(producer).op == OpType::MatMul;
    }
    EXPECT_GE(linears, 8U); // q/k/v (or qkv), projection and two MLP layers per block
    ASSERT_EQ(plan.gemmChains().size(), linears);
    std::size_t gelus = 0;
    for (const auto& c : plan.gemmChains()) {
        EXPECT_EQ(graph.nodes()[c.matmul].op, OpType::MatMul);
        EXPECT_EQ(graph.nodes()[c.add].op, OpType::BiasAdd);
        EXPECT_EQ(c.productInput, 0U);
        EXPECT_EQ(plan.gemmChainOf(c.add), &c);
        EXPECT_EQ(plan.chainOf(c.matmul), nullptr);
        if (c.gelu >= 0) { // the MLP's first Linear: the Gelu reads its sum alone
            ++gelus;
            const auto& gelu = graph.nodes()[static_cast<std::size_t>(c.gelu)];
            EXPECT_EQ(gelu.op, OpType::Gelu);
            EXPECT_EQ(gelu.inputs[0], graph.nodes()[c.add].outputs[0]);
            EXPECT_EQ(plan.gemmChainOf(gelu.id.index()), &c);
        }
    }
    EXPECT_EQ(gelus, 2U) << "one per block";
    const auto first = plan.gemmChains().front();
    const auto product = graph.nodes()[first.matmul].outputs[0];
    const FusionPlan recomputed(graph, 0, graph.nodeCount(), cpuBackend(), std::vector<TensorId> { product });
    EXPECT_EQ(recomputed.gemmChainOf(first.matmul), nullptr);
    EXPECT_EQ(recomputed.gemmChains().size(), linears - 1);
    EXPECT_EQ(FusionPlan(graph, first.matmul + 1, graph.nodeCount(), cpuBackend()).gemmChainOf(first.add), nullptr);
    EXPECT_TRUE(FusionPlan(graph, 0, graph.nodeCount(), cpuBackend(), {}, false).gemmChains().empty());
    auto dropped = plan;
    dropped.dropGemmChain(first.matmul);
    EXPECT_EQ(dropped.gemmChains().size(), linears - 1);
    EXPECT_EQ(dropped.gemmChainOf(first.add), nullptr);
    EXPECT_NE(dropped.gemmChainOf(plan.gemmChains().back().add), nullptr);
    const auto withGelu = *std::find_if(
        plan.gemmChains().begin(), plan.gemmChains().end(), [](const GemmBiasChain& c) { return c.gelu >= 0; });
    dropped.dropGemmChain(withGelu.matmul);
    EXPECT_EQ(dropped.gemmChainOf(static_cast<std::size_t>(withGelu.gelu)), nullptr);
    // A recomputed GELU output keeps the Gelu apart, the GEMM + bias fused.
    const FusionPlan geluRecomputed(graph, 0, graph.nodeCount(), cpuBackend(),
        std::vector<TensorId> { graph.nodes()[static_cast<std::size_t>(withGelu.gelu)].outputs[0] });
    ASSERT_NE(geluRecomputed.gemmChainOf(withGelu.matmul), nullptr);
    EXPECT_EQ(geluRecomputed.gemmChainOf(withGelu.matmul)->gelu, -1);
    EXPECT_EQ(geluRecomputed.gemmChainOf(static_cast<std::size_t>(withGelu.gelu)), nullptr);
    // A range that ends before the Gelu fuses the GEMM + bias alone.
    const FusionPlan cut(graph, 0, static_cast<std::size_t>(withGelu.gelu), cpuBackend());
    ASSERT_NE(cut.gemmChainOf(withGelu.matmul), nullptr);
    EXPECT_EQ(cut.gemmChainOf(withGelu.matmul)->gelu, -1);

    GraphBuilder b(ModelInfo { "imported-linears", "test", "{}", 1 });
    const auto x = b.input("x", { 4, 8 }, DType::F32);
    const auto w = b.parameter("w", { 8, 6 });
    const auto bias = b.parameter("b", { 6 });
    const auto y = b.op(OpType::Add, "bias_first", { bias, b.op(OpType::MatMul, "mm", { x, w }) });
    const auto twice = b.op(OpType::MatMul, "mm_twice", { x, w }); // read by two nodes: apart
    const auto z = b.op(OpType::Add, "read_twice", { twice, bias });
    const auto late = b.op(OpType::MatMul, "mm_late", { x, w }); // its bias made after it: apart
    const auto sum = b.op(OpType::Add, "late_bias", { late, b.op(OpType::Relu, "relu", { bias }) });
    // A Gelu whose input another node reads too stays out of the chain.
    const auto shared = b.op(OpType::BiasAdd, "shared_sum", { b.op(OpType::MatMul, "mm_shared", { x, w }), bias });
    const auto gelu = b.op(OpType::Gelu, "gelu_shared", { shared }, { { "approximate", std::string("tanh") } });
    const auto imported = b.finish({ b.op(OpType::Add, "out",
        { b.op(OpType::Add, "s", { y, z }),
            b.op(OpType::Add, "t",
                { b.op(OpType::Add, "u", { twice, sum }), b.op(OpType::Add, "v", { gelu, shared }) }) }) });
    const FusionPlan importedPlan(imported, 0, imported.nodeCount(), cpuBackend());
    ASSERT_EQ(importedPlan.gemmChains().size(), 2U);
    EXPECT_EQ(imported.nodes()[importedPlan.gemmChains().front().add].name, "bias_first");
    EXPECT_EQ(importedPlan.gemmChains().front().productInput, 1U);
    EXPECT_EQ(imported.nodes()[importedPlan.gemmChains().back().add].name, "shared_sum");
    EXPECT_EQ(importedPlan.gemmChains().back().gelu, -1);
}

// The CPU's GEMM + bias gives MatMul then BiasAdd's bits (x broadcast over batches, trans_b).
TEST(Fusion, CpuGemmBiasGivesMatMulThenAddBits)
{
    ps::engine::testing::RandomArrays make;
    std::mt19937_64 rng(3);
    KernelContext ctx { make.m_alloc, rng, true };
    struct Case
    {
        Shape x, w;
        bool transB;
    };
    for (const auto& c : { Case { { 2, 3, 5, 8 }, { 8, 7 }, false }, Case { { 9, 16 }, { 12, 16 }, true },
             Case { { 3, 40, 64 }, { 64, 256 }, false } }) {
        const auto matmul =
            ps::engine::testing::makeNode(OpType::MatMul, { { "trans_b", std::int64_t { c.transB ? 1 : 0 } } });
        const auto add = ps::engine::testing::makeNode(OpType::BiasAdd);
        const auto x = make.random(c.x);
        const auto w = make.random(c.w);
        const auto bias = make.random({ c.transB ? c.w.front() : c.w.back() });
        NodeValues mv { { x, w }, {}, {} };
        cpuBackend().forward(matmul, mv, ctx);
        NodeValues av { { mv.out[0], bias }, {}, {} };
        cpuBackend().forward(add, av, ctx);
        const auto fused = cpuBackend().forwardGemmBias(matmul, x, w, bias, ctx);
        ASSERT_EQ(fused.shape(), av.out[0].shape());
        EXPECT_EQ(std::memcmp(fused.f32(), av.out[0].f32(), static_cast<std::size_t>(fused.numel()) * sizeof(float)), 0)
            << formatShape(c.x) << " x " << formatShape(c.w);
    }
    EXPECT_THROW((void)cpuBackend().forwardGemmBias(ps::engine::testing::makeNode(OpType::MatMul),
                     make.random({ 2, 4 }), make.random({ 4, 3 }), make.random({ 4 }), ctx),
        Error);
}

// The CPU's GEMM + bias + Gelu (Backend::forwardGemmBiasGelu: the fused GEMM + bias, then the Gelu
// kernel) gives MatMul, BiasAdd and Gelu's bits, tanh and exact.
TEST(Fusion, CpuGemmBiasGeluGivesTheSeparateKernelsBits)
{
    ASSERT_EQ(cpuBackend().kernels().gemmBiasGelu(), nullptr) << "the CPU runs the Gelu kernel after";
    ps::engine::testing::RandomArrays make;
    std::mt19937_64 rng(4);
    KernelContext ctx { make.m_alloc, rng, true };
    for (const auto* approximate : { "tanh", "none" }) {
        const auto matmul = ps::engine::testing::makeNode(OpType::MatMul);
        const auto add = ps::engine::testing::makeNode(OpType::BiasAdd);
        const auto gelu = ps::engine::testing::makeNode(OpType::Gelu, { { "approximate", std::string(approximate) } });
        const auto x = make.random({ 3, 40, 64 });
        const auto w = make.random({ 64, 96 });
        const auto bias = make.random({ 96 });
        NodeValues mv { { x, w }, {}, {} };
        cpuBackend().forward(matmul, mv, ctx);
        NodeValues av { { mv.out[0], bias }, {}, {} };
        cpuBackend().forward(add, av, ctx);
        NodeValues gv { { av.out[0] }, {}, {} };
        cpuBackend().forward(gelu, gv, ctx);
        const auto fused = cpuBackend().forwardGemmBiasGelu(matmul, gelu, x, w, bias, ctx);
        const auto bytes = static_cast<std::size_t>(gv.out[0].numel()) * sizeof(float);
        ASSERT_EQ(fused.sum.shape(), av.out[0].shape());
        ASSERT_EQ(fused.activated.shape(), gv.out[0].shape());
        EXPECT_EQ(std::memcmp(fused.sum.f32(), av.out[0].f32(), bytes), 0) << approximate;
        EXPECT_EQ(std::memcmp(fused.activated.f32(), gv.out[0].f32(), bytes), 0) << approximate;
    }
}

// The Attention node (graph/attention_fusion.h, engine/attention_kernel.h) runs the chain's own
// kernels: on the CPU the loss and every parameter's gradient are the chain's to the bit, causal
// (GPT) and with a padding mask (BERT), and with dropout on the probabilities (the node draws its
// mask's seed where the chain's Dropout drew it); its forward and backward are each observed once.
TEST(Fusion, AnAttentionNodeGivesTheChainsBits)
{
    for (auto [name, graph] : { std::pair { "gpt", gpt(2) }, std::pair { "bert", bert(0) },
             std::pair { "gpt, dropout 0.1", gpt(2, 0.1) }, std::pair { "bert, dropout 0.1", bert(0.1) } }) {
        std::size_t fused = 0;
        const auto attention = fuseAttention(graph, &fused);
        ASSERT_EQ(fused, 2U) << name;
        const auto chain = runOnce(graph, true);
        const auto node = runOnce(attention, true);
        EXPECT_TRUE(std::isfinite(node.loss)) << name;
        EXPECT_EQ(std::memcmp(&node.loss, &chain.loss, sizeof(float)), 0)
            << name << ": " << node.loss << " vs " << chain.loss;
        ASSERT_EQ(node.grads.size(), chain.grads.size());
        for (std::size_t i = 0; i < node.grads.size(); ++i)
            EXPECT_EQ(node.grads[i], chain.grads[i]) << name << ": parameter " << i;
        GraphExecutor ex(attention);
        feed(ex);
        FusionObserver observer;
        ex.setObserver(&observer);
        (void)ex.forward();
        ex.backward();
        for (const auto& n : attention.nodes()) {
            if (n.op != OpType::Attention)
                continue;
            EXPECT_EQ(std::count(observer.spans.begin(), observer.spans.end(), std::pair { n.id.index(), false }), 1);
            EXPECT_EQ(std::count(observer.spans.begin(), observer.spans.end(), std::pair { n.id.index(), true }), 1);
        }
    }
}
