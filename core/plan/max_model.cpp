// The maximum-model-scale search of PatrickStar §9.2.1 and its two baselines.
#include "plan/max_model.h"

#include "graph/graph_summary.h"
#include "util/error.h"

#include <algorithm>
#include <map>

namespace ps {

std::string_view toString(TrainingSystem system)
{
    constexpr std::array kNames = { "pytorch-ddp", "zero-offload", "patrickstar" };
    return kNames[static_cast<std::size_t>(system)];
}

std::vector<ModelRung> patrickStarModelLadder(std::int64_t seq)
{
    struct Row
    {
        const char* label;
        std::int64_t layers;
        std::int64_t hidden;
        bool fromPaper;
    };
    constexpr std::array kRows = { Row { "1B", 20, 2048, true }, Row { "2B", 40, 2048, true },
        Row { "4B", 64, 2304, true }, Row { "6B", 53, 3072, true }, Row { "8B", 72, 3072, true },
        Row { "10B", 50, 4096, true }, Row { "12B", 60, 4096, true }, Row { "12B-65L", 65, 4096, true },
        Row { "16B", 80, 4096, false }, Row { "20B", 100, 4096, false }, Row { "24B", 120, 4096, false },
        Row { "28B", 140, 4096, false }, Row { "32B", 160, 4096, false } };
    std::vector<ModelRung> ladder;
    for (const auto& row : kRows) {
        ModelConfig c;
        c.name = std::string("gpt-") + row.label;
        c.family = ModelFamily::Gpt2;
        c.layers = row.layers;
        c.hidden = row.hidden;
        c.heads = 16; // §9.1: "16 heads" for every model
        c.seq = seq;
        c.maxPositions = std::max<std::int64_t>(1024, seq);
        c.microBatch = 1;
        ladder.push_back({ row.label, c, row.fromPaper });
    }
    return ladder;
}

namespace {

    // Non-model memory and compute of the baselines: every parameter on the GPU side.
    WarmupTrace baselineTrace(const Graph& graph, const Profile& profile, const ChunkPlanOptions& options)
    {
        return traceIteration(graph, profile, { options.microBatch, options.activationCheckpointing, false });
    }

    double computeNs(const WarmupTrace& trace)
    {
        double ns = 0;
        for (const auto& m : trace.moments)
            ns += m.computeNs;
        return ns;
    }

    // ZeRO-3 gathers the fp16 parameters of the layer it computes (and holds their gradients
    // until they are reduced): the largest layer, or the largest parameter outside layers.
    double largestGatheredElements(const Graph& graph)
    {
        // layer -> elements; a parameter outside layers is its own group, keyed -1 - tensor id.
        std::map<std::int64_t, double> byLayer;
        const auto owners = graph.parameterOwners();
        for (const auto& p : chunkParameters(graph, false).chunked) {
            const auto layer = graph.node(owners[p.tensor.index()]).layer;
            byLayer[layer != kNoLayer ? layer : -1 - static_cast<std::int64_t>(p.tensor.value)] +=
                static_cast<double>(p.elements);
        }
        double largest = 0;
        for (const auto& [layer, elements] : byLayer)
            largest = std::max(largest, elements);
        return largest;
    }

    void finish(SystemEstimate& e, const WarmupTrace& trace, double gpuCapacity, double hostCapacity)
    {
        e.tflopsPerGpu = trace.flops / e.time.totalNs() / 1e3;
        if (e.gpuPeakBytes > gpuCapacity)
            e.reason = "GPU: " + formatBytes(e.gpuPeakBytes) + " over " + formatBytes(gpuCapacity);
        else if (e.hostBytes > hostCapacity)
            e.reason = "host RAM: " + formatBytes(e.hostBytes) + " over " + formatBytes(hostCapacity);
        e.feasible = e.reason.empty();
    }

} // namespace

SystemEstimate estimateDdp(
    const Graph& graph, const Profile& profile, const Cluster& cluster, const ChunkPlanOptions& options)
{
    const auto trace = baselineTrace(graph, profile, options);
    const double params = static_cast<double>(graph.parameterCount());
    const int p = cluster.deviceCount();
    SystemEstimate e;
    e.system = TrainingSystem::PyTorchDdp;
    e.microBatch = options.microBatch;
    e.gpuPeakBytes = params * bytesPerParameter(profile.setup).total() + trace.peakNonModelBytes;
    e.time.computeNs = computeNs(trace);
    // All-reduce of the fp16 gradients: 2(p-1)/p x 2M bytes (ring).
    e.time.collectiveNs = 1e9 * 2.0 * (p - 1) / p * 2 * params / collectiveLink(cluster).bandwidth;
    e.time.gpuAdamNs = 1e9 * params * options.adamBytesPerParameter
        / (cluster.device.memoryBandwidth * options.gpuBandwidthEfficiency);
    finish(e, trace, options.usableGpuBytes(static_cast<double>(cluster.device.memoryBytes)),
        static_cast<double>(cluster.hostMemoryBytes));
    return e;
}

SystemEstimate estimateZeroOffload(
    const Graph& graph, const Profile& profile, const Cluster& cluster, const ChunkPlanOptions& options)
{
    const auto trace = baselineTrace(graph, profile, options);
    const double params = static_cast<double>(graph.parameterCount());
    const int p = cluster.deviceCount();
    const int ranksPerNode = std::min(p, cluster.devicesPerNode);
    SystemEstimate e;
    e.system = TrainingSystem::ZeroOffload;
    e.microBatch = options.microBatch;
    const double gathered = p > 1 ? 2.0 * 2 * largestGatheredElements(graph) : 0;
    e.gpuPeakBytes = (2.0 + 2.0) * params / p + gathered + trace.peakNonModelBytes;
    e.hostBytes = (kOptimizerChunkBytesPerParameter + 2) * params * ranksPerNode / p;
    // Every iteration: fp16 gradients down, updated fp16 parameters up (Figure 3's 4M bytes).
    e.cpuGpuBytes = 4 * params / p;
    e.time.computeNs = computeNs(trace);
    e.time.transferNs = 1e9 * e.cpuGpuBytes / cluster.device.hostLink.bandwidth;
    // §7: broadcast-based parameter gathering and gradient reduction, 10(p-1)/p x M bytes.
    e.time.collectiveNs = 1e9 * 10.0 * (p - 1) / p * params / collectiveLink(cluster).bandwidth;
    e.time.cpuAdamNs = 1e9 * params * ranksPerNode / p * options.adamBytesPerParameter / options.cpuAdamBytesPerSecond;
    finish(e, trace, options.usableGpuBytes(static_cast<double>(cluster.device.memoryBytes)),
        static_cast<double>(cluster.hostMemoryBytes));
    return e;
}

SystemEstimate estimatePatrickStar(
    const Graph& graph, const Profile& profile, const Cluster& cluster, const ChunkPlanOptions& options)
{
    const auto plan = planChunks(graph, profile, cluster, options);
    SystemEstimate e;
    e.system = TrainingSystem::PatrickStar;
    e.microBatch = options.microBatch;
    e.feasible = plan.feasible;
    e.reason = plan.reason;
    e.gpuPeakBytes = plan.gpuPeakBytes;
    e.hostBytes = plan.hostBytes;
    e.cpuGpuBytes = plan.cpuGpuBytes;
    e.time = plan.time;
    e.tflopsPerGpu = plan.tflopsPerGpu;
    return e;
}

namespace {

