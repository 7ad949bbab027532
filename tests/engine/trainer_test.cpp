// End-to-end training on the CPU backend: a small GPT learns byte-level Shakespeare.
#include "executor.h"
#include "trainer.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

#include <filesystem>

using namespace ps;
using namespace ps::engine;

TEST(Trainer, SmallGptLearnsShakespeareBytes)
{
    const std::filesystem::path shakespeare = PS_SOURCE_DIR "/../shared/data/tinyshakespeare.txt";
    if (!std::filesystem::exists(shakespeare))
        GTEST_SKIP() << shakespeare << " not found: ../shared exists only on development and CI machines";
    ModelConfig c = zooPreset("gpt2-tiny"); // 2 layers, 64 wide, 4 heads, seq 64, byte vocabulary
    c.microBatch = 32;
    TrainOptions o;
    // Runs of this size sit on the unigram plateau (3.31 nats) for a seed-dependent while, in the
    // engine and in PyTorch alike (measured over seeds: 2.3-2.9 after 200 steps at lr 3e-3 in both);
    // lr 2e-3 escapes it earlier. The seed is fixed, so the run is the same on every machine.
    o.optimizer.lr = 2e-3;
    o.seed = 2;
    Trainer trainer(buildZooModel(c), TokenData::fromTextFile(shakespeare), o);
    const auto first = trainer.step();
    EXPECT_GT(first.loss, 5.0); // ln 256 = 5.55 for an untrained byte model
    double last10 = 0;
    for (int step = 2; step <= 200; ++step) {
        const auto r = trainer.step();
        if (step > 190)
            last10 += r.loss / 10;
    }
    std::cout << "[ NOTE ] loss " << first.loss << " -> " << last10 << " (mean of steps 191-200)\n";
    EXPECT_LT(last10, 2.5);
}

namespace {

// Records what a NodeObserver is told, and checks that spans pair up without nesting.
class RecordingObserver final : public NodeObserver
{
public:
    void nodeBegin(NodeId node, bool backward) override
    {
        EXPECT_FALSE(open) << "span of node " << node.index() << " opened inside another";
        open = true;
        spans.emplace_back(node.index(), backward);
    }
    void nodeEnd() override
    {
        EXPECT_TRUE(open);
        open = false;
    }
    bool open = false;
    std::vector<std::pair<std::size_t, bool>> spans;
};

} // namespace

TEST(GraphExecutor, ObserverSeesEveryForwardInOrderAndEveryBackwardInReverse)
{
    ModelConfig c = zooPreset("gpt2-tiny");
    c.layers = 1;
    c.seq = 8;
    c.microBatch = 1;
    // Every node apart: fused chains report on their Softmax node (fusion_test.cpp).
    GraphExecutor ex(buildZooModel(c), ExecutorOptions { 0, 0, true, GemmPrecision::Fp32, false });
    for (const auto& t : ex.graph().tensors()) { // token ids and labels 0
        if (t.kind == TensorKind::Input)
            ex.setInput(t.name, NdArray::zeros(ex.allocator(), t.shape, t.dtype));
    }
    RecordingObserver observer;
    ex.setObserver(&observer);
    (void)ex.forward();
    const auto n = ex.graph().nodeCount();
    ASSERT_EQ(observer.spans.size(), n);
    for (std::size_t i = 0; i < n; ++i)
        EXPECT_EQ(observer.spans[i], std::make_pair(i, false));
    ex.backward();
    ASSERT_GT(observer.spans.size(), n + n / 2); // most nodes pass a gradient back
    for (std::size_t i = n + 1; i < observer.spans.size(); ++i) {
        EXPECT_TRUE(observer.spans[i].second);
        EXPECT_LT(observer.spans[i].first, observer.spans[i - 1].first); // reverse graph order
    }
    EXPECT_EQ(observer.spans[n].first, n - 1); // the loss first
    EXPECT_FALSE(observer.open);
    const auto recorded = observer.spans.size();
    ex.setObserver(nullptr);
    ex.releaseActivations();
    (void)ex.forward();
    EXPECT_EQ(observer.spans.size(), recorded); // nothing reported once detached
}
