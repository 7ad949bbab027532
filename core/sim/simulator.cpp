#include "sim/simulator.h"

#include "sim/earliest_arrival.h"
#include "sim/shared_compute.h"
#include "sim/tied_exchange.h"
#include "util/error.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <utility>

namespace ps {
namespace {

    constexpr double kUnknown = -1;
    constexpr std::size_t kTiedWait = std::numeric_limits<std::size_t>::max(); // a waitKey no arrival has

    struct Channel
    {
        double freeAtNs = 0;
        const LinkSpec* link = nullptr;
        const BandwidthTrace* trace = nullptr;
    };

    class Simulator
    {
    public:
        // `slowdown[d][i]` stretches device d's action i (time-shared cores); nullptr: none.
        Simulator(const SimulationInput& in, const std::vector<std::vector<double>>* slowdown);
        SimulationResult run();
        [[nodiscard]] const Schedule& schedule() const
        {
            return m_schedule;
        }
        [[nodiscard]] const std::vector<sim::ComputeSpan>& computeSpans() const
        {
            return m_spans;
        }

    private:
        [[nodiscard]] std::size_t key(const Action& a) const
        {
            return a.stage.index() * m_microBatches + a.microBatch.index();
        }
        // Which arrival a blocked device waits for: forward and backward arrivals share keys.
        [[nodiscard]] std::size_t waitKey(const Action& a) const
        {
            const bool backward = a.type == ActionType::SendBackward || a.type == ActionType::RecvBackward;
            return 2 * key(a) + (backward ? 1 : 0) + 1;
        }
        [[nodiscard]] const StageCost& cost(StageId s) const
        {
            return m_in.stages[s.index()];
        }
        [[nodiscard]] StageMemoryPlan plan(StageId s) const
        {
            return s.index() < m_in.memoryPlans.size() ? m_in.memoryPlans[s.index()] : StageMemoryPlan {};
        }
        void setupChannels();
        Channel& channel(std::size_t from, std::size_t to);
        bool advance(std::size_t device); // runs until blocked; false if blocked at once
        bool execute(std::size_t device, const Action& a); // false: blocked
        void compute(std::size_t device, const Action& a, double durationNs, double readyNs = 0);
        void send(std::size_t device, const Action& a);
        void transfer(std::size_t device, const Action& a, StageId peer, double bytes);
        void countSenders();
        void copy(std::size_t device, const Action& a);
        double optimizerNs(StageId s) const;
        // When stage `s`'s tied gradients are summed (kUnknown: a holder has not handed in yet).
        double tiedReadyNs(std::size_t device, StageId s);
        void memory(std::size_t device, double timeNs, double delta, MemoryKind kind = MemoryKind::Activations);
        void finish(SimulationResult& result);

        const SimulationInput& m_in;
        Schedule m_schedule;
        std::size_t m_microBatches;
        std::vector<std::size_t> m_next;
        std::vector<double> m_computeFree, m_copyOutFree, m_copyInFree;
        std::vector<double> m_fwdArrival, m_bwdArrival, m_swapOutEnd, m_swapInEnd;
        std::vector<double> m_fwdMessage, m_bwdMessage; // bytes received and not yet taken in, by key
        // When each message can first be at its receiver (with messagesAtEarliest only).
        std::optional<sim::EarliestArrivals> m_earliest;
        // Sends still to arrive, by key: one along a chain; a dataflow partition's stage waits for
        // every producer (forward) and every consumer (backward) stage.
        std::vector<int> m_fwdPending, m_bwdPending;
        bool m_dataflow = false;
        std::vector<Channel> m_intra, m_inter;
        std::vector<std::size_t> m_waitingOn; // waitKey of the arrival a device waits for, 0 if none
        // Tied parameters (synchronous schedules): their holders, and when each stage's device
        // reached its first OPT_STEP and handed in its gradients.
        std::map<std::uint32_t, std::vector<std::size_t>> m_tiedHolders;
        std::vector<double> m_tiedArrival; // by stage
        std::vector<char> m_handedIn; // by device
        std::vector<std::vector<MemoryDelta>> m_memDeltas;
        // Parameter gradients exist from a stage's first weight-gradient pass to its OPT_STEP,
        // which frees them (PyTorch's zero_grad(set_to_none=True), and the engine's optimizer).
        std::vector<char> m_gradientsLive; // by stage
        void gradients(std::size_t device, StageId s, double timeNs, bool allocate);
        [[nodiscard]] bool gradientsLive(StageId s) const
        {
            return s.index() < m_gradientsLive.size() && m_gradientsLive[s.index()] != 0;
        }
        std::vector<double> m_busy;
        std::vector<SimEvent> m_events;
        const std::vector<std::vector<double>>* m_slowdown = nullptr;
        std::vector<sim::ComputeSpan> m_spans;
        std::vector<std::size_t> m_ready;
    };

