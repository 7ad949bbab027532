// The gradients of parameters that several stages hold (tied weights: GPT-2's wte read by the
// embedding and the lm_head, T5's shared embedding), summed across those stages in stage order
// before each synchronous update, so every copy receives the same update. When a device's
// backwards are done, each of its stages copies its tied gradients to host buffers kept across
// steps (deposit); each holder then adds the others' copies to its own gradient on its device.
// core/sim/tied_exchange.h prices the same work.
// Depends on: runtime/stage_executor.h, runtime/channel.h (AbortSignal), backend.h.
#pragma once

#include "backend.h"
#include "runtime/channel.h"
#include "runtime/stage_executor.h"

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace ps::engine {

class TiedGradients
{
public:
    TiedGradients(const std::vector<std::unique_ptr<StageExecutor>>& stages, AbortSignal& abort);

    [[nodiscard]] bool any() const
    {
        return !m_holders.empty();
    }

    // A new step: every deposit is awaited again (their host buffers are kept for reuse).
    void reset();
    // Copies the stage's final gradients of its tied parameters to the host, into the buffers this
    // stage filled last step (the stage's own slots: no other thread writes them).
    void deposit(const StageExecutor& stage, const Backend& backend);
    // Waits for every holder's deposit and gives the stage the sum, in stage order, on its device.
    // Throws Aborted when the run stops while it waits.
    void apply(StageExecutor& stage, const Backend& backend, const Graph& graph);

private:
    struct Deposit
    {
        std::vector<std::byte> bytes; // kept across steps
        bool present = false; // the holder had a gradient this step
        bool filled = false; // deposited this step
    };

    // The holders' gradients summed in stage order ((g0 + g1) + g2 ...), the same bits on every
    // holder. Where the stage's own gradient is the first or second term it is the sum, added to in
    // place (a + b == b + a exactly): the undefined array returned says nothing is left to set.
    static NdArray sumInStageOrder(StageExecutor& stage, const Backend& backend, TensorId id, const Shape& shape,
        const std::map<std::size_t, Deposit>& deposits);

    AbortSignal& m_abort;
    std::map<std::uint32_t, std::vector<std::size_t>> m_holders; // tensor -> stages
    std::mutex m_mutex;
    std::condition_variable m_ready;
    std::map<std::uint32_t, std::map<std::size_t, Deposit>> m_deposits; // tensor -> stage -> deposit
};

} // namespace ps::engine
