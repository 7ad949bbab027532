// libFuzzer target: a file opened as a project (core/store/project_store.h), read-only, and every
// loader the CLI's `info`/`runs`/`plans` use. A ps::Error is a clean rejection.
#include "fuzz_support.h"
#include "store/project_store.h"
#include "util/error.h"

namespace {

void loadEverything(const ps::ProjectStore& store)
{
    (void)store.tableNames();
    if (store.hasModel())
        (void)store.loadGraph();
    (void)store.loadClusters();
    (void)store.loadPlans();
    (void)store.simulationCount();
    for (const auto& run : store.loadRuns()) {
        (void)store.loadRunMetrics(run.id);
        (void)store.loadRunDeviceMetrics(run.id);
        for (std::int64_t iteration : store.runEventIterations(run.id))
            (void)store.loadRunEvents(run.id, iteration);
    }
    (void)store.latestCheckpoint();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const ps::fuzz::InputFile file(data, size, ".pstudio");
    try {
        const auto store = ps::ProjectStore::open(file.path(), ps::ProjectStore::Access::ReadOnly);
        loadEverything(store);
    } catch (const ps::Error&) {
    }
    return 0;
}