    // Lowers communication and inserts the memory plan's swap/recompute actions when missing.
    Schedule prepare(const SimulationInput& in)
    {
        auto s = hasCommunication(in.schedule) || in.schedule.spec.stages == 1 ? in.schedule
                                                                               : withCommunication(in.schedule);
        const bool planned = std::any_of(in.memoryPlans.begin(), in.memoryPlans.end(),
            [](const StageMemoryPlan& p) { return p.swappedBytes > 0 || p.recomputedBytes > 0 || p.recomputeNs > 0; });
        return planned && !hasMemoryActions(s) ? withMemoryActions(s, in.memoryPlans) : s;
    }

    Simulator::Simulator(const SimulationInput& in, const std::vector<std::vector<double>>* slowdown)
        : m_in(in)
        , m_schedule(prepare(in))
        , m_microBatches(static_cast<std::size_t>(std::max(1, in.schedule.spec.microBatches)))
        , m_slowdown(slowdown)
    {
        const auto devices = m_schedule.devices.size();
        if (static_cast<int>(devices) > in.cluster.deviceCount())
            throw Error("simulation: the schedule needs " + std::to_string(devices) + " devices but the cluster has "
                + std::to_string(in.cluster.deviceCount()));
        if (in.stages.size() != static_cast<std::size_t>(in.schedule.spec.stages))
            throw Error("simulation: " + std::to_string(in.stages.size()) + " stage costs for a schedule of "
                + std::to_string(in.schedule.spec.stages) + " stages");
        const auto keys = static_cast<std::size_t>(in.schedule.spec.stages) * m_microBatches;
        m_next.assign(devices, 0);
        m_computeFree.assign(devices, 0);
        m_copyOutFree.assign(devices, 0);
        m_copyInFree.assign(devices, 0);
        m_busy.assign(devices, 0);
        m_waitingOn.assign(devices, 0);
        m_memDeltas.resize(devices);
        if (in.options.messagesAtEarliest)
            m_earliest.emplace(devices, keys);
        m_gradientsLive.assign(m_in.stages.size(), 0);
        m_fwdArrival.assign(keys, kUnknown);
        m_fwdMessage.assign(keys, 0.0);
        m_bwdMessage.assign(keys, 0.0);
        m_bwdArrival.assign(keys, kUnknown);
        countSenders();
        m_swapOutEnd.assign(keys, 0);
        m_swapInEnd.assign(keys, 0);
        m_events.reserve(m_schedule.actionCount());
        m_tiedArrival.assign(in.stages.size(), kUnknown);
        m_handedIn.assign(devices, 0);
        if (!m_schedule.asyncWeights()) { // PipeDream updates each copy by itself, as the engine does
            for (std::size_t st = 0; st < in.stages.size(); ++st) {
                for (const auto& t : in.stages[st].tiedParameters)
                    m_tiedHolders[t.tensor].push_back(st);
            }
        }
        setupChannels();
    }

    void Simulator::countSenders()
    {
        m_dataflow = std::any_of(m_in.stages.begin(), m_in.stages.end(),
            [](const StageCost& c) { return !c.forwardSends.empty() || !c.backwardSends.empty(); });
        m_fwdPending.assign(m_fwdArrival.size(), m_dataflow ? 0 : 1);
        m_bwdPending.assign(m_bwdArrival.size(), m_dataflow ? 0 : 1);
        if (!m_dataflow)
            return;
        for (const auto& c : m_in.stages) {
            for (std::size_t mb = 0; mb < m_microBatches; ++mb) {
                const MicroBatchId id(static_cast<std::uint32_t>(mb));
                for (const auto& s : c.forwardSends)
                    ++m_fwdPending[key({ ActionType::RecvForward, s.stage, id })];
                for (const auto& s : c.backwardSends)
                    ++m_bwdPending[key({ ActionType::RecvBackward, s.stage, id })];
            }
        }
    }

