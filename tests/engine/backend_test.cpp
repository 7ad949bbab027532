// The device backend interface on the CPU backend: the kernel table covers the IR, unsupported ops
// fail naming the node, buffers move between host and device byte for byte, and the elementwise
// updates follow torch.optim.AdamW / SGD (checked against values computed by hand, in double).
#include "backend.h"
#include "cpu/cpu_backend.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <span>

using namespace ps;
using namespace ps::engine;

namespace {

NdArray f32(const Backend& backend, Allocator& alloc, const std::vector<float>& values)
{
    return backend.fromHost(
        alloc, { static_cast<std::int64_t>(values.size()) }, DType::F32, std::as_bytes(std::span(values)));
}

std::vector<float> floats(const Backend& backend, const NdArray& a)
{
    const auto bytes = backend.toHost(a);
    std::vector<float> out(bytes.size() / sizeof(float));
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
}

void forwardOnly(const Node&, NodeValues&, KernelContext&) { }
void backwardOnly(const Node&, const NodeValues&, BackwardArgs&, KernelContext&) { }

} // namespace

TEST(CpuBackend, EveryIrOpButOpaqueHasAForwardAndBackwardKernel)
{
    const auto& backend = cpuBackend();
    EXPECT_EQ(backend.name(), "cpu");
    for (int i = 0; i < static_cast<int>(OpType::Opaque); ++i) {
        const auto op = static_cast<OpType>(i);
        const auto* kernel = backend.kernels().find(op);
        ASSERT_NE(kernel, nullptr) << toString(op);
        EXPECT_NE(kernel->forward, nullptr) << toString(op);
        EXPECT_NE(kernel->backward, nullptr) << toString(op);
        EXPECT_TRUE(backend.supports(op)) << toString(op);
    }
    EXPECT_FALSE(backend.supports(OpType::Opaque));
    EXPECT_EQ(backend.kernels().find(OpType::Opaque), nullptr);
}

TEST(CpuBackend, ForwardOnAnOpaqueNodeThrowsNamingTheNode)
{
    Allocator alloc;
    std::mt19937_64 rng(1);
    KernelContext ctx { alloc, rng, true };
    Node n;
    n.name = "blocks.3.custom";
    n.op = OpType::Opaque;
    n.opaqueType = "FlashAttention";
    NodeValues v { { NdArray::zeros(alloc, { 2, 2 }) }, {}, {} };
    try {
        cpuBackend().forward(n, v, ctx);
        FAIL() << "expected ps::Error";
    } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("node 'blocks.3.custom'"), std::string::npos) << what;
        EXPECT_NE(what.find("FlashAttention"), std::string::npos) << what;
        EXPECT_NE(what.find("cpu backend has no kernel"), std::string::npos) << what;
    }
    EXPECT_THROW((void)cpuBackend().backward(n, v, { NdArray() }, { true }, ctx), Error);
}

TEST(KernelTable, AddingAnOpTwiceThrows)
{
    KernelTable table;
    EXPECT_EQ(table.find(OpType::Relu), nullptr);
    table.add(OpType::Relu, { forwardOnly, backwardOnly });
    ASSERT_NE(table.find(OpType::Relu), nullptr);
    EXPECT_EQ(table.find(OpType::Relu)->forward, &forwardOnly);
    EXPECT_THROW(table.add(OpType::Relu, { forwardOnly, backwardOnly }), Error);
    EXPECT_THROW(table.add(OpType::Tanh, { forwardOnly, nullptr }), Error); // half an entry
    EXPECT_EQ(table.find(OpType::Tanh), nullptr);
}

TEST(CpuBackend, HostRoundTripKeepsF32AndI64Bytes)
{
    const auto& backend = cpuBackend();
    Allocator alloc;
    const std::vector<float> f { 1.5F, -0.0F, 3.25e-8F, -7.0F, 1e30F, 0.1F };
    const auto a = backend.fromHost(alloc, { 2, 3 }, DType::F32, std::as_bytes(std::span(f)));
    EXPECT_EQ(a.shape(), (Shape { 2, 3 }));
    EXPECT_EQ(a.dtype(), DType::F32);
    EXPECT_EQ(alloc.current(), 24);
    const auto fBack = backend.toHost(a);
    ASSERT_EQ(fBack.size(), 24U);
    EXPECT_EQ(std::memcmp(fBack.data(), f.data(), 24), 0);

    const std::vector<std::int64_t> ids { -100, 0, 255, std::int64_t { 1 } << 40 };
    const auto b = backend.fromHost(alloc, { 4 }, DType::I64, std::as_bytes(std::span(ids)));
    EXPECT_EQ(b.dtype(), DType::I64);
    const auto iBack = backend.toHost(b);
    ASSERT_EQ(iBack.size(), 32U);
    EXPECT_EQ(std::memcmp(iBack.data(), ids.data(), 32), 0);

    // The byte count must match the shape.
    EXPECT_THROW((void)backend.fromHost(alloc, { 3 }, DType::I64, std::as_bytes(std::span(ids))), Error);
}