    SystemEstimate estimate(TrainingSystem system, const Graph& graph, const Profile& profile, const Cluster& cluster,
        const ChunkPlanOptions& options)
    {
        switch (system) {
        case TrainingSystem::PyTorchDdp:
            return estimateDdp(graph, profile, cluster, options);
        case TrainingSystem::ZeroOffload:
            return estimateZeroOffload(graph, profile, cluster, options);
        case TrainingSystem::PatrickStar:
            break;
        }
        return estimatePatrickStar(graph, profile, cluster, options);
    }

    // Fits and clears the bar > fits > does not fit; then throughput. Among misfits the first
    // (smallest) micro-batch is kept: it says why even the easiest case fails.
    bool better(const SystemEstimate& a, const SystemEstimate& b, double bar)
    {
        const auto rank = [bar](const SystemEstimate& e) { return e.feasible ? (e.tflopsPerGpu >= bar ? 2 : 1) : 0; };
        if (rank(a) != rank(b))
            return rank(a) > rank(b);
        return rank(a) > 0 && a.tflopsPerGpu > b.tflopsPerGpu;
    }

    SystemEstimate bestBatch(TrainingSystem system, const Graph& graph, const Profile& profile, const Cluster& cluster,
        const MaxModelRequest& request)
    {
        SystemEstimate best;
        bool first = true;
        for (const double b : request.microBatches) {
            auto options = request.options;
            options.microBatch = b;
            auto e = estimate(system, graph, profile, cluster, options);
            if (first || better(e, best, request.minTflopsPerGpu))
                best = std::move(e);
            first = false;
        }
        if (best.feasible && best.tflopsPerGpu < request.minTflopsPerGpu) {
            best.feasible = false;
            best.reason = "fits, but " + std::to_string(static_cast<int>(best.tflopsPerGpu))
                + " TFLOPS per GPU is under the " + std::to_string(static_cast<int>(request.minTflopsPerGpu))
                + " TFLOPS bar";
        }
        return best;
    }

    void checkRequest(const MaxModelRequest& r)
    {
        if (r.gpus < 1)
            throw Error("max model: needs at least one GPU, got " + std::to_string(r.gpus));
        if (r.hostMemoryBytes <= 0)
            throw Error("max model: the host memory must be positive");
        if (r.seq < 1)
            throw Error("max model: the sequence length must be positive");
        if (r.microBatches.empty())
            throw Error("max model: give at least one micro-batch size");
        for (const double b : r.microBatches) {
            if (b <= 0)
                throw Error("max model: micro-batch " + std::to_string(b) + " is not positive");
        }
    }

} // namespace

MaxModelResult findMaxModelScale(const MaxModelRequest& request)
{
    checkRequest(request);
    auto cluster = makeCluster(request.device, request.gpus);
    cluster.hostMemoryBytes = request.hostMemoryBytes;
    CostModelOptions cost;
    cost.setup = { Precision::Fp16, Optimizer::Adam }; // mixed-precision ADAM, as every system compared
    MaxModelResult result;
    for (const auto& rung : request.ladder.empty() ? patrickStarModelLadder(request.seq) : request.ladder) {
        const auto graph = buildZooModel(rung.config);
        const auto profile = estimateProfile(graph, request.device, cost);
        RungResult row { rung, graph.parameterCount(), {} };
        for (const auto system : kTrainingSystems) {
            const auto i = static_cast<std::size_t>(system);
            row.systems[i] = bestBatch(system, graph, profile, cluster, request);
            if (row.systems[i].feasible)
                result.largest[i] = static_cast<int>(result.rungs.size());
        }
        result.rungs.push_back(std::move(row));
    }
    return result;
}

} // namespace ps
