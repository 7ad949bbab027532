#include "cpu_profiler.h"

#include "cpu/gemm_team.h"
#include "cpu/kernels.h"
#include "cpu/thread_affinity.h"
#include "device_profiler.h"
#include "executor.h"
#include "graph/op_cost.h"
#include "optimizer.h"
#include "util/error.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace ps::profiler {
namespace {

    using Clock = std::chrono::steady_clock;

    double nanosSince(Clock::time_point start)
    {
        return std::chrono::duration<double, std::nano>(Clock::now() - start).count();
    }

    // Rows of the smallest embedding table an int input feeds (token ids must index it); 2 otherwise.
    std::int64_t idBound(const Graph& g, TensorId id)
    {
        std::int64_t bound = 0;
        for (const auto& n : g.nodes()) {
            if (n.op == OpType::Embedding && n.inputs[0] == id) {
                const auto rows = g.tensor(n.inputs[1]).shape[0];
                bound = bound == 0 ? rows : std::min(bound, rows);
            }
            if (n.op == OpType::CrossEntropy && n.inputs[1] == id) {
                const auto classes = g.tensor(n.inputs[0]).shape.back();
                bound = bound == 0 ? classes : std::min(bound, classes);
            }
        }
        return bound > 0 ? bound : 2;
    }

    // One training step: forward, and where the graph ends in a loss, backward and the update.
    void trainingStep(engine::GraphExecutor& ex, engine::Optimizer& adamw, bool trainable)
    {
        ex.zeroGrad();
        (void)ex.forward();
        if (trainable) {
            ex.backward();
            adamw.step();
        }
        ex.releaseActivations();
    }

    void feedRandomInputs(engine::GraphExecutor& ex, std::mt19937_64& rng)
    {
        const auto& g = ex.graph();
        for (const auto& t : g.tensors()) {
            if (t.kind != TensorKind::Input)
                continue;
            const bool isFloat = t.dtype == DType::F32 || t.dtype == DType::F64;
            const auto n = static_cast<std::size_t>(numElements(t.shape));
            if (isFloat) {
                std::normal_distribution<float> normal(0.0F, 1.0F);
                std::vector<float> host(n);
                for (auto& x : host)
                    x = normal(rng);
                ex.setInput(
                    t.name, ex.backend().fromHost(ex.allocator(), t.shape, DType::F32, std::as_bytes(std::span(host))));
            } else {
                std::uniform_int_distribution<std::int64_t> u(0, idBound(g, t.id) - 1);
                std::vector<std::int64_t> host(n);
                for (auto& x : host)
                    x = u(rng);
                ex.setInput(
                    t.name, ex.backend().fromHost(ex.allocator(), t.shape, DType::I64, std::as_bytes(std::span(host))));
            }
        }
    }

    engine::NdArray filled(const engine::Backend& backend, engine::Allocator& alloc, const Shape& shape, float value)
    {
        auto a = backend.zeros(alloc, shape);
        backend.fill(a, value);
        return a;
    }

    template <typename Fn> SampleStats timeRepeats(const CpuProfileOptions& o, Fn&& fn)
    {
        for (int i = 0; i < o.warmup; ++i)
            fn();
        std::vector<double> samples;
        for (int i = 0; i < o.repeats; ++i) {
            const auto start = Clock::now();
            fn();
            samples.push_back(nanosSince(start));
        }
        return summarizeSamples(std::move(samples));
    }

    void appendBatch(cupti::ActivityBatch& to, cupti::ActivityBatch got)
    {
        to.activities.insert(to.activities.end(), got.activities.begin(), got.activities.end());
        to.correlations.insert(to.correlations.end(), got.correlations.begin(), got.correlations.end());
        to.droppedRecords += got.droppedRecords;
    }