    void Simulator::setupChannels()
    {
        const auto& c = m_in.cluster;
        const auto devices = m_schedule.devices.size();
        m_intra.assign(devices * devices, Channel { 0, &c.intraNode, c.intraTrace ? &*c.intraTrace : nullptr });
        const auto nodes = static_cast<std::size_t>(c.nodes);
        const auto nics = static_cast<std::size_t>(std::max(1, c.nicsPerNode));
        m_inter.assign(nodes * nodes * nics, Channel { 0, &c.interNode, c.interTrace ? &*c.interTrace : nullptr });
    }

    Channel& Simulator::channel(std::size_t from, std::size_t to)
    {
        const auto& c = m_in.cluster;
        const auto nodeA = static_cast<std::size_t>(c.nodeOf(DeviceId(static_cast<std::uint32_t>(from))));
        const auto nodeB = static_cast<std::size_t>(c.nodeOf(DeviceId(static_cast<std::uint32_t>(to))));
        if (nodeA == nodeB)
            return m_intra[from * m_schedule.devices.size() + to];
        // One channel per NIC between two nodes: the sender's NIC, by its place in its node.
        const auto nics = static_cast<std::size_t>(std::max(1, c.nicsPerNode));
        const auto nic = (from % static_cast<std::size_t>(c.devicesPerNode)) % nics;
        return m_inter[(nodeA * static_cast<std::size_t>(c.nodes) + nodeB) * nics + nic];
    }

    void Simulator::memory(std::size_t device, double timeNs, double delta, MemoryKind kind)
    {
        // Without earliest arrivals, changes at one time keep the order made.
        const auto order = m_in.options.messagesAtEarliest ? 2 * std::uint64_t { m_next[device] } + 1 : 0;
        if (delta != 0)
            m_memDeltas[device].push_back({ timeNs, delta, kind, order });
    }

    void Simulator::gradients(std::size_t device, StageId s, double timeNs, bool allocate)
    {
        if (m_in.setup.gradientBuffers || s.index() >= m_gradientsLive.size()
            || (m_gradientsLive[s.index()] != 0) == allocate)
            return; // buffers: counted with the static bytes
        m_gradientsLive[s.index()] = allocate ? 1 : 0;
        const double bytes = static_cast<double>(cost(s).parameterCount) * bytesPerParameter(m_in.setup).gradients;
        memory(device, timeNs, allocate ? bytes : -bytes, MemoryKind::Gradients);
    }

