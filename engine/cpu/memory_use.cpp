// The allocation labels (cpu/ndarray.h's MemoryUse): their names and each thread's current one.
#include "cpu/ndarray.h"

#include <array>

namespace ps::engine {
namespace {

    thread_local MemoryUse tCurrentUse = MemoryUse::Workspace;

    constexpr std::array<std::string_view, kMemoryUses> kUseNames = { "parameters", "gradients", "optimizer_states",
        "activations", "workspace", "messages" };

} // namespace

std::string_view toString(MemoryUse use)
{
    return kUseNames[static_cast<std::size_t>(use)];
}

MemoryUse currentMemoryUse()
{
    return tCurrentUse;
}

MemoryUseScope::MemoryUseScope(MemoryUse use)
    : m_previous(tCurrentUse)
{
    tCurrentUse = use;
}

MemoryUseScope::~MemoryUseScope()
{
    tCurrentUse = m_previous;
}

} // namespace ps::engine