    // One traced range per node and pass of a step, numbered for the attribution.
    class StepObserver final : public engine::NodeObserver
    {
    public:
        StepObserver(ActivityTracer& tracer, std::vector<cupti::NodeLaunch>& launches, std::uint64_t& nextId)
            : m_tracer(tracer)
            , m_launches(launches)
            , m_nextId(nextId)
        {
        }
        void nodeBegin(NodeId node, bool backward) override
        {
            m_launches.push_back(
                { m_nextId, node.index(), backward ? cupti::Pass::Backward : cupti::Pass::Forward, repeat });
            m_tracer.push(m_nextId++);
        }
        void nodeEnd() override
        {
            m_tracer.pop();
        }
        int repeat = 0;

    private:
        ActivityTracer& m_tracer;
        std::vector<cupti::NodeLaunch>& m_launches;
        std::uint64_t& m_nextId;
    };

} // namespace

void HostClockTracer::push(std::uint64_t externalId)
{
    const auto now = Clock::now();
    const std::lock_guard lock(m_mutex);
    m_open[std::this_thread::get_id()].emplace_back(externalId, now);
}

namespace {
    std::uint64_t steadyNs(std::chrono::steady_clock::time_point t)
    {
        return static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
    }
} // namespace

void HostClockTracer::pop()
{
    const auto end = Clock::now();
    const std::lock_guard lock(m_mutex);
    auto& open = m_open[std::this_thread::get_id()];
    if (open.empty())
        throw Error("internal: profiler range popped without a push");
    const auto [id, start] = open.back();
    open.pop_back();
    const auto correlation = m_nextCorrelation++;
    m_batch.activities.push_back(
        { cupti::ActivityKind::Kernel, "host range", steadyNs(start), steadyNs(end), correlation, 0, 0, 0 });
    m_batch.correlations.push_back({ correlation, id });
}

cupti::ActivityBatch HostClockTracer::collect()
{
    const std::lock_guard lock(m_mutex);
    auto out = std::move(m_batch);
    m_batch = {};
    return out;
}

std::uint64_t HostClockTracer::timestampNs() const
{
    return steadyNs(Clock::now());
}

namespace {

    // Node times in place: whole steps with a range around each node's forward and backward (as
    // the PyTorch profiler or Nsight time ops), so each node runs with the caches, allocations and
    // gradient sums a real step gives it. What runs outside every node (the loss seed, the
    // optimizer) launches outside any range and is not a node's. Returns the optimizer's time per
    // step (no samples where there is no loss to train).
    SampleStats timeNodesInSteps(engine::GraphExecutor& ex, const engine::Backend& backend, ActivityTracer& tracer,
        int repeats, bool trainable, std::uint64_t& nextId, std::vector<cupti::NodeLaunch>& stepLaunches,
        cupti::ActivityBatch& stepBatch)
    {
        engine::Optimizer adamw(ex, engine::OptimizerConfig {});
        StepObserver observer(tracer, stepLaunches, nextId);
        std::vector<double> optimizerNs; // the step's update, timed on the host clock
        if (trainable) { // the first update allocates the optimizer's states: not a sample
            ex.zeroGrad();
            (void)ex.forward();
            ex.backward();
            adamw.step();
            ex.releaseActivations();
            backend.synchronize();
            (void)tracer.collect();
        }
        for (int r = 0; r < repeats; ++r) {
            observer.repeat = r;
            ex.setObserver(&observer);
            ex.zeroGrad();
            (void)ex.forward();
            if (trainable)
                ex.backward();
            ex.setObserver(nullptr);
            if (trainable) {
                backend.synchronize();
                const auto start = Clock::now();
                adamw.step();
                backend.synchronize();
                optimizerNs.push_back(nanosSince(start));
            }
            ex.releaseActivations();
            backend.synchronize();
            appendBatch(stepBatch, tracer.collect());
        }
        return optimizerNs.empty() ? SampleStats {} : summarizeSamples(std::move(optimizerNs));
    }