    void Simulator::compute(std::size_t device, const Action& a, double durationNs, double readyNs)
    {
        if (m_slowdown != nullptr)
            durationNs *= (*m_slowdown)[device][m_next[device]];
        const double start = std::max(m_computeFree[device], readyNs);
        const double end = start + durationNs;
        m_spans.push_back({ device, m_next[device], start, end });
        m_computeFree[device] = end;
        m_busy[device] += durationNs;
        m_events.push_back({ DeviceId(static_cast<std::uint32_t>(device)), Stream::Compute, a.type, a.stage,
            a.microBatch, start, end, 0 });
        const auto& c = cost(a.stage);
        const auto p = plan(a.stage);
        const double wOnly = std::min(c.weightGradOnlyBytes, c.activationBytes);
        // Messages received: activations become the forward's own (counted in activationBytes
        // where a backward keeps them); gradients are part of the backward's working set.
        double received = 0;
        if (a.type == ActionType::Forward || a.type == ActionType::Backward || a.type == ActionType::BackwardInput) {
            received = std::exchange((a.type == ActionType::Forward ? m_fwdMessage : m_bwdMessage)[key(a)], 0.0);
        }
        switch (a.type) {
        case ActionType::Forward:
            // Counted when the forward that produces them finishes (transients are workspace);
            // the recomputed part is dropped right away and rebuilt before backward.
            memory(device, end, -received, MemoryKind::Messages);
            memory(device, end, c.activationBytes - p.recomputedBytes + p.keptInputBytes);
            break;
        case ActionType::Recompute:
            memory(device, start, p.recomputedBytes);
            break;
        case ActionType::Backward:
            memory(device, start, -received, MemoryKind::Messages);
            // Node by node a backward frees activations and fills gradients: counted at its end,
            // activations first (its peak is at its start, with everything still kept), the
            // gradients a first backward allocates as it goes beside its working set.
            if (!gradientsLive(a.stage)) {
                memory(device, start, c.firstBackwardExtraBytes, MemoryKind::Gradients);
                memory(device, end, -c.firstBackwardExtraBytes, MemoryKind::Gradients);
            }
            memory(device, end, -c.activationBytes - p.keptInputBytes);
            gradients(device, a.stage, end, true);
            break;
        case ActionType::BackwardInput: // keeps the output gradients W reads
            memory(device, start, -received, MemoryKind::Messages);
            memory(device, start, c.inputPassExtraBytes);
            memory(device, end, -c.inputPassExtraBytes);
            memory(device, end, -(c.activationBytes - wOnly) - p.keptInputBytes + c.weightGradHeldBytes);
            break;
        case ActionType::BackwardWeight: // its nodes' new parameter gradients while it runs
            memory(device, start, c.weightPassExtraBytes);
            memory(device, end, -c.weightPassExtraBytes);
            memory(device, end, -(wOnly + c.weightGradHeldBytes));
            gradients(device, a.stage, end, true);
            break;
        case ActionType::OptimizerStep:
            gradients(device, a.stage, end, false);
            break;
        default:
            break;
        }
    }

    void Simulator::send(std::size_t device, const Action& a)
    {
        const bool forward = a.type == ActionType::SendForward;
        const auto& c = cost(a.stage);
        if (!m_dataflow) { // along the chain
            const StageId peer(forward ? a.stage.value + 1 : a.stage.value - 1);
            transfer(device, a, peer, forward ? c.sendForwardBytes : c.sendBackwardBytes);
            return;
        }
        for (const auto& s : forward ? c.forwardSends : c.backwardSends)
            transfer(device, a, s.stage, s.bytes);
    }

    void Simulator::transfer(std::size_t device, const Action& a, StageId peer, double bytes)
    {
        const bool forward = a.type == ActionType::SendForward;
        const auto to = m_schedule.deviceOf(peer).index();
        double start = m_computeFree[device];
        double end = start;
        if (to != device && m_in.options.communication && bytes > 0) {
            auto& ch = channel(device, to);
            start = std::max(start, ch.freeAtNs);
            const double startS = start * 1e-9 + ch.link->latencySeconds;
            const double offset = m_in.options.traceOffsetSeconds;
            const double endS = ch.trace ? ch.trace->transferEnd(startS + offset, bytes, ch.link->bandwidth) - offset
                                         : startS + bytes / ch.link->bandwidth;
            end = endS * 1e9;
            ch.freeAtNs = end;
        }
        m_events.push_back({ DeviceId(static_cast<std::uint32_t>(device)), Stream::Send, a.type, a.stage, a.microBatch,
            start, end, bytes, DeviceId(static_cast<std::uint32_t>(to)) });
        const Action arrival { a.type, peer, a.microBatch };
        auto& arrivalNs = (forward ? m_fwdArrival : m_bwdArrival)[key(arrival)];
        arrivalNs = std::max(arrivalNs, end);
        --(forward ? m_fwdPending : m_bwdPending)[key(arrival)];
        // The receiver holds a copy from its arrival until the action that takes it in.
        (forward ? m_fwdMessage : m_bwdMessage)[key(arrival)] += bytes;
        // Counted from the timeline's arrival, or from the earliest any durations allow.
        if (m_in.options.messagesAtEarliest)
            m_earliest->sent(device, to, key(arrival), forward, end, bytes, m_next[to], m_in.options.timedPeak);
        else
            memory(to, end, bytes, MemoryKind::Messages);
        if (m_waitingOn[to] == waitKey(arrival)) {
            m_waitingOn[to] = 0;
            m_ready.push_back(to);
        }
    }

