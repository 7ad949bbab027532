// The backend seam is device-neutral (issue P14's design rule): nothing above a backend reads a
// device buffer's bytes. Checked with a backend whose memory the host may not read, as a GPU's:
// its kernels stage their operands into host arrays, run the CPU kernels there and copy the
// results back, through the memory resource only (as a CUDA backend's copies go through
// cudaMemcpy). The executor and the pipeline runtime, with swaps, recompute and chunks, must then
// train exactly as on the CPU backend; any host read of its memory above the backend throws.
#include "backend.h"
#include "cpu/ndarray.h"
#include "executor.h"
#include "pipeline_support.h"
#include "runtime/training_run.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

using namespace ps;
using namespace ps::engine;
using namespace ps::engine::testing;

namespace {

// Host memory that host code may not read through an array: every access goes through copy().
class SealedMemory final : public MemoryResource
{
public:
    [[nodiscard]] std::string_view name() const override
    {
        return "sealed";
    }
    [[nodiscard]] bool hostAccessible() const override
    {
        return false;
    }
    [[nodiscard]] std::byte* allocate(std::size_t bytes) override
    {
        ++allocations;
        return static_cast<std::byte*>(std::aligned_alloc(64, bytes));
    }
    void release(std::byte* block, std::size_t /*bytes*/) override
    {
        std::free(block);
    }
    void zero(std::byte* block, std::size_t bytes) override
    {
        std::memset(block, 0, bytes);
    }
    void copy(std::byte* dst, const std::byte* src, std::size_t bytes) override
    {
        ++copies;
        std::memcpy(dst, src, bytes);
    }
    std::atomic<int> allocations { 0 }; // counted from every pipeline worker
    std::atomic<int> copies { 0 };
};

const std::shared_ptr<SealedMemory>& sealedMemory()
{
    static const auto memory = std::make_shared<SealedMemory>();
    return memory;
}

// The sealed device's host staging memory (a GPU's pinned memory): host memory, counted.
class StagingMemory final : public MemoryResource
{
public:
    [[nodiscard]] std::string_view name() const override
    {
        return "staging";
    }
    [[nodiscard]] bool hostAccessible() const override
    {
        return true;
    }
    [[nodiscard]] std::byte* allocate(std::size_t bytes) override
    {
        ++allocations;
        return hostMemory()->allocate(bytes);
    }
    void release(std::byte* block, std::size_t bytes) override
    {
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
    std::atomic<int> allocations { 0 };
};

const std::shared_ptr<StagingMemory>& stagingMemory()
{
    static const auto memory = std::make_shared<StagingMemory>();
    return memory;
}

// A host copy of a device value (an undefined or released one keeps only its shape).
NdArray toStaging(const NdArray& a, Allocator& staging)
{
    if (!a.defined())
        return a.resident() ? a : NdArray::shapeOnly(a.shape(), a.dtype());
    if (!a.resident())
        return NdArray::shapeOnly(a.shape(), a.dtype());
    return a.copyTo(staging);
}

std::vector<NdArray> toStaging(const std::vector<NdArray>& values, Allocator& staging)
{
    std::vector<NdArray> out;
    for (const auto& v : values)
        out.push_back(v.defined() || v.shape().empty() ? toStaging(v, staging) : v);
    return out;
}

std::vector<NdArray> toDevice(const std::vector<NdArray>& values, Allocator& device)
{
    std::vector<NdArray> out;
    for (const auto& v : values)
        out.push_back(v.resident() ? v.copyTo(device) : v);
    return out;
}

// The staged result written into a device array in place (optimizer updates, accumulation).
void writeBack(const NdArray& host, NdArray& device)
{
    device.memory().copy(device.data(), host.data(), static_cast<std::size_t>(device.bytes()));
}

void stagedForward(const Node& node, NodeValues& values, KernelContext& ctx)
{
    Allocator staging("staging");
    NodeValues host { toStaging(values.in, staging), toStaging(values.out, staging), toStaging(values.saved, staging) };
    KernelContext hostCtx { staging, ctx.rng, ctx.training };
    cpuBackend().kernels().find(node.op)->forward(node, host, hostCtx);
    values.out = toDevice(host.out, ctx.allocator);
    values.saved = toDevice(host.saved, ctx.allocator);
}

void stagedBackward(const Node& node, const NodeValues& values, BackwardArgs& args, KernelContext& ctx)
{
    Allocator staging("staging");
    const NodeValues host { toStaging(values.in, staging), toStaging(values.out, staging),
        toStaging(values.saved, staging) };
    const auto gradOut = toStaging(args.gradOut, staging);
    std::vector<NdArray> gradIn(args.gradIn.size());
    BackwardArgs hostArgs { gradOut, args.needGrad, gradIn };
    KernelContext hostCtx { staging, ctx.rng, ctx.training };
    cpuBackend().kernels().find(node.op)->backward(node, host, hostArgs, hostCtx);
    args.gradIn = toDevice(gradIn, ctx.allocator);
}

class SealedBackend final : public Backend
{
public:
    SealedBackend()
    {
        for (std::size_t op = 0; op < static_cast<std::size_t>(OpType::Opaque); ++op) {
            if (cpuBackend().supports(static_cast<OpType>(op)))
                m_kernels.add(static_cast<OpType>(op), OpKernel { stagedForward, stagedBackward });
        }
    }
    [[nodiscard]] std::string_view name() const override
    {
        return "sealed";
    }
    [[nodiscard]] const KernelTable& kernels() const override
    {
        return m_kernels;
    }
    [[nodiscard]] std::shared_ptr<MemoryResource> memory() const override
    {
        return sealedMemory();
    }
    [[nodiscard]] std::shared_ptr<MemoryResource> hostStaging() const override
    {
        return stagingMemory();
    }
    [[nodiscard]] NdArray zeros(Allocator& allocator, const Shape& shape, DType dtype) const override
    {
        return NdArray::zeros(allocator, shape, dtype);
    }
    [[nodiscard]] NdArray fromHost(
        Allocator& allocator, const Shape& shape, DType dtype, std::span<const std::byte> bytes) const override
    {
        return NdArray::fromBytes(allocator, shape, dtype, bytes);
    }
    [[nodiscard]] std::vector<std::byte> toHost(const NdArray& array) const override
    {
        return array.toBytes();
    }
    [[nodiscard]] NdArray copyTo(const NdArray& array, const Backend& /*target*/, Allocator& allocator) const override
    {
        return array.copyTo(allocator);
    }
    void accumulate(NdArray& dst, const NdArray& src) const override
    {
        Allocator staging("staging");
        auto d = dst.copyTo(staging);
        cpuBackend().accumulate(d, src.copyTo(staging));
        writeBack(d, dst);
    }
    [[nodiscard]] NdArray add(const NdArray& a, const NdArray& b, Allocator& allocator) const override
    {
        Allocator staging("staging");
        return cpuBackend().add(a.copyTo(staging), b.copyTo(staging), staging).copyTo(allocator);
    }
    void fill(NdArray& dst, float value) const override
    {
        Allocator staging("staging");
        auto d = dst.copyTo(staging);
        cpuBackend().fill(d, value);
        writeBack(d, dst);
    }
    void adamw(NdArray& param, const NdArray& grad, NdArray& m, NdArray& v, const AdamWUpdate& u) const override
    {
        Allocator staging("staging");
        auto p = param.copyTo(staging);
        auto hm = m.copyTo(staging);
        auto hv = v.copyTo(staging);
        cpuBackend().adamw(p, grad.copyTo(staging), hm, hv, u);
        writeBack(p, param);
        writeBack(hm, m);
        writeBack(hv, v);
    }
    void sgd(NdArray& param, const NdArray& grad, NdArray& momentum, const SgdUpdate& u) const override
    {
        Allocator staging("staging");
        auto p = param.copyTo(staging);
        auto hm = momentum.copyTo(staging);
        cpuBackend().sgd(p, grad.copyTo(staging), hm, u);
        writeBack(p, param);
        writeBack(hm, momentum);
    }

private:
    KernelTable m_kernels;
};

const SealedBackend& sealedBackend()
{
    static const SealedBackend backend;
    return backend;
}

std::vector<RuntimeDevice> sealedDevices(int count)
{
    auto devices = makeDevices("cpu:" + std::to_string(count), 0);
    for (auto& d : devices) {
        d.name = "sealed:" + d.name.substr(4);
        d.backend = &sealedBackend();
        d.memory = std::make_unique<Allocator>(d.name, 0, sealedBackend().memory());
    }
    return devices;
}

Graph gptForSeal(double dropout)
{
    auto c = zooPreset("gpt2-tiny");
    c.layers = 2;
    c.seq = 32;
    c.microBatch = 2;
    c.dropout = dropout;
    return buildZooModel(c);
}

RunConfig oneFOneB(const Graph& graph, bool memoryPlan)
{
    RunConfig c;
    c.schedule = parseScheduleSpec("1f1b", 2, 4);
    c.partition = evenCuts(graph, 2);
    c.optimizer.kind = "adamw";
    c.optimizer.lr = 3e-3;
    c.seed = 5;
    if (memoryPlan)
        c.memory = swapAndRecompute(graph, c.partition);
    return c;
}

std::vector<double> losses(TrainingRun& run, int steps)
{
    std::vector<double> out;
    for (int s = 0; s < steps; ++s)
        out.push_back(run.step().loss);
    return out;
}

} // namespace

TEST(SealedBackend, HostCodeCannotReadDeviceMemory)
{
    Allocator device("sealed:0", 0, sealedBackend().memory());
    const std::vector<float> values { 1.0F, 2.0F, 3.0F };
    auto a = sealedBackend().fromHost(device, { 3 }, DType::F32, std::as_bytes(std::span(values)));
    EXPECT_THROW((void)a.f32(), Error);
    EXPECT_EQ(asFloats(sealedBackend().toHost(a)), values);
    // Copies between host and device memory go through the device's resource.
    Allocator host("host");
    const int before = sealedMemory()->copies;
    const auto back = a.copyTo(host);
    EXPECT_GT(sealedMemory()->copies, before);
    EXPECT_FLOAT_EQ(back.f32()[2], 3.0F);
}

// The pipeline runtime on two sealed devices, with swaps to the host pool and recomputation,
// dropout on: the same losses as on two CPU devices, bit for bit (the same kernels ran).
TEST(SealedBackend, PipelineRuntimeNeverReadsDeviceBuffers)
{
    for (const bool memoryPlan : { false, true }) {
        SCOPED_TRACE(memoryPlan ? "swap and recompute" : "keep all");
        const auto graph = gptForSeal(0.1);
        const auto config = oneFOneB(graph, memoryPlan);
        TrainingRun cpu(graph, TokenData::random(256, 1 << 14, 3), makeDevices("cpu:2", 0), config);
        TrainingRun sealed(graph, TokenData::random(256, 1 << 14, 3), sealedDevices(2), config);
        const int copies = sealedMemory()->copies;
        const int staged = stagingMemory()->allocations;
        const auto want = losses(cpu, 3);
        const auto got = losses(sealed, 3);
        EXPECT_GT(sealedMemory()->copies, copies);
        if (memoryPlan) { // swapped activations wait in the backend's host staging memory
            EXPECT_GT(stagingMemory()->allocations, staged);
        }
        ASSERT_EQ(got.size(), want.size());
        for (std::size_t i = 0; i < want.size(); ++i)
            EXPECT_EQ(got[i], want[i]) << "step " << i + 1 << (memoryPlan ? " with swap and recompute" : "");
        for (auto id : cpu.runner().parameterIds())
            EXPECT_EQ(sealed.runner().parameterBytes(id), cpu.runner().parameterBytes(id)) << "tensor " << id.value;
    }
}

// The single-device executor (what `train` and the profiler run) on a sealed backend: forward,
// backward and the gradients, as on the CPU.
TEST(SealedBackend, ExecutorNeverReadsDeviceBuffers)
{
    const auto graph = gptForSeal(0.0);
    GraphExecutor cpu(graph, ExecutorOptions { 7, 0, true });
    GraphExecutor sealed(graph, ExecutorOptions { 7, 0, true }, sealedBackend());
    for (const auto& name : cpu.inputNames()) {
        const auto& t = *std::find_if(
            graph.tensors().begin(), graph.tensors().end(), [&](const Tensor& x) { return x.name == name; });
        std::vector<std::int64_t> ids(static_cast<std::size_t>(numElements(t.shape)));
        for (std::size_t i = 0; i < ids.size(); ++i)
            ids[i] = static_cast<std::int64_t>((i * 37 + 11) % 256);
        const auto bytes = std::as_bytes(std::span(ids));
        cpu.setInput(name, cpu.backend().fromHost(cpu.allocator(), t.shape, DType::I64, bytes));
        sealed.setInput(name, sealed.backend().fromHost(sealed.allocator(), t.shape, DType::I64, bytes));
    }
    EXPECT_EQ(sealed.forward(), cpu.forward());
    cpu.backward();
    sealed.backward();
    for (auto id : cpu.parameterIds())
        EXPECT_EQ(sealed.backend().toHost(sealed.gradient(id)), cpu.backend().toHost(cpu.gradient(id)))
            << graph.tensor(id).name;
}

// PatrickStar chunks step host-resident chunks with the CPU's Adam: on a device whose memory the
// host cannot read that is refused before training, naming the device.
TEST(SealedBackend, ChunkedParametersAreRefusedOnDeviceMemory)
{
    const auto graph = gptForSeal(0.0);
    auto config = oneFOneB(graph, false);
    config.chunks.enabled = true;
    try {
        TrainingRun run(graph, TokenData::random(256, 1 << 14, 3), sealedDevices(2), config);
        FAIL() << "expected a refusal";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("sealed:0"), std::string::npos) << e.what();
    }
}