    // Each node alone, repeatedly, on the inputs a real forward pass gave it (its time in isolation,
    // for comparison) and its memory: new output bytes, saved state and transient workspace.
    std::vector<NodeMeasurement> measureNodesAlone(const Graph& graph, engine::GraphExecutor& ex,
        const engine::Backend& backend, ActivityTracer& tracer, const CpuProfileOptions& options, bool trainable,
        std::uint64_t& nextId, std::vector<cupti::NodeLaunch>& launches, cupti::ActivityBatch& batch,
        const std::function<void(std::size_t, std::size_t)>& progress)
    {
        const auto requiresGrad = tensorsRequiringGrad(graph);
        const auto costs = computeOpCosts(graph);
        ex.setFusion(false); // every tensor's value, a fused chain's inner ones too, as the nodes' inputs
        (void)ex.forward();
        backend.synchronize();
        (void)tracer.collect();
        auto& alloc = ex.allocator();
        std::mt19937_64 dropout(options.seed + 17);
        engine::KernelContext ctx { alloc, dropout, true, options.gemm };
        std::vector<NodeMeasurement> memory;
        // Runs `fn` warm-up times untraced, then `repeats` times each in its own range.
        const auto traced = [&](std::size_t node, cupti::Pass pass, const auto& fn) {
            for (int i = 0; i < options.warmup; ++i)
                fn();
            backend.synchronize();
            (void)tracer.collect(); // warm-up work is not a sample
            for (int r = 0; r < options.repeats; ++r) {
                launches.push_back({ nextId, node, pass, r });
                tracer.push(nextId++);
                fn();
                tracer.pop();
            }
            backend.synchronize();
            appendBatch(batch, tracer.collect());
        };
        for (const auto& node : graph.nodes()) {
            NodeMeasurement m;
            std::vector<engine::NdArray> inputs;
            for (auto in : node.inputs)
                inputs.push_back(ex.value(in));
            engine::NodeValues kept;
            traced(node.id.index(), cupti::Pass::Forward, [&] {
                engine::NodeValues v;
                v.in = inputs;
                const auto before = alloc.current();
                alloc.resetPeak();
                backend.forward(node, v, ctx);
                const auto retained = alloc.current() - before;
                m.savedBytes = 0;
                for (const auto& s : v.saved)
                    m.savedBytes += s.bytes();
                m.outputBytes = std::max<std::int64_t>(0, retained - m.savedBytes);
                m.workspaceBytes = alloc.peak() - alloc.current();
                kept = std::move(v);
            });
            std::vector<bool> need;
            bool any = false;
            for (auto in : node.inputs) {
                need.push_back(requiresGrad[in.index()]);
                any = any || requiresGrad[in.index()];
            }
            if (any && trainable) {
                std::vector<engine::NdArray> gradOut;
                for (const auto& out : kept.out)
                    gradOut.push_back(filled(backend, alloc, out.shape(), 1e-3F));
                traced(node.id.index(), cupti::Pass::Backward,
                    [&] { (void)backend.backward(node, kept, gradOut, need, ctx); });
            }
            // Saved for backward: the activations the op formulas keep (inputs or outputs, counted as the
            // analytical profile counts them) plus what the kernel really stored besides them.
            const auto& cost = costs[node.id.index()];
            m.savedBytes += cost.savedBytes - cost.savedExtraBytes;
            memory.push_back(m);
            if (progress)
                progress(memory.size(), graph.nodeCount());
        }
        return memory;
    }

} // namespace