    void Simulator::copy(std::size_t device, const Action& a)
    {
        const auto p = plan(a.stage);
        const bool out = a.type == ActionType::SwapOut;
        auto& streamFree = out ? m_copyOutFree[device] : m_copyInFree[device];
        const double ready = out ? m_computeFree[device] : std::max(m_computeFree[device], m_swapOutEnd[key(a)]);
        const double start = std::max(streamFree, ready);
        const double end = start + 1e9 * p.swappedBytes / m_in.cluster.device.hostLink.bandwidth;
        streamFree = end;
        (out ? m_swapOutEnd : m_swapInEnd)[key(a)] = end;
        memory(device, out ? end : start, out ? -p.swappedBytes : p.swappedBytes);
        m_events.push_back(
            { DeviceId(static_cast<std::uint32_t>(device)), out ? Stream::CopyToHost : Stream::CopyFromHost, a.type,
                a.stage, a.microBatch, start, end, p.swappedBytes });
    }

    double Simulator::optimizerNs(StageId s) const
    {
        if (!m_in.options.optimizerStep)
            return 0;
        if (m_in.setup.optimizerNsPerParameter > 0) // measured with the profile
            return static_cast<double>(cost(s).parameterCount) * m_in.setup.optimizerNsPerParameter;
        // An elementwise update reads and writes every per-parameter byte once.
        const double bytes = 2 * static_cast<double>(cost(s).parameterCount) * bytesPerParameter(m_in.setup).total();
        return 1e9 * bytes / (m_in.cluster.device.memoryBandwidth * 0.7);
    }

    double Simulator::tiedReadyNs(std::size_t device, StageId s)
    {
        if (!m_handedIn[device]) { // the device's backwards are done: every stage on it hands in
            m_handedIn[device] = 1;
            const auto here = [&](std::size_t st) {
                return m_schedule.deviceOf(StageId(static_cast<std::uint32_t>(st))).index() == device;
            };
            double handedIn = m_computeFree[device]; // all its stages' deposits, before any sum
            for (std::size_t st = 0; st < m_tiedArrival.size(); ++st)
                handedIn += here(st) ? sim::tiedHandInNs(m_in.cluster.device, m_in.stages[st].tiedParameters) : 0;
            m_busy[device] += handedIn - m_computeFree[device];
            for (std::size_t st = 0; st < m_tiedArrival.size(); ++st)
                m_tiedArrival[st] = here(st) ? handedIn : m_tiedArrival[st];
            for (std::size_t d = 0; d < m_waitingOn.size(); ++d) {
                if (m_waitingOn[d] == kTiedWait) {
                    m_waitingOn[d] = 0;
                    m_ready.push_back(d);
                }
            }
        }
        double ready = 0;
        for (const auto& t : cost(s).tiedParameters) {
            const auto it = m_tiedHolders.find(t.tensor);
            if (it == m_tiedHolders.end())
                continue;
            for (auto holder : it->second) {
                if (m_tiedArrival[holder] == kUnknown)
                    return kUnknown;
                const auto other = m_schedule.deviceOf(StageId(static_cast<std::uint32_t>(holder))).index();
                const double exchangeNs = other != device && m_in.options.communication
                    ? sim::tiedLinkNs(m_in.cluster.device, *channel(other, device).link, t.gradientBytes)
                    : 0;
                ready = std::max(ready, m_tiedArrival[holder] + exchangeNs);
            }
        }
        return ready;
    }

