// StageExecutor's state across micro-batches: what it computes once from the graph (boundary
// tensors, which values each node's backward keeps) and what it holds on its device for the whole
// run (parameters, gradients, optimizer state). Forward, backward and the memory actions are in
// stage_executor.cpp.
#include "graph/op_cost.h"
#include "graph/op_registry.h"
#include "runtime/stage_executor.h"
#include "util/error.h"

#include <algorithm>
#include <cstring>

namespace ps::engine {
void StageExecutor::loadConstant(TensorId t)
{
    const auto& tensor = m_graph.tensor(t);
    if (!tensor.data)
        throw Error("constant '" + tensor.name + "' has no values in the project (create it again)");
    DType type = DType::F32;
    const auto bytes = engineHostValues(tensor, type);
    m_device.setOwner("constants");
    m_constants[static_cast<std::size_t>(slotOf(t))] = m_backend.fromHost(m_device, tensor.shape, type, bytes);
}

void StageExecutor::buildKeepSets()
{
    const auto costs = computeOpCosts(m_graph);
    std::vector<char> keep(m_graph.tensorCount(), 0);
    for (std::size_t n = m_begin; n < m_end; ++n) {
        for (auto t : costs[n].savedTensors)
            keep[t.index()] = 1;
    }
    keepRecomputeInputs(keep);
    const auto kept = [&](const Node& node, TensorId t) {
        // The loader's data stays with every node that reads it: the kernels' backward and W passes
        // read more of it than op_cost lists (a weight fed as data, Gather's indices, Mul's operand).
        // Not with a one-input op whose backward reads no input (a ReLU over the images, AmoebaNet's
        // stem), which the memory model does not count either.
        if (keep[t.index()] != 0 || m_graph.tensor(t).kind == TensorKind::Activation)
            return keep[t.index()] != 0;
        const auto& def = opDef(node.op);
        return node.inputs.size() != 1 || def.savedInputs != 0 || def.weightGradReadsInput;
    };
    for (std::size_t n = m_begin; n < m_end; ++n) {
        const auto& node = m_graph.nodes()[n];
        auto& in = m_keepIn.emplace_back();
        for (auto t : node.inputs)
            in.push_back(kept(node, t) ? 1 : 0);
        auto& forWeight = m_keepForWeight.emplace_back();
        for (auto t : node.inputs) {
            const auto& w = costs[n].savedForWeightGrad;
            forWeight.push_back(
                m_graph.tensor(t).kind != TensorKind::Activation || std::find(w.begin(), w.end(), t) != w.end() ? 1
                                                                                                                : 0);
        }
        // An output stays with its producer only where the producer's own backward reads it (Relu,
        // Softmax); the nodes that save it hold it until their backward, as the memory model has it.
        auto& out = m_keepOut.emplace_back();
        const auto& own = costs[n].savedTensors;
        for (auto t : node.outputs)
            out.push_back(std::find(own.begin(), own.end(), t) != own.end() ? 1 : 0);
    }
    m_keepValue.assign(m_slotTensor.size(), 0);
    for (auto root : m_memory.swappedTensors) {
        if (root.index() < m_slot.size() && slotOf(root) >= 0)
            m_keepValue[static_cast<std::size_t>(slotOf(root))] = 1;
    }
    for (auto root : m_memory.recomputedTensors) {
        if (root.index() < m_slot.size() && slotOf(root) >= 0)
            m_keepValue[static_cast<std::size_t>(slotOf(root))] = 1;
    }
    // The value table drops a micro-batch's activation after its last reader in the stage (right
    // after its producer when nothing here reads it), unless it is sent on, swapped, recomputed
    // or the loss.
    std::vector<char> pinned = m_keepValue;
    for (auto t : m_boundaryOut)
        pinned[static_cast<std::size_t>(slotOf(t))] = 1;
    if (m_lossSlot >= 0)
        pinned[static_cast<std::size_t>(m_lossSlot)] = 1;
    const auto transient = [&](TensorId t) {
        const auto kind = m_graph.tensor(t).kind;
        return (kind == TensorKind::Activation || kind == TensorKind::Input) && slotOf(t) >= 0
            && pinned[static_cast<std::size_t>(slotOf(t))] == 0;
    };
    std::vector<std::ptrdiff_t> lastReader(m_slotTensor.size(), -1);
    for (std::size_t n = m_begin; n < m_end; ++n) {
        const auto local = static_cast<std::ptrdiff_t>(n - m_begin);
        for (auto t : m_graph.nodes()[n].inputs) {
            if (transient(t))
                lastReader[static_cast<std::size_t>(slotOf(t))] = local;
        }
        for (auto t : m_graph.nodes()[n].outputs) {
            if (transient(t) && lastReader[static_cast<std::size_t>(slotOf(t))] < local)
                lastReader[static_cast<std::size_t>(slotOf(t))] = local; // read later, or dead
        }
    }
    m_releaseAfter.assign(m_end - m_begin, {});
    for (std::size_t slot = 0; slot < lastReader.size(); ++slot) {
        if (lastReader[slot] >= 0)
            m_releaseAfter[static_cast<std::size_t>(lastReader[slot])].push_back(static_cast<int>(slot));
    }
}

void StageExecutor::buildBoundaries()
{
    const auto lastReader = gradientFlow(m_graph).lastReader; // node index + 1, 0: none
    for (const auto& t : m_graph.tensors()) {
        if (t.kind != TensorKind::Activation || !t.producer.valid())
            continue;
        const std::size_t reader = lastReader[t.id.index()];
        const std::size_t last = reader > t.producer.index() ? reader - 1 : t.producer.index();
        if (t.producer.index() < m_begin && last >= m_begin)
            m_boundaryIn.push_back(t.id);
        if (t.producer.index() < m_end && last >= m_end)
            m_boundaryOut.push_back(t.id);
    }
}

void StageExecutor::setParameter(TensorId id, std::span<const std::byte> bytes)
{
    const auto k = m_paramIndex[id.index()];
    if (k < 0)
        throw Error(
            "stage " + std::to_string(m_id.value) + " does not hold parameter '" + m_graph.tensor(id).name + "'");
    if (m_chunks) {
        writeInto(m_params[static_cast<std::size_t>(k)], bytes);
        return;
    }
    const MemoryUseScope use(MemoryUse::Parameters);
    m_device.setOwner("parameters");
    m_params[static_cast<std::size_t>(k)] = m_backend.fromHost(m_device, m_graph.tensor(id).shape, DType::F32, bytes);
    m_device.setOwner("");
}

std::vector<std::byte> StageExecutor::parameterBytes(TensorId id) const
{
    return m_backend.toHost(m_params[static_cast<std::size_t>(m_paramIndex[id.index()])]);
}

void StageExecutor::setOptimizer(const StageOptimizerConfig& config, bool weightStashing)
{
    if (config.kind != "adamw" && config.kind != "sgd")
        throw Error("unknown optimizer '" + config.kind + "' (adamw or sgd)");
    if (!(config.lr > 0))
        throw Error("the learning rate must be positive, got " + std::to_string(config.lr));
    m_optimizer = config;
    m_weightStashing = weightStashing;
    if (m_chunkElements >= 0) {
        if (weightStashing)
            throw Error("chunk-managed parameters need a synchronous schedule (PipeDream's stashed weight "
                        "versions are not chunked)");
        buildChunks(config.kind == "adamw" ? 2 : 1);
        return;
    }
    const MemoryUseScope use(MemoryUse::OptimizerStates);
    m_device.setOwner("optimizer state");
    m_first.clear();
    m_second.clear();
    for (auto id : m_paramIds) {
        m_first.push_back(m_backend.zeros(m_device, m_graph.tensor(id).shape));
        if (config.kind == "adamw")
            m_second.push_back(m_backend.zeros(m_device, m_graph.tensor(id).shape));
    }
    m_device.setOwner("");
}

std::vector<std::vector<std::byte>> StageExecutor::optimizerState(TensorId id) const
{
    const auto k = static_cast<std::size_t>(m_paramIndex[id.index()]);
    if (m_chunks) {
        std::vector<std::vector<std::byte>> out;
        for (int slot = 0; slot < (m_optimizer.kind == "adamw" ? 2 : 1); ++slot)
            out.push_back(m_backend.toHost(m_chunks->optimizerState(slot, static_cast<std::size_t>(m_chunkIndex[k]))));
        return out;
    }
    std::vector<std::vector<std::byte>> out { m_backend.toHost(m_first[k]) };
    if (!m_second.empty())
        out.push_back(m_backend.toHost(m_second[k]));
    return out;
}

void StageExecutor::setOptimizerState(TensorId id, const std::vector<std::vector<std::byte>>& state, int steps)
{
    const auto k = static_cast<std::size_t>(m_paramIndex[id.index()]);
    const auto& shape = m_graph.tensor(id).shape;
    if (m_chunks) {
        if (state.size() != (m_optimizer.kind == "adamw" ? 2U : 1U))
            throw Error(
                "the checkpoint's optimizer state of '" + m_graph.tensor(id).name + "' is for another optimizer");
        for (std::size_t slot = 0; slot < state.size(); ++slot)
            writeInto(m_chunks->optimizerState(static_cast<int>(slot), static_cast<std::size_t>(m_chunkIndex[k])),
                state[slot]);
        m_optimizerSteps = steps;
        return;
    }
    if (state.size() != (m_second.empty() ? 1U : 2U))
        throw Error("the checkpoint's optimizer state of '" + m_graph.tensor(id).name + "' is for another optimizer");
    const MemoryUseScope use(MemoryUse::OptimizerStates);
    m_device.setOwner("optimizer state");
    m_first[k] = m_backend.fromHost(m_device, shape, DType::F32, state[0]);
    if (!m_second.empty())
        m_second[k] = m_backend.fromHost(m_device, shape, DType::F32, state[1]);
    m_device.setOwner("");
    m_optimizerSteps = steps;
}

void StageExecutor::accumulateParameterGradient(int paramIndex, const NdArray& grad)
{
    if (m_chunks) {
        m_chunks->accumulateGradient(
            static_cast<std::size_t>(m_chunkIndex[static_cast<std::size_t>(paramIndex)]), grad);
        return;
    }
    auto& slot = m_grads[static_cast<std::size_t>(paramIndex)];
    const MemoryUseScope use(MemoryUse::Gradients);
    if (!slot.defined())
        slot = m_backend.copyTo(grad, m_backend, m_device);
    else
        m_backend.accumulate(slot, grad);
}

const NdArray& StageExecutor::gradient(TensorId id) const
{
    const auto k = static_cast<std::size_t>(m_paramIndex[id.index()]);
    return m_chunks ? m_chunks->gradient(static_cast<std::size_t>(m_chunkIndex[k])) : m_grads[k];
}

void StageExecutor::setGradient(TensorId id, NdArray grad)
{
    const auto k = static_cast<std::size_t>(m_paramIndex[id.index()]);
    if (m_chunks) { // into the gradient chunk, wherever it lives
        NdArray slot = m_chunks->gradient(static_cast<std::size_t>(m_chunkIndex[k]));
        m_backend.fill(slot, 0.0F);
        m_backend.accumulate(slot, grad);
        return;
    }
    m_grads[k] = std::move(grad);
}

void StageExecutor::optimizerStep(double lr, float gradScale)
{
    if (m_chunks) {
        chunkOptimizerStep(lr, gradScale);
        return;
    }
    if (m_first.size() != m_params.size())
        throw Error("stage " + std::to_string(m_id.value) + ": optimizer step before setOptimizer");
    ++m_optimizerSteps;
    m_device.setOwner(m_weightStashing ? "stashed weights" : "gradients");
    const AdamWUpdate adamw { static_cast<float>(lr), static_cast<float>(m_optimizer.beta1),
        static_cast<float>(m_optimizer.beta2), static_cast<float>(m_optimizer.eps),
        static_cast<float>(m_optimizer.weightDecay), gradScale, m_optimizerSteps };
    // AdamW updates the whole stage at once (one launch on a GPU); with weight stashing each
    // parameter's gradient goes as soon as its new version exists, as the memory model counts.
    const bool fused = m_optimizer.kind == "adamw" && !m_weightStashing;
    std::vector<Backend::AdamWSlot> slots;
    for (std::size_t k = 0; k < m_params.size(); ++k) {
        if (!m_grads[k].defined()) { // as GraphExecutor::gradient: a parameter no micro-batch reached
            const MemoryUseScope use(MemoryUse::Gradients);
            m_grads[k] = m_backend.zeros(m_device, m_params[k].shape());
        }
        if (m_weightStashing) { // the in-flight micro-batches keep reading the version their forward used
            const MemoryUseScope use(MemoryUse::Parameters);
            m_params[k] = m_backend.copyTo(m_params[k], m_backend, m_device);
        }
        if (fused) {
            slots.push_back({ &m_params[k], &m_grads[k], &m_first[k], &m_second[k] });
            continue;
        }
        if (m_optimizer.kind == "adamw")
            m_backend.adamw(m_params[k], m_grads[k], m_first[k], m_second[k], adamw);
        else
            m_backend.sgd(m_params[k], m_grads[k], m_first[k],
                { static_cast<float>(lr), static_cast<float>(m_optimizer.momentum),
                    static_cast<float>(m_optimizer.weightDecay), gradScale, m_optimizerSteps == 1 });
        m_grads[k] = NdArray();
    }
    if (!slots.empty())
        m_backend.adamwAll(slots, adamw);
    if (fused) {
        for (auto& g : m_grads)
            g = NdArray();
    }
    m_device.setOwner("");
    ++m_version;
    trackVersions();
}

} // namespace ps::engine