CpuProfileRun measureOnDevice(const Graph& graph, const engine::Backend& backend, ActivityTracer& tracer,
    const CpuProfileOptions& options, const std::function<void(std::size_t, std::size_t)>& progress,
    std::vector<std::string>* warnings)
{
    if (options.repeats < 1 || options.warmup < 0)
        throw Error("profiling needs at least one repeat");
    engine::GraphExecutor ex(graph, engine::ExecutorOptions { options.seed, 0, true, options.gemm }, backend);
    std::mt19937_64 rng(options.seed + 11);
    feedRandomInputs(ex, rng);
    const bool trainable = !graph.outputs().empty() && graph.tensor(graph.outputs().front()).shape.empty();

    // Whole steps first (the reference the per-node sum is checked against), on the host clock
    // with the device drained after each.
    SampleStats stepNs;
    {
        engine::Optimizer adamw(ex, engine::OptimizerConfig {});
        stepNs = timeRepeats(options, [&] {
            trainingStep(ex, adamw, trainable);
            backend.synchronize();
        });
    }
    const auto stepPeak = ex.allocator().peak();
    (void)tracer.collect(); // the timed steps' records: not per node

    std::vector<cupti::NodeLaunch> stepLaunches;
    cupti::ActivityBatch stepBatch;
    std::uint64_t nextId = 1;
    const auto optimizerStats =
        timeNodesInSteps(ex, backend, tracer, options.repeats, trainable, nextId, stepLaunches, stepBatch);

    std::vector<cupti::NodeLaunch> launches;
    cupti::ActivityBatch batch;
    const auto memory =
        measureNodesAlone(graph, ex, backend, tracer, options, trainable, nextId, launches, batch, progress);
    // Stored times are the in-place ones; the isolated ones stay beside them for the report.
    const auto inPlace = cupti::attribute(graph.nodeCount(), stepBatch, stepLaunches);
    const auto isolated = cupti::attribute(graph.nodeCount(), batch, launches);
    if (warnings != nullptr) {
        *warnings = isolated.warnings;
        if (inPlace.droppedRecords > 0) // work outside the nodes is expected in a step, not a warning
            warnings->push_back(inPlace.warnings.front());
    }
    auto run = cupti::toProfileRun(inPlace, graph.info().microBatch, memory);
    run.isolatedSumNs = cupti::toProfileRun(isolated, graph.info().microBatch, memory).nodeSumNs;
    run.outsideNodesNs = inPlace.unattributedNs / std::max(1, options.repeats);
    run.stepNs = stepNs;
    run.optimizerNs = optimizerStats;
    run.stepPeakBytes = stepPeak;
    return run;
}

namespace {

    // Training steps of a graph run over and over on threads of their own, each pinned to its cores
    // (a GemmTeam over them where there are several), until destroyed: the load the other devices of
    // a pipeline put on the machine while one device is profiled.
    class CoRunners
    {
    public:
        CoRunners(const Graph& graph, const std::vector<std::vector<int>>& coreSets, std::uint64_t seed)
        {
            try {
                for (std::size_t i = 0; i < coreSets.size(); ++i)
                    m_threads.emplace_back(
                        [this, &graph, cores = coreSets[i], seed = seed + 101 * (i + 1)] { run(graph, cores, seed); });
            } catch (...) { // no thread for the next: stop those started
                stopAll();
                throw;
            }
            std::unique_lock lock(m_mutex); // each has allocated and run one step before the measurement
            m_ready.wait(lock, [&] { return m_started == m_threads.size(); });
        }
        ~CoRunners()
        {
            stopAll();
        }
        CoRunners(const CoRunners&) = delete;
        CoRunners& operator=(const CoRunners&) = delete;

    private:
        void stopAll()
        {
            m_stop = true;
            for (auto& t : m_threads)
                t.join();
        }
        void run(const Graph& graph, const std::vector<int>& cores, std::uint64_t seed)
        {
            engine::pinCurrentThread(cores);
            bool started = false;
            try {
                std::unique_ptr<engine::GemmTeam> team;
                if (cores.size() > 1)
                    team = std::make_unique<engine::GemmTeam>(cores);
                const engine::GemmTeamScope scope(team.get());
                engine::GraphExecutor ex(graph, engine::ExecutorOptions { seed, 0, true }, engine::cpuBackend());
                std::mt19937_64 rng(seed);
                feedRandomInputs(ex, rng);
                const bool trainable = !graph.outputs().empty() && graph.tensor(graph.outputs().front()).shape.empty();
                engine::Optimizer adamw(ex, engine::OptimizerConfig {});
                do {
                    trainingStep(ex, adamw, trainable);
                    if (!started)
                        markStarted(started);
                } while (!m_stop);
            } catch (...) { // the measured copy fails the same way and reports it
            }
            if (!started)
                markStarted(started);
        }
        void markStarted(bool& started)
        {
            started = true;
            {
                const std::lock_guard lock(m_mutex);
                ++m_started;
            }
            m_ready.notify_all();
        }