    bool Simulator::execute(std::size_t device, const Action& a)
    {
        const auto& c = cost(a.stage);
        switch (a.type) {
        case ActionType::RecvForward:
        case ActionType::RecvBackward: {
            const bool forward = a.type == ActionType::RecvForward;
            if ((forward ? m_fwdPending : m_bwdPending)[key(a)] > 0) {
                m_waitingOn[device] = waitKey(a);
                return false;
            }
            // kUnknown (nothing was sent: a dataflow stage without producers) changes nothing.
            m_computeFree[device] = std::max(m_computeFree[device], (forward ? m_fwdArrival : m_bwdArrival)[key(a)]);
            if (m_earliest)
                m_earliest->received(device, key(a), forward);
            return true;
        }
        case ActionType::SendForward:
        case ActionType::SendBackward:
            send(device, a);
            return true;
        case ActionType::SwapOut:
        case ActionType::SwapIn:
            copy(device, a);
            return true;
        case ActionType::Forward:
            compute(device, a, c.forwardNs);
            return true;
        case ActionType::Recompute:
            compute(device, a, plan(a.stage).recomputeNs);
            return true;
        case ActionType::Backward:
            compute(device, a, c.backwardNs, m_swapInEnd[key(a)]);
            return true;
        case ActionType::BackwardInput:
            compute(device, a, c.backwardNs - c.weightGradNs, m_swapInEnd[key(a)]);
            return true;
        case ActionType::BackwardWeight:
            compute(device, a, c.weightGradNs);
            return true;
        case ActionType::OptimizerStep: {
            if (m_tiedHolders.empty()) {
                compute(device, a, optimizerNs(a.stage));
                return true;
            }
            const double ready = tiedReadyNs(device, a.stage);
            if (ready == kUnknown) {
                m_waitingOn[device] = kTiedWait;
                return false;
            }
            // The step starts when the device gets to it and includes its hand-in, the wait for the
            // others' and the sum, as the engine records it.
            const double start = m_computeFree[device];
            const double sumNs = sim::tiedSumNs(m_in.cluster.device, cost(a.stage).tiedParameters, m_tiedHolders);
            compute(device, a, optimizerNs(a.stage) + sumNs, ready);
            m_events.back().startNs = start;
            return true;
        }
        }
        return true;
    }

    bool Simulator::advance(std::size_t device)
    {
        const auto& list = m_schedule.devices[device];
        bool progressed = false;
        while (m_next[device] < list.size() && execute(device, list[m_next[device]])) {
            ++m_next[device];
            if (m_earliest)
                m_earliest->done(device, m_computeFree[device]);
            progressed = true;
        }
        return progressed;
    }

    SimulationResult Simulator::run()
    {
        for (std::size_t d = 0; d < m_schedule.devices.size(); ++d)
            m_ready.push_back(d);
        while (!m_ready.empty()) {
            const auto d = m_ready.back();
            m_ready.pop_back();
            advance(d);
        }
        for (std::size_t d = 0; d < m_schedule.devices.size(); ++d) {
            if (m_next[d] < m_schedule.devices[d].size())
                throw Error("simulation deadlocked: device " + std::to_string(d) + " waits forever at "
                    + formatAction(m_schedule.devices[d][m_next[d]]));
        }
        SimulationResult result;
        finish(result);
        return result;
    }

