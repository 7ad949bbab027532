// The CUDA backend's optimizer updates over kernel_math.h: SGD and AdamW on one parameter, and
// AdamW over every parameter of a stage in one launch, however many: their pointers and sizes go
// to the GPU as one table (engine/update_table.h), copied from a pinned host buffer on the legacy
// default stream ahead of the launch, so the update stays ordered after the backward that made
// the gradients. The buffers are one pair per GPU, kept for the process and grown as needed; the
// next caller on that GPU (the next step, or another virtual device of the same GPU) waits for the
// previous copy to leave the host buffer before writing it, which waits for the GPU work queued
// before that copy, and its own copy, queued after the previous launch on the same stream, cannot
// overwrite the table that launch reads. Each element finds its parameter by a binary search over
// the table's end offsets in global memory (cached: a few hundred entries).
#include "cuda/cuda_common.cuh"
#include "kernel_math.h"
#include "update_table.h"

#include <algorithm>
#include <memory>

namespace ps::engine::cuda {
namespace {

    __global__ void adamwKernel(float* w, const float* g, float* m, float* v, math::AdamWCoefficients c, long long n)
    {
        PS_FOR_EACH(i, n)
        math::adamwElement(w[i], g[i], m[i], v[i], c);
    }

    __global__ void adamwTableKernel(const void* table, int count, math::AdamWCoefficients c, long long total)
    {
        const auto t = updateTableAt(table, count);
        PS_FOR_EACH(e, total)
        {
            int s = 0;
            long long i = 0;
            t.locate(e, s, i);
            math::adamwElement(t.w[s][i], t.g[s][i], t.m[s][i], t.v[s][i], c);
        }
    }

    __global__ void sgdKernel(float* w, const float* g, float* m, math::SgdCoefficients c, long long n)
    {
        PS_FOR_EACH(i, n)
        math::sgdElement(w[i], g[i], m[i], c);
    }

    // A GPU's table buffers: `capacity` slots on the host (pinned) and on the device.
    struct TableBuffers
    {
        std::mutex mutex;
        std::uint64_t* host = nullptr;
        void* device = nullptr;
        std::size_t capacity = 0;
        cudaEvent_t copied = nullptr; // recorded after each copy out of `host`
        bool pending = false; // a copy was queued since `copied` was last waited on
    };

    TableBuffers& tableBuffers(int device)
    {
        static std::mutex mutex;
        static auto* buffers = new std::map<int, std::unique_ptr<TableBuffers>>(); // kept for the process
        const std::lock_guard lock(mutex);
        auto& b = (*buffers)[device];
        if (!b)
            b = std::make_unique<TableBuffers>();
        return *b;
    }

    // Room for `slots` slots (b.mutex held; b.host free to write on return).
    void reserve(TableBuffers& b, std::size_t slots, const std::string& gpu)
    {
        if (b.copied == nullptr)
            check(cudaEventCreateWithFlags(&b.copied, cudaEventDisableTiming), gpu + ": AdamW table event");
        if (b.pending)
            check(cudaEventSynchronize(b.copied), gpu + ": AdamW table copy");
        b.pending = false;
        if (slots <= b.capacity)
            return;
        const auto capacity = std::max(slots, 2 * b.capacity);
        // The launches that read the old table run on the legacy default stream: done before it goes.
        check(cudaStreamSynchronize(nullptr), gpu + ": AdamW before its table grows");
        if (b.device != nullptr)
            (void)cudaFree(b.device);
        if (b.host != nullptr)
            (void)cudaFreeHost(b.host);
        b.device = nullptr;
        b.host = nullptr;
        b.capacity = 0;
        const auto bytes = updateTableWords(capacity) * sizeof(std::uint64_t);
        void* host = nullptr;
        check(cudaMallocHost(&host, bytes), gpu + ": AdamW table (" + std::to_string(bytes) + " pinned bytes)");
        b.host = static_cast<std::uint64_t*>(host);
        check(cudaMalloc(&b.device, bytes), gpu + ": AdamW table (" + std::to_string(bytes) + " bytes)");
        b.capacity = capacity;
    }

} // namespace

void launchAdamW(float* w, const float* g, float* m, float* v, const math::AdamWCoefficients& c, std::int64_t n)
{
    if (n > 0)
        adamwKernel<<<blocksFor(n), kThreads>>>(w, g, m, v, c, n);
    checkLaunch("cuda adamw");
}

void launchAdamWAll(std::span<const UpdateSlot> slots, const math::AdamWCoefficients& c)
{
    long long total = 0;
    for (const auto& s : slots)
        total += s.n;
    if (total == 0)
        return;
    int device = 0;
    check(cudaGetDevice(&device), "cuda adamw");
    const auto gpu = "cuda:" + std::to_string(device);
    auto& b = tableBuffers(device);
    const std::lock_guard lock(b.mutex);
    reserve(b, slots.size(), gpu);
    packUpdateTable(slots, b.host);
    const auto bytes = updateTableWords(slots.size()) * sizeof(std::uint64_t);
    check(cudaMemcpyAsync(b.device, b.host, bytes, cudaMemcpyHostToDevice, nullptr), gpu + ": AdamW table copy");
    check(cudaEventRecord(b.copied, nullptr), gpu + ": AdamW table copy");
    b.pending = true;
    adamwTableKernel<<<blocksFor(total), kThreads>>>(b.device, static_cast<int>(slots.size()), c, total);
    checkLaunch(gpu + ": adamw over " + std::to_string(slots.size()) + " parameters");
}

void launchSgd(float* w, const float* g, float* m, const math::SgdCoefficients& c, std::int64_t n)
{
    if (n > 0)
        sgdKernel<<<blocksFor(n), kThreads>>>(w, g, m, c, n);
    checkLaunch("cuda sgd");
}

} // namespace ps::engine::cuda
