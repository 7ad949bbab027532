#include "runtime/stage_executor.h"

#include "graph/op_cost.h"
#include "runtime/stage_micro_batch.h"
#include "util/error.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <utility>

namespace ps::engine {

namespace {

    std::uint64_t mix(std::uint64_t x)
    {
        x += 0x9E3779B97F4A7C15ULL; // splitmix64
        x = (x ^ (x >> 30U)) * 0xBF58476D1CE4E5B9ULL;
        x = (x ^ (x >> 27U)) * 0x94D049BB133111EBULL;
        return x ^ (x >> 31U);
    }

} // namespace

StageExecutor::StageExecutor(const Graph& graph, StageId id, std::size_t begin, std::size_t end, const Backend& backend,
    Allocator& device, Allocator& hostPool, StageMemoryPlan memory, std::uint64_t seed)
    : m_graph(graph)
    , m_id(id)
    , m_begin(begin)
    , m_end(end)
    , m_backend(backend)
    , m_device(device)
    , m_hostPool(hostPool)
    , m_memory(std::move(memory))
    , m_seed(seed)
{
    if (begin >= end || end > graph.nodeCount())
        throw Error("stage " + std::to_string(id.value) + ": empty or out-of-range node range [" + std::to_string(begin)
            + ", " + std::to_string(end) + ")");
    m_requiresGrad = tensorsRequiringGrad(graph);
    m_slot.assign(graph.tensorCount(), -1);
    m_paramIndex.assign(graph.tensorCount(), -1);
    const auto addSlot = [&](TensorId t) {
        if (m_slot[t.index()] < 0) {
            m_slot[t.index()] = static_cast<int>(m_slotTensor.size());
            m_slotTensor.push_back(t);
        }
    };
    for (std::size_t n = begin; n < end; ++n) {
        const auto& node = graph.nodes()[n];
        if (!backend.supports(node.op))
            throw Error("stage " + std::to_string(id.value) + ": node '" + node.name + "' (" + node.opaqueType
                + ") has no " + std::string(backend.name()) + " kernel: the engine cannot train this graph");
        for (auto t : node.inputs)
            addSlot(t);
        for (auto t : node.outputs)
            addSlot(t);
    }
    buildBoundaries();
    for (auto t : m_boundaryIn)
        addSlot(t);
    m_roots.resize(graph.tensorCount());
    for (auto t : m_slotTensor)
        m_roots[t.index()] = storageRoot(graph, t);
    std::vector<TensorId> sorted = m_slotTensor;
    std::sort(sorted.begin(), sorted.end());
    m_constants.resize(m_slotTensor.size());
    for (auto t : sorted) {
        const auto& tensor = graph.tensor(t);
        if (tensor.kind == TensorKind::Parameter) {
            m_paramIndex[t.index()] = static_cast<int>(m_paramIds.size());
            m_paramIds.push_back(t);
        } else if (tensor.kind == TensorKind::Input) {
            m_dataInputs.push_back(t);
        } else if (tensor.kind == TensorKind::Constant) {
            loadConstant(t);
        }
    }
    m_params.resize(m_paramIds.size());
    m_grads.resize(m_paramIds.size());
    if (!graph.outputs().empty()) {
        const auto loss = graph.outputs().front();
        const auto producer = graph.tensor(loss).producer;
        if (producer.valid() && producer.index() >= begin && producer.index() < end)
            m_lossSlot = slotOf(loss);
    }
    buildKeepSets();
    // Recomputes re-run node by node from inputs a fused chain never makes.
    m_fusion = FusionPlan(graph, begin, end, backend, m_memory.recomputedTensors);
    // A GEMM + bias chain never stores the product: where a backward would read it, it runs apart.
    for (const auto chain : std::vector(m_fusion.gemmChains())) {
        if (m_keepOut[chain.matmul - begin][0] != 0 || m_keepIn[chain.add - begin][chain.productInput] != 0)
            m_fusion.dropGemmChain(chain.matmul);
    }
    m_device.setOwner("");
}

StageExecutor::~StageExecutor() = default;

StageExecutor::MicroBatch& StageExecutor::state(MicroBatchId mb, const char* action)
{
    const auto it = m_microBatches.find(mb.value);
    if (it == m_microBatches.end())
        throw Error("stage " + std::to_string(m_id.value) + ": " + action + " of micro-batch "
            + std::to_string(mb.value) + " before its forward");
    return it->second;
}

std::mt19937_64& StageExecutor::rngFor(MicroBatchId mb, const Node& node)
{
    // Dropout's mask is the one draw a kernel makes (Attention runs Dropout's kernel on its
    // probabilities); seeding an engine for every other node only cost time.
    if (node.op != OpType::Dropout && node.op != OpType::Attention)
        return m_idleRng;
    m_nodeRng.seed(nodeSeed(mb, node.id));
    return m_nodeRng;
}

std::uint64_t StageExecutor::nodeSeed(MicroBatchId mb, NodeId node) const
{
    return mix(mix(mix(m_seed ^ mix(static_cast<std::uint64_t>(m_iteration))) ^ mb.value) ^ node.value);
}

const NdArray& StageExecutor::forwardInput(const MicroBatch& s, const Node& node, TensorId in) const
{
    const auto p = m_paramIndex[in.index()];
    const auto& value = p >= 0                            ? m_params[static_cast<std::size_t>(p)]
        : m_graph.tensor(in).kind == TensorKind::Constant ? m_constants[static_cast<std::size_t>(slotOf(in))]
                                                          : s.values[static_cast<std::size_t>(slotOf(in))];
    if (!value.defined())
        throw Error("stage " + std::to_string(m_id.value) + ": node '" + node.name + "' reads '"
            + m_graph.tensor(in).name + "', which has no value (not received or not fed)");
    return value;
}

void StageExecutor::receiveActivations(MicroBatchId mb, std::vector<NdArray> values)
{
    auto& s = m_microBatches[mb.value];
    s.values.resize(m_slotTensor.size());
    if (values.size() != m_boundaryIn.size())
        throw Error("stage " + std::to_string(m_id.value) + " received " + std::to_string(values.size())
            + " activations, expected " + std::to_string(m_boundaryIn.size()));
    for (std::size_t k = 0; k < values.size(); ++k)
        s.values[static_cast<std::size_t>(slotOf(m_boundaryIn[k]))] = std::move(values[k]);
}

void StageExecutor::loadDataInputs(MicroBatch& s, const HostBatch& batch)
{
    m_device.setOwner("input batch");
    for (auto t : m_dataInputs) {
        const auto& tensor = m_graph.tensor(t);
        const auto missing = [&] {
            return Error("stage " + std::to_string(m_id.value) + ": the data has no "
                + std::string(toString(tensor.dtype)) + " input '" + tensor.name + "' of " + formatShape(tensor.shape));
        };
        const auto named = [&](const auto& in) { return in.first == tensor.name; };
        auto& value = s.values[static_cast<std::size_t>(slotOf(t))];
        const bool floating = tensor.dtype == DType::F32 || tensor.dtype == DType::F64 || tensor.dtype == DType::F16
            || tensor.dtype == DType::BF16;
        if (!floating) { // integers and bools travel as int64
            const auto it = std::find_if(batch.inputs.begin(), batch.inputs.end(), named);
            if (it == batch.inputs.end() || static_cast<std::int64_t>(it->second.size()) != numElements(tensor.shape))
                throw missing();
            value = m_backend.fromHost(m_device, tensor.shape, DType::I64, std::as_bytes(std::span(it->second)));
        } else {
            const auto it = std::find_if(batch.floatInputs.begin(), batch.floatInputs.end(), named);
            if (it == batch.floatInputs.end()
                || static_cast<std::int64_t>(it->second.size()) != numElements(tensor.shape))
                throw missing();
            value = m_backend.fromHost(m_device, tensor.shape, DType::F32, std::as_bytes(std::span(it->second)));
        }
    }
    m_device.setOwner("");
}

void StageExecutor::forward(MicroBatchId mb, const HostBatch& batch)
{
    auto& s = m_microBatches[mb.value];
    if (s.forwardDone)
        throw Error("stage " + std::to_string(m_id.value) + ": second forward of micro-batch "
            + std::to_string(mb.value) + " before its backward");
    const MemoryUseScope use(MemoryUse::Activations);
    s.values.resize(m_slotTensor.size());
    for (auto t : m_boundaryIn) { // received messages become the stage's inputs
        auto& v = s.values[static_cast<std::size_t>(slotOf(t))];
        if (v.defined())
            v.relabel(MemoryUse::Activations);
    }
    loadDataInputs(s, batch);
    s.nodes.assign(m_end - m_begin, NodeValues());
    startChunkAction();
    for (std::size_t n = m_begin; n < m_end; ++n) {
        const auto& node = m_graph.nodes()[n];
        auto& nv = s.nodes[n - m_begin];
        if (const auto* gemm = m_chunks ? nullptr : m_fusion.gemmChainOf(n)) {
            if (n == gemm->matmul)
                forwardGemmChain(s, *gemm);
            for (auto slot : m_releaseAfter[n - m_begin])
                s.values[static_cast<std::size_t>(slot)] = NdArray();
            continue;
        }
        if (const auto* chain = m_fusion.chainOf(n)) {
            if (n == chain->head)
                forwardChain(s, mb, *chain);
            for (auto slot : m_releaseAfter[n - m_begin])
                s.values[static_cast<std::size_t>(slot)] = NdArray();
            continue;
        }
        for (auto in : node.inputs)
            nv.in.push_back(forwardInput(s, node, in));
        KernelContext ctx { m_device, rngFor(mb, node), true, m_gemm };
        const NodeAccess access(*this, n - m_begin);
        m_backend.forward(node, nv, ctx);
        for (std::size_t i = 0; i < node.outputs.size(); ++i)
            s.values[static_cast<std::size_t>(slotOf(node.outputs[i]))] = nv.out[i];
        // Release as we go what no backward reads: this node's unsaved inputs and outputs, and
        // values whose last reader in the stage this was (their storage goes back right away).
        const auto local = n - m_begin;
        for (std::size_t j = 0; j < nv.in.size(); ++j) {
            if (m_keepIn[local][j] == 0)
                nv.in[j] = NdArray::shapeOnly(nv.in[j].shape(), nv.in[j].dtype());
        }
        for (std::size_t k = 0; k < nv.out.size(); ++k) {
            if (m_keepOut[local][k] == 0)
                nv.out[k] = NdArray::shapeOnly(nv.out[k].shape(), nv.out[k].dtype());
        }
        for (auto slot : m_releaseAfter[local])
            s.values[static_cast<std::size_t>(slot)] = NdArray();
    }
    finishForward(s, mb);
}

void StageExecutor::finishForward(MicroBatch& s, MicroBatchId mb)
{
    s.forwardDone = true;
    s.version = m_version;
    if (m_lossSlot >= 0) {
        const auto bytes = m_backend.toHost(s.values[static_cast<std::size_t>(m_lossSlot)]);
        float loss = 0;
        std::memcpy(&loss, bytes.data(), sizeof(float));
        s.loss = loss;
    }
    for (auto t : m_boundaryOut)
        s.outbound.push_back(s.values[static_cast<std::size_t>(slotOf(t))]);
    for (std::size_t slot = 0; slot < s.values.size(); ++slot) {
        if (m_keepValue[slot] == 0 && static_cast<int>(slot) != m_lossSlot)
            s.values[slot] = NdArray();
    }
    for (auto root : m_memory.recomputedTensors) {
        const auto slot = root.index() < m_slot.size() ? slotOf(root) : -1;
        const auto producer = m_graph.tensor(root).producer;
        if (slot < 0 || !producer.valid() || producer.index() < m_begin || producer.index() >= m_end
            || !s.values[static_cast<std::size_t>(slot)].defined())
            continue; // not produced here: kept (recompute needs its producer on this stage)
        s.pendingDrop.push_back(root);
    }
    if (m_boundaryOut.empty())
        applyPending(s, mb);
    trackVersions();
}

std::vector<NdArray> StageExecutor::takeOutbound(MicroBatchId mb)
{
    auto& s = state(mb, "send");
    auto out = std::move(s.outbound);
    s.outbound.clear();
    return out;
}

void StageExecutor::outboundSent(MicroBatchId mb)
{
    applyPending(state(mb, "send"), mb);
}

void StageExecutor::applyPending(MicroBatch& s, MicroBatchId mb)
{
    if (!s.outbound.empty())
        return;
    for (auto root : s.pendingDrop) {
        s.values[static_cast<std::size_t>(slotOf(root))].drop();
        s.dropped.push_back(root);
    }
    s.pendingDrop.clear();
    if (s.pendingSwap.empty())
        return;
    std::vector<NdArray> arrays;
    for (auto root : s.pendingSwap)
        arrays.push_back(s.values[static_cast<std::size_t>(slotOf(root))]);
    s.pendingSwap.clear();
    auto copy = [arrays = std::move(arrays), &pool = m_hostPool]() mutable {
        std::int64_t bytes = 0;
        for (auto& a : arrays) {
            bytes += a.resident() ? a.bytes() : 0; // a view of a storage already out moves nothing
            a.swapOut(pool);
        }
        return bytes;
    };
    if (m_toHost == nullptr) {
        copy();
        return;
    }
    s.swapOutCopy = m_toHost->enqueue({ ActionType::SwapOut, m_id, mb }, std::move(copy));
}

std::optional<double> StageExecutor::loss(MicroBatchId mb) const
{
    const auto it = m_microBatches.find(mb.value);
    return it == m_microBatches.end() ? std::nullopt : it->second.loss;
}

void StageExecutor::swapOut(MicroBatchId mb)
{
    auto& s = state(mb, "swap-out");
    for (auto root : m_memory.swappedTensors) {
        const auto slot = root.index() < m_slot.size() ? slotOf(root) : -1;
        if (slot < 0 || !s.values[static_cast<std::size_t>(slot)].defined())
            continue;
        s.pendingSwap.push_back(root);
    }
    applyPending(s, mb);
}

std::vector<NdArray> StageExecutor::swappedArrays(const MicroBatch& s) const
{
    std::vector<NdArray> arrays;
    for (auto root : m_memory.swappedTensors) {
        const auto slot = root.index() < m_slot.size() ? slotOf(root) : -1;
        if (slot >= 0 && static_cast<std::size_t>(slot) < s.values.size()
            && s.values[static_cast<std::size_t>(slot)].defined())
            arrays.push_back(s.values[static_cast<std::size_t>(slot)]);
    }
    return arrays;
}

void StageExecutor::swapIn(MicroBatchId mb)
{
    auto& s = state(mb, "swap-in");
    applyPending(s, mb);
    if (m_fromHost == nullptr || s.swapInCopy) {
        settleSwaps(s);
        return;
    }
    // The prefetch starts once the swap-out is done (the simulator's SWAP_IN waits for it too).
    auto ready = [out = m_toHost, after = s.swapOutCopy] {
        if (out != nullptr && after)
            out->wait(*after);
    };
    auto copy = [arrays = swappedArrays(s), stage = m_id.value, &device = m_device]() mutable {
        device.setOwner("swap-in of stage " + std::to_string(stage));
        std::int64_t bytes = 0;
        for (auto& a : arrays) {
            bytes += a.resident() ? 0 : a.bytes();
            a.swapIn();
        }
        device.setOwner("");
        return bytes;
    };
    s.swapInCopy = m_fromHost->enqueue({ ActionType::SwapIn, m_id, mb }, std::move(copy), std::move(ready));
}

void StageExecutor::settleSwaps(MicroBatch& s)
{
    if (s.swapInCopy) { // the prefetch waited for the copy out
        s.swapOutCopy.reset();
        m_fromHost->wait(*std::exchange(s.swapInCopy, std::nullopt));
        return;
    }
    if (s.swapOutCopy) // no prefetch was queued: wait for the copy out, then bring it back here
        m_toHost->wait(*std::exchange(s.swapOutCopy, std::nullopt));
    m_device.setOwner("swap-in");
    for (auto& a : swappedArrays(s))
        a.swapIn();
    m_device.setOwner("");
}

void StageExecutor::receiveGradients(MicroBatchId mb, std::vector<NdArray> grads)
{
    auto& s = state(mb, "gradient receive");
    if (grads.size() != m_boundaryOut.size())
        throw Error("stage " + std::to_string(m_id.value) + " received " + std::to_string(grads.size())
            + " gradients, expected " + std::to_string(m_boundaryOut.size()));
    s.received = std::move(grads);
}

void StageExecutor::backward(MicroBatchId mb, BackwardMode mode)
{
    const MemoryUseScope use(MemoryUse::Workspace);
    auto& s = state(mb, "backward");
    for (auto& g : s.received) {
        if (g.defined())
            g.relabel(MemoryUse::Workspace);
    }
    if (!s.forwardDone || s.backwardDone)
        throw Error("stage " + std::to_string(m_id.value) + ": backward of micro-batch " + std::to_string(mb.value)
            + (s.backwardDone ? " twice" : " before its forward"));
    startChunkAction();
    // The memory plan's actions normally did this already; a plan without them still computes right.
    settleSwaps(s);
    recompute(mb);
    // From here each saved value lives in the node values that read it, released node by node
    // (past a split B only what W reads stays).
    s.values.clear();
    s.grads.assign(m_slotTensor.size(), NdArray());
    s.gradOut.assign(m_end - m_begin, {});
    s.weightPending.assign(m_end - m_begin, 0);
    m_device.setOwner("loss gradient");
    if (m_lossSlot >= 0) {
        const float one = 1.0F;
        s.grads[static_cast<std::size_t>(m_lossSlot)] =
            m_backend.fromHost(m_device, m_graph.tensor(m_slotTensor[static_cast<std::size_t>(m_lossSlot)]).shape,
                DType::F32, std::as_bytes(std::span<const float>(&one, 1)));
    }
    m_device.setOwner("");
    if (!m_boundaryOut.empty() && s.received.size() != m_boundaryOut.size())
        throw Error("stage " + std::to_string(m_id.value) + ": backward of micro-batch " + std::to_string(mb.value)
            + " before its gradients arrived");
    for (std::size_t k = 0; k < s.received.size(); ++k)
        s.grads[static_cast<std::size_t>(slotOf(m_boundaryOut[k]))] = std::move(s.received[k]);
    s.received.clear();
    for (std::size_t i = m_end - m_begin; i-- > 0;)
        runNodeBackward(s, i, mode);
    for (auto t : m_boundaryIn)
        s.inputGrads.push_back(m_requiresGrad[t.index()] ? s.grads[static_cast<std::size_t>(slotOf(t))] : NdArray());
    s.grads.clear();
    s.backwardDone = true;
    const bool weightLeft = std::find(s.weightPending.begin(), s.weightPending.end(), 1) != s.weightPending.end();
    if (!weightLeft && (m_boundaryIn.empty() || s.inputGradsTaken))
        m_microBatches.erase(mb.value);
}

void StageExecutor::runNodeBackward(MicroBatch& s, std::size_t local, BackwardMode mode)
{
    const auto& node = m_graph.nodes()[m_begin + local];
    if (const auto* chain = m_fusion.chainOf(m_begin + local); chain != nullptr && chain->softmax == m_begin + local) {
        backwardChain(s, *chain);
        return;
    }
    std::vector<NdArray> gradOut;
    bool any = false;
    for (auto out : node.outputs) {
        auto& g = s.grads[static_cast<std::size_t>(slotOf(out))];
        gradOut.push_back(g);
        any = any || g.defined();
        g = NdArray(); // consumed: free as we go
    }
    if (!any) {
        s.nodes[local] = NodeValues();
        return;
    }
    std::vector<bool> need;
    bool anyNeed = false;
    bool weightLeft = false;
    for (auto in : node.inputs) {
        const bool isParam = m_paramIndex[in.index()] >= 0;
        const bool wanted = m_requiresGrad[in.index()] && (mode == BackwardMode::Full || !isParam);
        weightLeft = weightLeft || (mode == BackwardMode::InputOnly && isParam && m_requiresGrad[in.index()]);
        need.push_back(wanted);
        anyNeed = anyNeed || wanted;
    }
    if (anyNeed) {
        KernelContext ctx { m_device, m_idleRng, true, m_gemm };
        const NodeAccess access(*this, local);
        auto gradIn = m_backend.backward(node, s.nodes[local], gradOut, need, ctx);
        m_device.setOwner(node.name + " (backward)");
        for (std::size_t i = 0; i < node.inputs.size(); ++i) {
            if (!need[i] || !gradIn[i].defined())
                continue;
            const auto id = node.inputs[i];
            const auto p = m_paramIndex[id.index()];
            if (p >= 0) {
                accumulateParameterGradient(p, gradIn[i]);
                continue;
            }
            auto& slot = s.grads[static_cast<std::size_t>(slotOf(id))];
            // A second consumer (residual branch): out of place, views share storage.
            slot = slot.defined() ? m_backend.add(slot, gradIn[i], m_device) : gradIn[i];
        }
        m_device.setOwner("");
    }
    if (weightLeft) { // W reads the output gradients: kept for a later pass, as activations are
        for (auto& g : gradOut) {
            if (g.defined())
                g.relabel(MemoryUse::Activations);
        }
        s.gradOut[local] = std::move(gradOut);
        s.weightPending[local] = 1;
        // Until W only what it reads stays (op_cost's savedForWeightGrad), as the memory model counts.
        auto& nv = s.nodes[local];
        for (std::size_t j = 0; j < nv.in.size(); ++j) {
            if (m_keepForWeight[local][j] == 0 && nv.in[j].defined())
                nv.in[j] = NdArray::shapeOnly(nv.in[j].shape(), nv.in[j].dtype());
        }
        for (auto& out : nv.out) {
            if (out.defined())
                out = NdArray::shapeOnly(out.shape(), out.dtype());
        }
    } else {
        s.nodes[local] = NodeValues();
    }
}

void StageExecutor::backwardWeight(MicroBatchId mb)
{
    const MemoryUseScope use(MemoryUse::Workspace);
    auto& s = state(mb, "weight gradient");
    if (!s.backwardDone)
        throw Error(
            "stage " + std::to_string(m_id.value) + ": W of micro-batch " + std::to_string(mb.value) + " before its B");
    startChunkAction();
    for (std::size_t local = m_end - m_begin; local-- > 0;) {
        if (s.weightPending[local] == 0)
            continue;
        const auto& node = m_graph.nodes()[m_begin + local];
        std::vector<bool> need;
        for (auto in : node.inputs)
            need.push_back(m_paramIndex[in.index()] >= 0 && m_requiresGrad[in.index()]);
        KernelContext ctx { m_device, m_idleRng, true, m_gemm };
        const NodeAccess access(*this, local);
        auto gradIn = m_backend.backward(node, s.nodes[local], s.gradOut[local], need, ctx);
        m_device.setOwner(node.name + " (weight gradient)");
        for (std::size_t i = 0; i < node.inputs.size(); ++i) {
            if (need[i] && gradIn[i].defined())
                accumulateParameterGradient(m_paramIndex[node.inputs[i].index()], gradIn[i]);
        }
        m_device.setOwner("");
        s.nodes[local] = NodeValues();
        s.gradOut[local].clear();
        s.weightPending[local] = 0;
    }
    if (m_boundaryIn.empty() || s.inputGradsTaken)
        m_microBatches.erase(mb.value);
}

std::vector<NdArray> StageExecutor::takeInputGradients(MicroBatchId mb)
{
    auto& s = state(mb, "gradient send");
    if (!s.backwardDone)
        throw Error("stage " + std::to_string(m_id.value) + ": gradient send of micro-batch " + std::to_string(mb.value)
            + " before its backward");
    auto out = std::move(s.inputGrads);
    s.inputGradsTaken = true;
    if (std::find(s.weightPending.begin(), s.weightPending.end(), 1) == s.weightPending.end())
        m_microBatches.erase(mb.value);
    return out;
}

void StageExecutor::trackVersions()
{
    if (!m_weightStashing) { // one version, updated in place (synchronous schedules, FTPipe's async)
        m_peakVersions = std::max(m_peakVersions, 1);
        return;
    }
    std::vector<int> versions { m_version };
    for (const auto& [id, s] : m_microBatches) {
        if (s.forwardDone && std::find(versions.begin(), versions.end(), s.version) == versions.end())
            versions.push_back(s.version);
    }
    m_peakVersions = std::max(m_peakVersions, static_cast<int>(versions.size()));
}

} // namespace ps::engine