    void Simulator::finish(SimulationResult& r)
    {
        const auto& spec = m_schedule.spec;
        r.scheduleName = scheduleName(spec);
        r.stages = spec.stages;
        r.microBatches = spec.microBatches;
        r.microBatchSize = m_in.microBatchSize;
        double first = std::numeric_limits<double>::infinity();
        double last = 0;
        for (const auto& e : m_events) {
            first = std::min(first, e.startNs);
            last = std::max(last, e.endNs);
        }
        r.iterationNs = m_events.empty() ? 0 : last - first;
        r.steadyIterationNs = r.iterationNs;
        if (m_schedule.asyncWeights() && spec.microBatches > 1) {
            std::vector<double> backwardEnds; // stage 0's backward completions: one per micro-batch
            for (const auto& e : m_events) {
                if (e.stage.value == 0 && e.action == ActionType::Backward)
                    backwardEnds.push_back(e.endNs);
            }
            std::sort(backwardEnds.begin(), backwardEnds.end());
            const double spread =
                (backwardEnds.back() - backwardEnds.front()) * spec.microBatches / (spec.microBatches - 1);
            // With fewer micro-batches than stages in flight, stage 0's backwards come in one burst
            // after the fill; no steady state can beat the busiest device doing all M of its own.
            const double busiest = *std::max_element(m_busy.begin(), m_busy.end());
            r.steadyIterationNs = std::max(spread, busiest);
        }
        const auto memory = estimateDeviceMemory(m_schedule, m_in.stages, m_in.setup, m_in.memoryPlans);
        double busy = 0;
        for (std::size_t d = 0; d < m_schedule.devices.size(); ++d) {
            DeviceSimResult dev;
            dev.busyNs = m_busy[d];
            busy += m_busy[d];
            dev.capacityBytes = static_cast<double>(m_in.cluster.device.memoryBytes);
            dev.memory = memory[d];
            // Gradients are not static, unless held in buffers: they come and go with the deltas.
            const double base = memory[d].staticBytes() - (m_in.setup.gradientBuffers ? 0.0 : memory[d].gradients);
            const double start = first == std::numeric_limits<double>::infinity() ? 0 : first;
            const auto withMessages = [&](std::vector<MemoryDelta> deltas, bool timed) {
                return m_earliest ? m_earliest->withMessages(d, std::move(deltas), timed) : deltas;
            };
            if (m_in.options.timedPeak)
                dev.timedPeakBytes = walkMemory(withMessages(m_memDeltas[d], true), base, start).peakBytes;
            auto walk = walkMemory(withMessages(std::move(m_memDeltas[d]), false), base, start);
            dev.memoryCurve = std::move(walk.curve);
            dev.peakBytes = walk.peakBytes;
            dev.timedPeakBytes = m_in.options.timedPeak ? dev.timedPeakBytes : walk.peakBytes;
            dev.peakWithoutMessagesBytes = walk.peakWithoutMessagesBytes;
            dev.memory.gradients = m_in.setup.gradientBuffers ? memory[d].gradients : walk.gradientsAtPeak;
            dev.memory.messages = walk.messagesAtPeak;
            // The breakdown at the peak: what is neither static, gradients nor messages is activations.
            dev.memory.activations = std::max(0.0,
                dev.peakBytes - base - (m_in.setup.gradientBuffers ? 0.0 : dev.memory.gradients) - dev.memory.messages);
            dev.outOfMemory = dev.peakBytes > dev.capacityBytes;
            r.anyOutOfMemory = r.anyOutOfMemory || dev.outOfMemory;
            r.devices.push_back(std::move(dev));
        }
        const double span = r.iterationNs * static_cast<double>(m_schedule.devices.size());
        r.bubbleFraction = span > 0 ? 1.0 - busy / span : 0;
        const double perIteration = m_schedule.asyncWeights() ? r.steadyIterationNs : r.iterationNs;
        r.samplesPerSecond = perIteration > 0 ? 1e9 * spec.microBatches * m_in.microBatchSize / perIteration : 0;
        r.events = std::move(m_events);
    }

} // namespace

SimulationResult simulate(const SimulationInput& input)
{
    input.cluster.check();
    const auto groups = sim::coreGroups(
        static_cast<int>(input.schedule.devices.size()), input.cluster.devicesPerNode, input.cluster.device.cores);
    if (groups.empty()) {
        Simulator sim(input, nullptr);
        return sim.run();
    }
    // Time-shared cores: stretch each compute action by the sharing its interval saw, until the
    // stretches settle (half steps: a full step can swing between two orders of the actions).
    std::vector<std::vector<double>> slowdown;
    SimulationResult result;
    for (int round = 0; round < 40; ++round) {
        Simulator sim(input, slowdown.empty() ? nullptr : &slowdown);
        result = sim.run();
        if (slowdown.empty()) {
            for (const auto& list : sim.schedule().devices)
                slowdown.emplace_back(list.size(), 1.0);
        }
        const auto& spans = sim.computeSpans();
        const auto seen = sim::sharingSlowdowns(spans, groups);
        bool settled = true;
        for (std::size_t i = 0; i < spans.size(); ++i) {
            auto& f = slowdown[spans[i].device][spans[i].action];
            const double next = 0.5 * (f + seen[i]);
            settled = settled && std::abs(next - f) <= 1e-3 * f;
            f = next;
        }
        if (settled)
            break;
    }
    return result;
}

} // namespace ps