        std::atomic<bool> m_stop { false };
        std::mutex m_mutex;
        std::condition_variable m_ready;
        std::size_t m_started = 0;
        std::vector<std::thread> m_threads; // last: they start once the members above exist
    };

    // Pins the calling thread to `cores` for its lifetime (none: leaves it), then restores it.
    class PinnedFor
    {
    public:
        explicit PinnedFor(const std::vector<int>& cores)
        {
            if (!cores.empty()) {
                m_restore = engine::currentThreadCores();
                engine::pinCurrentThread(cores);
            }
        }
        ~PinnedFor()
        {
            engine::pinCurrentThread(m_restore);
        }
        PinnedFor(const PinnedFor&) = delete;
        PinnedFor& operator=(const PinnedFor&) = delete;

    private:
        std::vector<int> m_restore; // empty: unchanged
    };

} // namespace

int coRunnersFor(int threads, int cores)
{
    return threads > 0 && cores > threads ? cores / threads - 1 : 0;
}

std::int64_t trainingStepBytesBound(const Graph& graph)
{
    std::int64_t bytes = 0;
    for (const auto& t : graph.tensors()) {
        const bool isFloat =
            t.dtype == DType::F32 || t.dtype == DType::F64 || t.dtype == DType::F16 || t.dtype == DType::BF16;
        const auto engineBytes = numElements(t.shape) * (isFloat ? 4 : 8);
        bytes += (t.kind == TensorKind::Parameter ? 8 : 2) * engineBytes;
    }
    for (const auto& c : computeOpCosts(graph))
        bytes += c.savedExtraBytes + c.workspaceBytes + c.backwardWorkspaceBytes + c.fixedWorkspaceBytes;
    return bytes;
}

int coRunnersThatFit(const Graph& graph, int wanted, std::int64_t memoryBytes)
{
    if (wanted <= 0 || memoryBytes <= 0)
        return std::max(wanted, 0);
    const auto each = std::max<std::int64_t>(1, trainingStepBytesBound(graph));
    return static_cast<int>(std::min<std::int64_t>(wanted, memoryBytes / 2 / each));
}

namespace {

    // The first number in `path` (or after `key` where one is given), times `unit`; -1 where none.
    std::int64_t readNumber(const std::string& path, const std::string& key = {}, std::int64_t unit = 1)
    {
        std::ifstream in(path);
        std::string word;
        while (in >> word) {
            if (!key.empty() && word != key)
                continue;
            std::string value = word;
            if (!key.empty() && !(in >> value))
                return -1;
            try {
                return std::stoll(value) * unit;
            } catch (const std::exception&) {
                return -1; // "max": no limit
            }
        }
        return -1;
    }

} // namespace