TEST(CpuBackend, CopyToAccountsTheBytesOnTheTargetAllocator)
{
    const auto& backend = cpuBackend();
    Allocator device("cpu:0");
    Allocator host("host pool");
    const auto a = f32(backend, device, { 1.0F, 2.0F, 3.0F, 4.0F });
    EXPECT_EQ(device.current(), 16);
    EXPECT_EQ(host.current(), 0);
    auto copy = backend.copyTo(a, backend, host);
    EXPECT_EQ(device.current(), 16);
    EXPECT_EQ(host.current(), 16);
    EXPECT_EQ(floats(backend, copy), (std::vector<float> { 1.0F, 2.0F, 3.0F, 4.0F }));
    backend.fill(copy, 0.0F); // its own storage
    EXPECT_EQ(floats(backend, a), (std::vector<float> { 1.0F, 2.0F, 3.0F, 4.0F }));
    copy = NdArray();
    EXPECT_EQ(host.current(), 0);
}

TEST(CpuBackend, AccumulateAddAndFill)
{
    const auto& backend = cpuBackend();
    Allocator alloc;
    auto dst = f32(backend, alloc, { 1.0F, 2.0F, 3.0F });
    const auto src = f32(backend, alloc, { 0.5F, -2.0F, 10.0F });
    backend.accumulate(dst, src);
    EXPECT_EQ(floats(backend, dst), (std::vector<float> { 1.5F, 0.0F, 13.0F }));

    const auto view = dst.view({ 1, 3 }); // shares dst's storage: add must leave it alone
    const auto sum = backend.add(dst, src, alloc);
    EXPECT_EQ(floats(backend, sum), (std::vector<float> { 2.0F, -2.0F, 23.0F }));
    EXPECT_EQ(floats(backend, view), (std::vector<float> { 1.5F, 0.0F, 13.0F }));

    auto z = backend.zeros(alloc, { 2, 2 });
    EXPECT_EQ(floats(backend, z), (std::vector<float>(4, 0.0F)));
    backend.fill(z, -3.5F);
    EXPECT_EQ(floats(backend, z), (std::vector<float>(4, -3.5F)));

    EXPECT_THROW(backend.accumulate(dst, z), Error); // 3 vs 4 elements
}

// Two steps of torch.optim.AdamW (lr 0.1, betas (0.9, 0.999), eps 1e-8, weight decay 0.01) on
// gradients scaled by 0.5, computed by hand in double.
TEST(CpuBackend, AdamWMatchesTwoHandComputedSteps)
{
    const auto& backend = cpuBackend();
    Allocator alloc;
    auto w = f32(backend, alloc, { 1.0F, -0.5F, 0.25F });
    auto m = backend.zeros(alloc, { 3 });
    auto v = backend.zeros(alloc, { 3 });
    AdamWUpdate u;
    u.lr = 0.1F;
    u.weightDecay = 0.01F;
    u.gradScale = 0.5F;
    u.step = 1;
    backend.adamw(w, f32(backend, alloc, { 0.1F, -0.2F, 0.0F }), m, v, u);
    u.step = 2;
    backend.adamw(w, f32(backend, alloc, { 0.3F, 0.05F, -0.4F }), m, v, u);
    const std::vector<double> wRef { 0.806322916, -0.352153699, 0.323913927 };
    const std::vector<double> mRef { 0.0195, -0.0065, -0.02 };
    const std::vector<double> vRef { 2.49975e-05, 1.0615e-05, 4e-05 };
    const auto wv = floats(backend, w);
    const auto mv = floats(backend, m);
    const auto vv = floats(backend, v);
    for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_NEAR(wv[i], wRef[i], 1e-6) << i;
        EXPECT_NEAR(mv[i], mRef[i], 1e-6) << i;
        EXPECT_NEAR(vv[i], vRef[i], 1e-6) << i;
    }
}

// Two steps of torch.optim.SGD (lr 0.1, momentum 0.9, dampening 0, weight decay 0.01).
TEST(CpuBackend, SgdMatchesTwoHandComputedSteps)
{
    const auto& backend = cpuBackend();
    Allocator alloc;
    auto w = f32(backend, alloc, { 1.0F, -0.5F, 0.25F });
    auto buf = backend.zeros(alloc, { 3 });
    SgdUpdate u;
    u.lr = 0.1F;
    u.momentum = 0.9F;
    u.weightDecay = 0.01F;
    u.gradScale = 0.5F;
    u.firstStep = true;
    backend.sgd(w, f32(backend, alloc, { 0.1F, -0.2F, 0.0F }), buf, u);
    u.firstStep = false;
    backend.sgd(w, f32(backend, alloc, { 0.3F, 0.05F, -0.4F }), buf, u);
    const std::vector<double> wRef { 0.972606, -0.4820605, 0.26927525 };
    const std::vector<double> bufRef { 0.21394, -0.074395, -0.1952525 };
    const auto wv = floats(backend, w);
    const auto bv = floats(backend, buf);
    for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_NEAR(wv[i], wRef[i], 1e-6) << i;
        EXPECT_NEAR(bv[i], bufRef[i], 1e-6) << i;
    }
}