std::int64_t availableMemoryBytes()
{
    std::int64_t available = readNumber("/proc/meminfo", "MemAvailable:", 1024);
    const auto keep = [&available](std::int64_t limit, std::int64_t used) {
        if (limit > 0 && used >= 0)
            available = available < 0 ? limit - used : std::min(available, limit - used);
    };
    keep(readNumber("/sys/fs/cgroup/memory.max"), readNumber("/sys/fs/cgroup/memory.current"));
    keep(readNumber("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
        readNumber("/sys/fs/cgroup/memory/memory.usage_in_bytes"));
    return std::max<std::int64_t>(available, 0);
}

CpuProfileRun measureOnCpu(
    const Graph& graph, const CpuProfileOptions& options, const std::function<void(std::size_t, std::size_t)>& progress)
{
    // As a training device runs: OpenBLAS on one thread, GEMMs and the vector loops split over a
    // team of the first `threads` allowed cores (all of them for 0).
    auto cores = engine::allowedCores();
    if (options.threads > 0 && static_cast<std::size_t>(options.threads) < cores.size())
        cores.resize(static_cast<std::size_t>(options.threads));
    engine::setComputeThreads(1);
    std::vector<std::vector<int>> others; // the co-runners' cores, `threads` each
    const auto all = engine::allowedCores();
    const auto per = std::max<std::size_t>(1, cores.size());
    for (std::size_t at = cores.size(); at + per <= all.size() && static_cast<int>(others.size()) < options.coRunners;
         at += per)
        others.emplace_back(
            all.begin() + static_cast<std::ptrdiff_t>(at), all.begin() + static_cast<std::ptrdiff_t>(at + per));
    const CoRunners load(graph, others, options.seed);
    // Beside co-runners a single-thread measurement keeps to its own core (a team pins itself).
    const PinnedFor pinned(!others.empty() && cores.size() == 1 ? cores : std::vector<int> {});
    std::unique_ptr<engine::GemmTeam> team;
    if (cores.size() > 1)
        team = std::make_unique<engine::GemmTeam>(cores);
    const engine::GemmTeamScope scope(team.get());
    HostClockTracer tracer;
    auto run = measureOnDevice(graph, engine::cpuBackend(), tracer, options, progress);
    run.coRunners = static_cast<int>(others.size());
    return run;
}

Profile toProfile(const Graph& graph, const CpuProfileRun& a, const CpuProfileRun& b)
{
    if (a.nodes.size() != graph.nodeCount() || b.nodes.size() != graph.nodeCount())
        throw Error("profile runs do not match the graph's " + std::to_string(graph.nodeCount()) + " nodes");
    const auto costs = computeOpCosts(graph);
    Profile p;
    p.deviceKind = "cpu";
    p.source = "measured-cpu";
    const auto ma = static_cast<double>(a.microBatch);
    const auto mb = static_cast<double>(b.microBatch);
    const auto line = [&](double va, double vb) {
        return ma == mb ? LinearModel { 0, va / ma } : LinearModel::through(ma, va, mb, vb);
    };
    for (std::size_t i = 0; i < graph.nodeCount(); ++i) {
        const auto& x = a.nodes[i];
        const auto& y = b.nodes[i];
        NodeProfile n;
        n.forwardNs = line(x.forwardNs.median, y.forwardNs.median);
        const double bx = x.backwardNs.count > 0 ? x.backwardNs.median : 0.0;
        const double by = y.backwardNs.count > 0 ? y.backwardNs.median : 0.0;
        n.backwardNs = line(bx, by);
        const double share = costs[i].backwardFlops > 0 ? costs[i].weightGradFlops / costs[i].backwardFlops : 0.0;
        n.weightGradNs = line(bx * share, by * share);
        n.outputBytes = line(static_cast<double>(x.outputBytes), static_cast<double>(y.outputBytes));
        n.savedBytes = line(static_cast<double>(x.savedBytes), static_cast<double>(y.savedBytes));
        n.workspaceBytes = line(static_cast<double>(x.workspaceBytes), static_cast<double>(y.workspaceBytes));
        n.parameterCount = costs[i].parameterCount;
        p.nodes.push_back(n);
    }
    // The optimizer's time per parameter, from the run at the larger micro-batch (it does not
    // depend on the micro-batch; the later run is the warmer one).
    std::int64_t parameters = 0;
    for (const auto& t : graph.tensors())
        parameters += t.kind == TensorKind::Parameter ? numElements(t.shape) : 0;
    if (b.optimizerNs.count > 0 && parameters > 0)
        p.setup.optimizerNsPerParameter = b.optimizerNs.median / static_cast<double>(parameters);
    return p;
}

} // namespace ps::profiler