// Every op of the registry but Opaque has CPU kernels (the engine trains any mapped import).
TEST(CpuBackend, EveryRegisteredOpHasAKernel)
{
    for (const auto& info : allOpTypes()) {
        if (info.type != OpType::Opaque) {
            EXPECT_TRUE(cpuBackend().supports(info.type)) << info.name;
        }
    }
    EXPECT_FALSE(cpuBackend().supports(OpType::Opaque));
}

namespace {

// Memory with a physical limit, as a GPU's: allocate fails past it.
class LimitedMemory final : public MemoryResource
{
public:
    explicit LimitedMemory(std::size_t limit)
        : m_limit(limit)
    {
    }
    [[nodiscard]] std::string_view name() const override
    {
        return "limited";
    }
    [[nodiscard]] bool hostAccessible() const override
    {
        return true;
    }
    [[nodiscard]] std::byte* allocate(std::size_t bytes) override
    {
        if (used + bytes > m_limit)
            return nullptr;
        used += bytes;
        return hostMemory()->allocate(bytes);
    }
    void release(std::byte* block, std::size_t bytes) override
    {
        used -= bytes;
        hostMemory()->release(block, bytes);
    }
    void zero(std::byte* block, std::size_t bytes) override
    {
        hostMemory()->zero(block, bytes);
    }
    void copy(std::byte* dst, const std::byte* src, std::size_t bytes) override
    {
        hostMemory()->copy(dst, src, bytes);
    }
    [[nodiscard]] std::size_t cacheLimitBytes() const override
    {
        return cacheLimit;
    }
    std::size_t used = 0;
    std::size_t cacheLimit = std::size_t { 4 } << 30;

private:
    std::size_t m_limit;
};

} // namespace

// Freed blocks stay cached for reuse at their size; when the memory is full they are given back
// and the allocation is tried again, instead of failing while the cache holds the room.
TEST(Allocator, AFullMemoryGetsTheCachedBlocksBackAndRetries)
{
    const auto memory = std::make_shared<LimitedMemory>(2 << 20);
    Allocator device("gpu-like", 0, memory);
    {
        const auto first = NdArray::empty(device, { 256 * 1024 }); // 1 MiB, cached when freed
    }
    EXPECT_EQ(memory->used, std::size_t { 1 } << 20);
    const auto second = NdArray::empty(device, { 384 * 1024 }); // 1.5 MiB: fits only without the cached block
    EXPECT_EQ(memory->used, std::size_t { 3 } << 19);
    EXPECT_THROW((void)NdArray::empty(device, { 256 * 1024 }), OutOfMemoryError); // really full now
}

// Freed blocks are kept up to the memory's cache limit and the rest returned: host memory keeps
// 4 GiB; a GPU keeps everything (cudaFree waits for the whole device), as PyTorch's allocator does.
TEST(Allocator, KeepsFreedBlocksUpToItsMemorysCacheLimit)
{
    const auto memory = std::make_shared<LimitedMemory>(64 << 20);
    memory->cacheLimit = std::size_t { 1 } << 20;
    Allocator device("gpu-like", 0, memory);
    {
        const auto a = NdArray::empty(device, { 256 * 1024 }); // 1 MiB each
        const auto b = NdArray::empty(device, { 256 * 1024 });
    }
    EXPECT_EQ(memory->used, std::size_t { 1 } << 20); // one cached, one given back
    memory->cacheLimit = std::numeric_limits<std::size_t>::max();
    {
        const auto c = NdArray::empty(device, { 256 * 1024 }); // the cached block again
        const auto d = NdArray::empty(device, { 256 * 1024 });
        const auto e = NdArray::empty(device, { 256 * 1024 });
    }
    EXPECT_EQ(memory->used, std::size_t { 3 } << 20); // all three kept
    EXPECT_EQ(hostMemory()->cacheLimitBytes(), std::size_t { 4 } << 30);
}

// The peak without messages is the highest level of everything else, which need not be the
// level at the overall peak: here the overall peak holds a message and little else.
TEST(Allocator, PeakWithoutMessagesIgnoresWhatWaitsAtTheDevice)
{
    Allocator device("cpu", 0);
    {
        const auto activations = NdArray::empty(device, { 1000 }); // 4000 B
    }
    NdArray message;
    {
        const MemoryUseScope use(MemoryUse::Messages);
        message = NdArray::empty(device, { 1500 }); // 6000 B
    }
    const auto workspace = NdArray::empty(device, { 100 }); // 400 B beside the message
    EXPECT_EQ(device.peak(), 6400);
    EXPECT_EQ(device.peakByUse()[static_cast<std::size_t>(MemoryUse::Messages)], 6000);
    EXPECT_EQ(device.peakWithoutMessages(), 4000);
    device.resetPeak();
    EXPECT_EQ(device.peakWithoutMessages(), 400);
}
